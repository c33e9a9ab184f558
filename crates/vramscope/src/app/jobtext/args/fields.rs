//! The job's own (not nested) fields from their flags: the model, the switches, and the flags
//! whose text needs reading first (GiB, `auto`, `NxWxH`, a price, `none`).

use super::JobArgs;
use crate::app::jobtext::error::{number_value, JobError};
use serde_json::Value;
use vramscope_core::job::Job;

/// `--reserve GIB` as the job's `reserve` in bytes (GiB × 2³⁰, rounded to the byte).
fn reserve_gib(s: &str) -> Result<Value, JobError> {
    match s.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && g >= 0.0 => Ok(Value::from((g * (1u64 << 30) as f64).round())),
        _ => Err(JobError(format!(
            "reserve: --reserve takes GiB as a non-negative number, e.g. 2 or 1.5 (got '{s}')"
        ))),
    }
}

/// `--host-ram GIB|auto` as the job's `host_ram` in bytes: GiB × 2³⁰ rounded to the byte, or
/// this machine's `MemAvailable` (/proc/meminfo, kB = KiB) for `auto`.
fn host_ram_gib(s: &str) -> Result<Value, JobError> {
    if s.trim().eq_ignore_ascii_case("auto") {
        let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| {
            JobError(format!(
                "host_ram: --host-ram auto reads /proc/meminfo ({e}); give GiB instead"
            ))
        })?;
        return mem_available(&text).map(Value::from).ok_or_else(|| {
            JobError("host_ram: /proc/meminfo has no MemAvailable line; give GiB instead".into())
        });
    }
    match s.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && g >= 0.0 => Ok(Value::from((g * (1u64 << 30) as f64).round())),
        _ => Err(JobError(format!(
            "host_ram: --host-ram takes GiB as a non-negative number or `auto` (got '{s}')"
        ))),
    }
}

/// Bytes of `MemAvailable` in /proc/meminfo's text (the kernel writes kB meaning KiB).
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `--images NxWxH` as the job's `images` object (the job checks the numbers).
fn images(s: &str) -> Result<Value, JobError> {
    let nums: Vec<Option<u64>> = s.split(['x', 'X']).map(|p| p.trim().parse().ok()).collect();
    match nums.as_slice() {
        [Some(n), Some(w), Some(h)] => Ok(serde_json::json!({"count": n, "width": w, "height": h})),
        _ => Err(JobError(format!(
            "images: --images takes COUNTxWIDTHxHEIGHT, e.g. 2x1024x768 (got '{s}')"
        ))),
    }
}

/// `--price-per-gpu-hour PRICE` as a JSON number (the job checks it is positive).
fn price(s: &str) -> Result<Value, JobError> {
    match s.trim().parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 => Ok(Value::from(p)),
        _ => Err(JobError(format!(
            "price_per_gpu_hour: --price-per-gpu-hour takes a positive number, e.g. 2.5 (got \
             '{s}')"
        ))),
    }
}

/// `none` / `null` → JSON null (no GPU, default KV dtype), else the string.
fn nullable(s: &str) -> Value {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" | "null" | "" => Value::Null,
        _ => Value::String(s.to_string()),
    }
}

