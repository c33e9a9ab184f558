//! The job's nested sections from their flags: the parallel layout (`parallel`), the PEFT
//! method (`peft`) and the serving engine's settings (`engine`).

use super::JobArgs;
use crate::app::jobtext::error::{number_value, JobError};
use serde_json::{Map, Value};
use vramscope_core::job::Job;

/// Sets `key` in the object at `slot` (creating it), or fails naming `field` when the file
/// holds something other than an object there.
fn set_in(slot: &mut Option<Value>, field: &str, key: &str, v: Value) -> Result<(), JobError> {
    if slot.as_ref().is_none_or(Value::is_null) {
        *slot = Some(Value::Object(Map::new()));
    }
    match slot {
        Some(Value::Object(o)) => {
            o.insert(key.to_string(), v);
            Ok(())
        }
        Some(other) => Err(JobError(format!(
            "{field}: must be an object to take --{} (got {other})",
            key.replace('_', "-")
        ))),
        None => unreachable!("set above"),
    }
}

impl JobArgs {
    /// `parallel`: a flag for gpus (or dp) alone means "derive the other", so a file's dp (or
    /// gpus) that would contradict it is dropped rather than reported as a conflict.
    pub(super) fn apply_parallel(&self, job: &mut Job) -> Result<(), JobError> {
        let par: [(&str, &Option<String>); 9] = [
            ("gpus", &self.gpus),
            ("dp", &self.dp),
            ("tp", &self.tp),
            ("pp", &self.pp),
            ("cp", &self.cp),
            ("ep", &self.ep),
            ("zero", &self.zero),
            ("offload", &self.offload),
            ("microbatches", &self.microbatches),
        ];
        if par.iter().all(|(_, v)| v.is_none()) && self.sp.is_none() {
            return Ok(());
        }
        if let Some(Value::Object(o)) = &mut job.parallel {
            if self.gpus.is_some() && self.dp.is_none() {
                o.remove("dp");
            }
            if self.dp.is_some() && self.gpus.is_none() {
                o.remove("gpus");
            }
        }
        for (key, v) in par {
            if let Some(s) = v {
                let value = if key == "offload" {
                    Value::String(s.clone())
                } else {
                    number_value(s)
                };
                set_in(&mut job.parallel, "parallel", key, value)?;
            }
        }
        if let Some(s) = &self.sp {
            let value = match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Value::Bool(true),
                "false" | "0" | "no" | "off" => Value::Bool(false),
                _ => Value::String(s.clone()),
            };
            set_in(&mut job.parallel, "parallel", "sp", value)?;
        }
        Ok(())
    }

    /// `peft`: --lora / --qlora set the method and rank; alpha and targets refine a method
    /// given here or in the file.
    pub(super) fn apply_peft(&self, job: &mut Job) -> Result<(), JobError> {
        let method = match (&self.lora, &self.qlora) {
            (Some(r), _) => Some(("lora", r)),
            (None, Some(r)) => Some(("qlora", r)),
            (None, None) => None,
        };
        if let Some((m, rank)) = method {
            // A new method starts from the file's peft settings but replaces method and rank.
            set_in(&mut job.peft, "peft", "method", Value::String(m.into()))?;
            set_in(&mut job.peft, "peft", "rank", number_value(rank))?;
        }
        if self.lora_alpha.is_none()
            && self.lora_targets.is_none()
            && self.lora_dtype.is_none()
            && self.lora_dropout.is_none()
            && self.lora_modules_to_save.is_none()
        {
            return Ok(());
        }
        if job.peft.as_ref().is_none_or(Value::is_null) {
            return Err(JobError(
                "peft: --lora-alpha, --lora-targets, --lora-dtype, --lora-dropout and \
                 --lora-modules-to-save need --lora RANK or --qlora RANK (or a peft object in \
                 the job file)"
                    .into(),
            ));
        }
        if let Some(d) = &self.lora_dtype {
            set_in(
                &mut job.peft,
                "peft",
                "adapter_dtype",
                Value::String(d.clone()),
            )?;
        }
        if let Some(p) = &self.lora_dropout {
            set_in(&mut job.peft, "peft", "dropout", number_value(p))?;
        }
        if let Some(a) = &self.lora_alpha {
            set_in(&mut job.peft, "peft", "alpha", number_value(a))?;
        }
        if let Some(t) = &self.lora_targets {
            let list = t
                .iter()
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect();
            set_in(&mut job.peft, "peft", "targets", Value::Array(list))?;
        }
        if let Some(m) = &self.lora_modules_to_save {
            let list = m
                .iter()
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect();
            set_in(&mut job.peft, "peft", "modules_to_save", Value::Array(list))?;
        }
        Ok(())
    }

    /// `engine`: the serving engine's settings.
    pub(super) fn apply_engine(&self, job: &mut Job) -> Result<(), JobError> {
        let engine: [(&str, &Option<String>); 7] = [
            ("gpu_memory_utilization", &self.gpu_memory_utilization),
            ("mem_fraction_static", &self.mem_fraction_static),
            ("max_model_len", &self.max_model_len),
            ("max_num_batched_tokens", &self.max_num_batched_tokens),
            ("block_size", &self.block_size),
            ("n_gpu_layers", &self.n_gpu_layers),
            ("host_memory_gbps", &self.host_memory_gbps),
        ];
        for (key, v) in engine {
            if let Some(s) = v {
                set_in(&mut job.engine, "engine", key, number_value(s))?;
            }
        }
        if let Some(c) = &self.kv_cache {
            set_in(&mut job.engine, "engine", "cache", Value::String(c.clone()))?;
        }
        Ok(())
    }
}
