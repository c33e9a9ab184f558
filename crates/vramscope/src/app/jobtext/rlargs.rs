//! The flags of the job's `rl` object (`task: "rl"`): the algorithm, the reference model, the
//! generations and lengths, the vLLM generator. Each flag sets one key of `rl` (or of
//! `rl.generator`) as written, over a job file's; `Job::resolve` checks them.

use super::error::{number_value, JobError};
use clap::Args;
use serde_json::{Map, Value};
use vramscope_core::job::Job;

/// `--task rl` flags.
#[derive(Debug, Clone, Default, Args)]
pub struct RlArgs {
    /// RL algorithm: grpo, dpo (ppo is refused: not modelled yet). [default: grpo]
    #[arg(long, value_name = "ALGORITHM", help_heading = "RL (--task rl)")]
    pub rl_algorithm: Option<String>,
    /// A frozen reference model beside the policy (`--reference-model` or `=false`).
    /// [default: false for grpo (TRL beta 0), true for dpo]
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", help_heading = "RL (--task rl)")]
    pub reference_model: Option<String>,
    /// Completions generated per prompt (TRL num_generations). [default: 8]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "RL (--task rl)"
    )]
    pub num_generations: Option<String>,
    /// Prompt tokens (TRL max_prompt_length). [default: 512]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "RL (--task rl)"
    )]
    pub prompt_len: Option<String>,
    /// Completion tokens (TRL max_completion_length). [default: 512]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "RL (--task rl)"
    )]
    pub completion_len: Option<String>,
    /// Generate with vLLM taking this fraction of the GPU (TRL vllm_gpu_memory_utilization).
    /// [default: 0.3 once a vLLM generator is given]
    #[arg(
        long,
        value_name = "FRACTION",
        allow_negative_numbers = true,
        help_heading = "RL (--task rl)"
    )]
    pub vllm_utilization: Option<String>,
    /// vLLM sleeps between generations, releasing its weights and KV pool for training (TRL
    /// vllm_enable_sleep_mode). [default: false]
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", help_heading = "RL (--task rl)")]
    pub vllm_sleep: Option<String>,
    /// vLLM on the training GPUs (true, TRL vllm_mode colocate) or on its own (false, server).
    /// [default: true once a vLLM generator is given]
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", help_heading = "RL (--task rl)")]
    pub vllm_colocate: Option<String>,
}

/// `true`/`false` as flags write them; anything else passes through for the job to name.
fn boolean(s: &str) -> Value {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Value::Bool(true),
        "false" | "0" | "no" | "off" => Value::Bool(false),
        _ => Value::String(s.to_string()),
    }
}

/// The object at `slot` (made when absent), or an error naming `field`.
fn object<'a>(slot: &'a mut Value, field: &str) -> Result<&'a mut Map<String, Value>, JobError> {
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(o) => Ok(o),
        other => Err(JobError(format!(
            "{field}: must be an object (got {other})"
        ))),
    }
}

impl RlArgs {
    fn generator_flags(&self) -> [(&'static str, Option<Value>); 3] {
        [
            (
                "gpu_memory_utilization",
                self.vllm_utilization.as_deref().map(number_value),
            ),
            ("sleep", self.vllm_sleep.as_deref().map(boolean)),
            ("colocate", self.vllm_colocate.as_deref().map(boolean)),
        ]
    }

    /// Lays the given flags over the job's `rl`; any of them with no task given means
    /// `--task rl`.
    pub fn apply(&self, job: &mut Job) -> Result<(), JobError> {
        let fields: [(&str, Option<Value>); 5] = [
            ("algorithm", self.rl_algorithm.clone().map(Value::String)),
            (
                "reference_model",
                self.reference_model.as_deref().map(boolean),
            ),
            (
                "num_generations",
                self.num_generations.as_deref().map(number_value),
            ),
            ("prompt_len", self.prompt_len.as_deref().map(number_value)),
            (
                "completion_len",
                self.completion_len.as_deref().map(number_value),
            ),
        ];
        let generator = self.generator_flags();
        let any_generator = generator.iter().any(|(_, v)| v.is_some());
        if fields.iter().all(|(_, v)| v.is_none()) && !any_generator {
            return Ok(());
        }
        if job.task.is_none() {
            job.task = Some("rl".into());
        }
        let rl = object(job.rl.get_or_insert(Value::Null), "rl")?;
        for (k, v) in fields {
            if let Some(v) = v {
                rl.insert(k.into(), v);
            }
        }
        if any_generator {
            let g = object(rl.entry("generator").or_insert(Value::Null), "rl.generator")?;
            g.insert("engine".into(), Value::String("vllm".into()));
            for (k, v) in generator {
                if let Some(v) = v {
                    g.insert(k.into(), v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The flags of the brief's example map key by key onto the contract's `rl` object.
    #[test]
    fn flags_make_the_rl_object() {
        let a = RlArgs {
            rl_algorithm: Some("grpo".into()),
            num_generations: Some("8".into()),
            prompt_len: Some("512".into()),
            completion_len: Some("1024".into()),
            vllm_utilization: Some("0.3".into()),
            vllm_sleep: Some("true".into()),
            ..RlArgs::default()
        };
        let mut job = Job::default();
        a.apply(&mut job).unwrap();
        assert_eq!(job.task.as_deref(), Some("rl"));
        assert_eq!(
            job.rl,
            Some(
                json!({"algorithm": "grpo", "num_generations": 8, "prompt_len": 512,
                        "completion_len": 1024,
                        "generator": {"engine": "vllm", "gpu_memory_utilization": 0.3,
                                      "sleep": true}})
            )
        );
        // No RL flag: the job is untouched.
        let mut job = Job::default();
        RlArgs::default().apply(&mut job).unwrap();
        assert_eq!(job, Job::default());
        // A job file's rl that is not an object is named.
        let mut job = Job {
            rl: Some(json!(3)),
            ..Job::default()
        };
        let e = a.apply(&mut job).unwrap_err().0;
        assert!(e.starts_with("rl:"), "{e}");
    }
}