impl JobArgs {
    /// The model and the job's own (not nested) fields.
    pub(super) fn apply_fields(&self, job: &mut Job) -> Result<(), JobError> {
        if let Some(m) = &self.model {
            job.model = Some(Value::String(m.clone()));
        }
        if self.assume_llama {
            job.assume_llama = Some(true);
        }
        if self.optimizer_in_backward {
            job.optimizer_in_backward = Some(Value::Bool(true));
        }
        if self.compile {
            job.compile = Some(Value::Bool(true));
        }
        if let Some(o) = &self.activation_offload {
            job.activation_offload = Some(Value::String(o.clone()));
        }
        if let Some(r) = &self.dpo_reference {
            job.reference_model = Some(Value::String(r.clone()));
        }
        if self.packing {
            job.packing = Some(Value::Bool(true));
        }
        if self.kbit_prepare {
            job.kbit_prepare = Some(Value::Bool(true));
        }
        if let Some(b) = &self.checkpoint_reentrant {
            job.checkpoint_reentrant = Some(Value::String(b.clone()));
        }
        let text = |dst: &mut Option<String>, src: &Option<String>| {
            if let Some(s) = src {
                *dst = Some(s.clone());
            }
        };
        text(&mut job.task, &self.task);
        text(&mut job.precision, &self.precision);
        text(&mut job.optimizer, &self.optimizer);
        text(&mut job.checkpointing, &self.checkpointing);
        text(&mut job.attention, &self.attention);
        text(&mut job.weights, &self.weights);
        text(&mut job.framework, &self.framework);
        text(&mut job.loss, &self.loss);
        text(&mut job.cuda_module_loading, &self.cuda_module_loading);
        text(&mut job.zero_grad, &self.zero_grad);
        text(&mut job.optimizer_impl, &self.optimizer_impl);
        if let Some(v) = &self.torch_version {
            job.torch_version = Some(Value::String(v.clone()));
        }
        if let Some(v) = &self.transformers_version {
            job.transformers_version = Some(Value::String(v.clone()));
        }
        let num = |dst: &mut Option<Value>, src: &Option<String>| {
            if let Some(s) = src {
                *dst = Some(number_value(s));
            }
        };
        num(&mut job.batch, &self.batch);
        num(&mut job.grad_accum, &self.grad_accum);
        num(&mut job.seq, &self.seq);
        num(&mut job.new_tokens, &self.new_tokens);
        if let Some(g) = &self.gpu {
            job.gpu = Some(nullable(g));
        }
        if let Some(k) = &self.kv_dtype {
            job.kv_dtype = Some(nullable(k));
        }
        if let Some(r) = &self.reserve {
            job.reserve = Some(reserve_gib(r)?);
        }
        if let Some(h) = &self.host_ram {
            job.host_ram = Some(host_ram_gib(h)?);
        }
        if let Some(c) = &self.alloc_conf {
            job.allocator = Some(Value::String(c.clone()));
        }
        if let Some(p) = &self.price_per_gpu_hour {
            job.price_per_gpu_hour = Some(price(p)?);
        }
        if let Some(i) = &self.images {
            job.images = Some(images(i)?);
        }
        if let Some(f) = &self.freeze {
            let parts = f.split(',').map(|p| Value::String(p.trim().to_string()));
            job.freeze = Some(Value::Array(parts.collect()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `--reserve` is GiB: 2 GiB = 2 × 1,073,741,824 = 2,147,483,648 bytes; 1.5 GiB =
    /// 1,610,612,736 bytes.
    #[test]
    fn reserve_flag_is_gib() {
        // 64 GiB = 64 · 2^30 = 68,719,476,736 bytes; MemAvailable 1000 kB = 1,024,000 bytes.
        assert_eq!(host_ram_gib("64").unwrap(), json!(68719476736.0));
        assert!(host_ram_gib("-1").unwrap_err().0.starts_with("host_ram:"));
        assert_eq!(
            mem_available("MemTotal: 2000 kB\nMemAvailable:    1000 kB\n"),
            Some(1_024_000)
        );
        assert_eq!(reserve_gib("2").unwrap(), json!(2147483648.0));
        assert_eq!(reserve_gib("1.5").unwrap(), json!(1610612736.0));
        for bad in ["-1", "two", "inf", ""] {
            assert!(
                reserve_gib(bad).unwrap_err().0.starts_with("reserve:"),
                "{bad}"
            );
        }
        let args = JobArgs {
            reserve: Some("1.5".into()),
            ..JobArgs::default()
        };
        let r = args.to_job().unwrap().resolve(None).unwrap();
        assert_eq!(r.reserve, 1_610_612_736);
    }
}
