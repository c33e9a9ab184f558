//! The job's `rl` (contract, `task: "rl"`): an RL step where the policy trains and a generator
//! makes its completions — the algorithm, the reference model, the generator (a vLLM engine on
//! the training GPUs or elsewhere), generations per prompt, prompt and completion lengths.
//! Defaults are TRL's (`trl/trainer/grpo_config.py`).

pub use super::enums::RlAlgorithm;
use super::fields::{boolean, count, object, text};
use crate::error::CoreError;
use serde::Serialize;
use serde_json::{Map, Value};

/// TRL `GRPOConfig.num_generations` default.
pub const TRL_NUM_GENERATIONS: u64 = 8;
/// TRL `max_prompt_length` default (TRL < 1.0; 1.0 no longer truncates prompts).
pub const TRL_PROMPT_LEN: u64 = 512;
/// TRL `GRPOConfig.max_completion_length` default.
pub const TRL_COMPLETION_LEN: u64 = 512;
/// TRL `GRPOConfig.vllm_gpu_memory_utilization` default (colocate mode).
pub const TRL_VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.3;

/// The generator of the completions (contract `rl.generator`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generator {
    /// Always `vllm`.
    pub engine: &'static str,
    /// On the training GPUs (TRL `vllm_mode: colocate`), or on GPUs of its own (`server`).
    pub colocate: bool,
    /// vLLM's `gpu_memory_utilization` (TRL `vllm_gpu_memory_utilization`), in (0, 1).
    pub gpu_memory_utilization: f64,
    /// vLLM's sleep mode between generations (TRL `vllm_enable_sleep_mode`: `sleep(level=2)`).
    pub sleep: bool,
}

/// The resolved `rl` object, every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rl {
    pub algorithm: RlAlgorithm,
    /// A frozen reference model beside the policy (TRL GRPO: `beta` ≠ 0; DPO: unless
    /// `precompute_ref_log_probs`).
    pub reference_model: bool,
    /// `null`: the policy generates itself (transformers' `generate`, TRL `use_vllm: false`).
    pub generator: Option<Generator>,
    /// Completions per prompt (GRPO, PPO); `null` for DPO, which trains on given pairs.
    pub num_generations: Option<u64>,
    pub prompt_len: u64,
    pub completion_len: u64,
}

impl Rl {
    /// Tokens of one training sequence: prompt and completion.
    pub fn sequence_len(&self) -> u64 {
        self.prompt_len + self.completion_len
    }

    /// The colocated vLLM engine, if the generator is one.
    pub fn colocated(&self) -> Option<&Generator> {
        self.generator.as_ref().filter(|g| g.colocate)
    }
}

const MAX_LEN: u64 = 1 << 24;

/// Reads `rl` for a job whose task is `rl` (absent or null = every default).
pub(super) fn parse_rl(v: Option<&Value>) -> Result<Rl, CoreError> {
    let empty = Map::new();
    let obj = object("rl", v, "an object")?.unwrap_or(&empty);
    known_keys("rl", obj, &KEYS)?;
    let algorithm = match text("rl.algorithm", obj.get("algorithm"))? {
        Some(s) => RlAlgorithm::parse("rl.algorithm", s)?,
        None => RlAlgorithm::Grpo,
    };
    let dpo = algorithm == RlAlgorithm::Dpo;
    let reference_model = boolean(
        "rl.reference_model",
        obj.get("reference_model"),
        algorithm != RlAlgorithm::Grpo,
    )?;
    let generator = parse_generator(obj.get("generator"))?;
    if dpo && generator.is_some() {
        return Err(CoreError::field(
            "rl.generator",
            "dpo trains on given chosen/rejected pairs and generates nothing: leave the generator out",
        ));
    }
    let gens = obj.get("num_generations").filter(|v| !v.is_null());
    if dpo && gens.is_some() {
        return Err(CoreError::field(
            "rl.num_generations",
            "dpo trains on given chosen/rejected pairs and generates nothing: leave it out",
        ));
    }
    let num_generations = (!dpo)
        .then(|| count("rl.num_generations", gens, TRL_NUM_GENERATIONS, 1, MAX_LEN))
        .transpose()?;
    let prompt_len = count(
        "rl.prompt_len",
        obj.get("prompt_len"),
        TRL_PROMPT_LEN,
        1,
        MAX_LEN,
    )?;
    let completion_len = count(
        "rl.completion_len",
        obj.get("completion_len"),
        TRL_COMPLETION_LEN,
        1,
        MAX_LEN,
    )?;
    Ok(Rl {
        algorithm,
        reference_model,
        generator,
        num_generations,
        prompt_len,
        completion_len,
    })
}

