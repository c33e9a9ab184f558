//! The serving engines' own settings (contract `engine`), read once when the job is resolved:
//! the estimator reads the typed fields, the report echoes the object as written (with any
//! settings vramscope does not read). Which settings an engine reads, and their defaults, are
//! the engine's own (`engines/<engine>/settings.rs`, dispatched by `engines/spec.rs`); this
//! file holds the settings' shape and the value readers they share.

use super::enums::Framework;
use crate::error::CoreError;
use serde::Serialize;
use serde_json::{Map, Value};

/// The engine settings of a job. Only the settings of the job's own engine are read (vLLM's
/// for `framework: vllm`, llama.cpp's for `llama.cpp`); the others stay `None`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineSettings {
    written: Map<String, Value>,
    /// vLLM `gpu_memory_utilization`, in (0, 1].
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM `block_size` (tokens per KV block).
    pub block_size: Option<u64>,
    /// vLLM `max_num_batched_tokens`.
    pub max_num_batched_tokens: Option<u64>,
    /// vLLM `max_num_seqs`.
    pub max_num_seqs: Option<u64>,
    /// vLLM `max_model_len`.
    pub max_model_len: Option<u64>,
    /// llama.cpp `n_gpu_layers` (`-ngl`); ollama's `num_gpu` option.
    pub n_gpu_layers: Option<u64>,
    /// SGLang `mem_fraction_static`, in (0, 1].
    pub mem_fraction_static: Option<f64>,
    /// SGLang `context_length`.
    pub context_length: Option<u64>,
    /// SGLang `max_running_requests`.
    pub max_running_requests: Option<u64>,
    /// SGLang `chunked_prefill_size`.
    pub chunked_prefill_size: Option<u64>,
    /// SGLang `cuda_graph_max_bs`.
    pub cuda_graph_max_bs: Option<u64>,
    /// ollama `num_ctx`: the context of each parallel slot.
    pub num_ctx: Option<u64>,
    /// `framework: pytorch` inference: the KV cache Hugging Face `generate` builds
    /// (`cache_implementation`); `None` = transformers' default, the dynamic cache.
    pub cache: Option<GenerateCache>,
    /// llama.cpp and ollama: the host's memory bandwidth in GB/s (`engine.host_memory_gbps`),
    /// at which the layers left on the CPU are read per generated token
    /// (`throughput::infer::split`); `None` = the default DDR5 figure there.
    pub host_memory_gbps: Option<f64>,
}

/// The KV cache of Hugging Face `generate` (contract `engine.cache`, transformers'
/// `GenerationConfig.cache_implementation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerateCache {
    /// `DynamicCache` (the default): each layer's keys and values grow by `torch.cat` per step.
    Dynamic,
    /// `StaticCache` (`cache_implementation="static"`): each layer's keys and values
    /// preallocated at prompt + new tokens (`cache_utils.py` `StaticLayer`).
    Static,
}

impl GenerateCache {
    /// Reads `engine.cache`: `dynamic` or `static`, case-insensitively.
    pub fn parse(v: &Value) -> Result<Self, CoreError> {
        let s = v.as_str().map(str::to_ascii_lowercase);
        match s.as_deref() {
            Some("dynamic") => Ok(GenerateCache::Dynamic),
            Some("static") => Ok(GenerateCache::Static),
            _ => Err(CoreError::field(
                "engine.cache",
                format!("must be \"dynamic\" or \"static\" (got {v})"),
            )),
        }
    }
}

impl EngineSettings {
    /// The settings as written (an object's entries), none read yet: each engine's
    /// `EngineSpec::read_settings` (`engines/<engine>/settings.rs`) fills its own fields.
    pub(crate) fn written(written: Map<String, Value>) -> Self {
        EngineSettings {
            written,
            ..EngineSettings::default()
        }
    }

    /// The settings as written, to read from.
    pub(crate) fn entries(&self) -> &Map<String, Value> {
        &self.written
    }

    /// Writes one setting, read by nobody yet (`EngineSettings::set` reads them again).
    pub(crate) fn write(&mut self, key: &str, v: Value) {
        self.written.insert(key.into(), v);
    }

    /// A setting as written.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.written.get(key)
    }

    /// Whether `generate` builds a `StaticCache`.
    pub fn static_cache(&self) -> bool {
        self.cache == Some(GenerateCache::Static)
    }
}

impl Serialize for EngineSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.written.serialize(s)
    }
}

/// `engine.cache`: only Hugging Face `generate` (`framework: pytorch`) has a cache
/// implementation to choose; a serving or training engine keeps its own (vLLM's and SGLang's
/// paged pools, llama.cpp's `n_ctx` buffer), so the setting is refused there. A `pytorch`
/// training job accepts it and reads nothing of it (as `new_tokens`): the validation scorer
/// probes a field on a default (training) job, `../shared/validation/score.py` `supports`.
pub(crate) fn read_cache(
    w: &Map<String, Value>,
    framework: Framework,
) -> Result<Option<GenerateCache>, CoreError> {
    match w.get("cache") {
        None | Some(Value::Null) => Ok(None),
        Some(_) if framework != Framework::Pytorch => Err(CoreError::field(
            "engine.cache",
            format!(
                "is Hugging Face generate's cache (framework pytorch); {} keeps its own",
                framework.as_str()
            ),
        )),
        Some(v) => GenerateCache::parse(v).map(Some),
    }
}

/// A numeric setting: a whole number of at least 1.
pub(crate) fn whole(w: &Map<String, Value>, key: &str) -> Result<Option<u64>, CoreError> {
    match w.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = crate::job::whole_number(&format!("engine.{key}"), v)?;
            if n == 0 {
                return Err(CoreError::field(
                    format!("engine.{key}"),
                    "must be at least 1 (got 0)",
                ));
            }
            Ok(Some(n))
        }
    }
}

/// A positive finite number (a bandwidth), or `None` when absent.
pub(crate) fn positive(w: &Map<String, Value>, key: &str) -> Result<Option<f64>, CoreError> {
    match w.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x > 0.0 && x.is_finite() => Ok(Some(x)),
            _ => Err(CoreError::field(
                format!("engine.{key}"),
                format!("must be a positive number (got {v})"),
            )),
        },
    }
}

/// A count of layers on the GPU (llama.cpp's `-ngl`, ollama's `num_gpu`): a whole number, 0
/// (everything on the host) included; the split models 0 (`engines::llamacpp::split`: only
/// the compute buffer stays on the GPU).
pub(crate) fn gpu_layers(w: &Map<String, Value>, key: &str) -> Result<Option<u64>, CoreError> {
    match w.get(key) {
        Some(v) if v.as_u64() == Some(0) => Ok(Some(0)),
        _ => whole(w, key),
    }
}

/// A share of the GPU, checked to lie in (0, 1].
pub(crate) fn fraction(key: &str, v: Option<&Value>) -> Result<Option<f64>, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let u = v.as_f64().ok_or_else(|| {
                CoreError::field(
                    format!("engine.{key}"),
                    format!("must be a number (got {v})"),
                )
            })?;
            if !(u > 0.0 && u <= 1.0) {
                return Err(CoreError::field(
                    format!("engine.{key}"),
                    format!("must be in (0, 1] (got {u})"),
                ));
            }
            Ok(Some(u))
        }
    }
}