const KEYS: [&str; 6] = [
    "algorithm",
    "reference_model",
    "generator",
    "num_generations",
    "prompt_len",
    "completion_len",
];
const GENERATOR_KEYS: [&str; 4] = ["engine", "colocate", "gpu_memory_utilization", "sleep"];

/// A key the object does not know is an error naming it (a typo must not pass unread).
fn known_keys(field: &str, obj: &Map<String, Value>, keys: &[&str]) -> Result<(), CoreError> {
    match obj.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(CoreError::field(
            format!("{field}.{k}"),
            format!(
                "is not a setting vramscope reads (it reads {})",
                keys.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

fn parse_generator(v: Option<&Value>) -> Result<Option<Generator>, CoreError> {
    let Some(obj) = object("rl.generator", v, "null or an object")? else {
        return Ok(None);
    };
    known_keys("rl.generator", obj, &GENERATOR_KEYS)?;
    match text("rl.generator.engine", obj.get("engine"))? {
        None => {}
        Some(e) if e.trim().eq_ignore_ascii_case("vllm") => {}
        Some(e) => {
            return Err(CoreError::field(
                "rl.generator.engine",
                format!("'{e}' is not modelled; vllm is"),
            ))
        }
    }
    let flag = |key: &str, default| boolean(&format!("rl.generator.{key}"), obj.get(key), default);
    let util = match obj.get("gpu_memory_utilization") {
        None | Some(Value::Null) => TRL_VLLM_GPU_MEMORY_UTILIZATION,
        Some(v) => match v.as_f64() {
            Some(f) if f > 0.0 && f < 1.0 => f,
            _ => {
                return Err(CoreError::field(
                    "rl.generator.gpu_memory_utilization",
                    format!("must be a fraction between 0 and 1 (got {v})"),
                ))
            }
        },
    };
    Ok(Some(Generator {
        engine: "vllm",
        colocate: flag("colocate", true)?,
        gpu_memory_utilization: util,
        sleep: flag("sleep", false)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// TRL's defaults (`grpo_config.py`): num_generations 8, max_completion_length 512,
    /// vllm_gpu_memory_utilization 0.3, beta 0.0 (no reference model), sleep off; vLLM mode
    /// colocate (TRL ≥ 1.0's default).
    #[test]
    fn defaults_are_trls() {
        let r = parse_rl(None).unwrap();
        assert_eq!(r.algorithm, RlAlgorithm::Grpo);
        assert!(!r.reference_model);
        assert_eq!(r.generator, None);
        assert_eq!(
            (r.num_generations, r.prompt_len, r.completion_len),
            (Some(8), 512, 512)
        );
        let r = parse_rl(Some(&json!({"generator": {"engine": "vllm"}}))).unwrap();
        let g = r.generator.unwrap();
        assert!(g.colocate && !g.sleep);
        assert_eq!(g.gpu_memory_utilization, 0.3);
        let r = parse_rl(Some(&json!({"algorithm": "dpo"}))).unwrap();
        assert!(r.reference_model);
        assert_eq!(r.num_generations, None);
    }

    #[test]
    fn nonsense_is_named() {
        for (v, field) in [
            (json!({"algorithm": "ppp"}), "rl.algorithm"),
            (json!({"num_generations": 0}), "rl.num_generations"),
            (json!({"prompt_len": -1}), "rl.prompt_len"),
            (json!({"reference_model": "yes"}), "rl.reference_model"),
            (
                json!({"generator": {"engine": "tgi"}}),
                "rl.generator.engine",
            ),
            (
                json!({"generator": {"gpu_memory_utilization": 1.5}}),
                "rl.generator.gpu_memory_utilization",
            ),
            (json!({"generator": {"sleep": 1}}), "rl.generator.sleep"),
            (json!({"generator": {"slep": true}}), "rl.generator.slep"),
            (json!({"generations": 4}), "rl.generations"),
            (json!({"algorithm": "dpo", "generator": {}}), "rl.generator"),
            (
                json!({"algorithm": "dpo", "num_generations": 2}),
                "rl.num_generations",
            ),
            (json!([1]), "rl"),
        ] {
            let e = parse_rl(Some(&v)).unwrap_err().to_string();
            assert!(e.starts_with(field), "{v}: {e}");
        }
    }
}
