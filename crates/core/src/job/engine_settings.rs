//! The serving engines' own settings (contract `engine`), read once when the job is resolved:
//! the estimator reads the typed fields, the report echoes the object as written (with any
//! settings vramscope does not read).

use crate::error::CoreError;
use crate::job::Framework;
use serde::Serialize;
use serde_json::{Map, Value};

/// vLLM V1 engine defaults for the OpenAI API server (`vllm/engine/arg_utils.py`,
/// `EngineArgs`: `gpu_memory_utilization=0.9`, `block_size=16`; with chunked prefill the
/// API server's `max_num_batched_tokens=8192` and `max_num_seqs=256`).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;
pub const VLLM_BLOCK_SIZE: u64 = 16;
pub const VLLM_MAX_NUM_BATCHED_TOKENS: u64 = 8192;
pub const VLLM_MAX_NUM_SEQS: u64 = 256;

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
    /// Reads `engine` (absent or null = none) for `framework`; the error names the setting.
    pub fn resolve(v: Option<&Value>, framework: Framework) -> Result<Self, CoreError> {
        let written = match v {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(other) => {
                return Err(CoreError::field(
                    "engine",
                    format!("must be an object (got {other})"),
                ))
            }
        };
        let mut s = EngineSettings {
            written,
            ..EngineSettings::default()
        };
        s.read(framework)?;
        Ok(s)
    }

    /// Sets one setting (as the user would write it) and reads the settings again: the value
    /// is checked as in resolution.
    pub fn set(&mut self, key: &str, v: Value, framework: Framework) -> Result<(), CoreError> {
        let mut next = self.clone();
        next.written.insert(key.into(), v);
        next.read(framework)?;
        *self = next;
        Ok(())
    }

    /// A setting as written.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.written.get(key)
    }

    /// `gpu_memory_utilization`, or vLLM's default 0.9.
    pub fn utilization_or_default(&self) -> f64 {
        self.gpu_memory_utilization
            .unwrap_or(VLLM_GPU_MEMORY_UTILIZATION)
    }

    /// `block_size`, or vLLM's default 16.
    pub fn block_size_or_default(&self) -> u64 {
        self.block_size.unwrap_or(VLLM_BLOCK_SIZE)
    }

    /// `max_num_batched_tokens`, or the API server's default 8192.
    pub fn max_num_batched_tokens_or_default(&self) -> u64 {
        self.max_num_batched_tokens
            .unwrap_or(VLLM_MAX_NUM_BATCHED_TOKENS)
    }

    /// `max_num_seqs`, or the API server's default 256.
    pub fn max_num_seqs_or_default(&self) -> u64 {
        self.max_num_seqs.unwrap_or(VLLM_MAX_NUM_SEQS)
    }

    /// Whether `generate` builds a `StaticCache`.
    pub fn static_cache(&self) -> bool {
        self.cache == Some(GenerateCache::Static)
    }

    fn read(&mut self, framework: Framework) -> Result<(), CoreError> {
        let w = &self.written;
        self.cache = read_cache(w, framework)?;
        match framework {
            Framework::Vllm => {
                self.gpu_memory_utilization = utilization(w.get("gpu_memory_utilization"))?;
                self.block_size = whole(w, "block_size")?;
                self.max_num_batched_tokens = whole(w, "max_num_batched_tokens")?;
                self.max_num_seqs = whole(w, "max_num_seqs")?;
                self.max_model_len = whole(w, "max_model_len")?;
            }
            // `-ngl 0` (everything on the host) reads as a setting here; the split models it
            // (`engines::llamacpp_split`: only the compute buffer stays on the GPU).
            Framework::LlamaCpp => {
                self.n_gpu_layers = match w.get("n_gpu_layers") {
                    Some(v) if v.as_u64() == Some(0) => Some(0),
                    _ => whole(w, "n_gpu_layers")?,
                };
                self.host_memory_gbps = positive(w, "host_memory_gbps")?;
            }
            Framework::Sglang => {
                self.mem_fraction_static =
                    fraction("mem_fraction_static", w.get("mem_fraction_static"))?;
                // `max_model_len` (the CLI's --max-model-len) reads as SGLang's context_length.
                self.context_length = match whole(w, "context_length")? {
                    Some(n) => Some(n),
                    None => whole(w, "max_model_len")?,
                };
                self.max_running_requests = whole(w, "max_running_requests")?;
                self.chunked_prefill_size = whole(w, "chunked_prefill_size")?;
                self.cuda_graph_max_bs = whole(w, "cuda_graph_max_bs")?;
            }
            // ollama's options (`api/types.go` Options): `num_gpu` layers on the GPU and
            // `num_ctx` per slot; llama.cpp's `n_gpu_layers` (what vramscope's layer search
            // sets) comes first when both are written.
            Framework::Ollama => {
                // 0 (everything on the host) reads, as for llama.cpp.
                let layers = |k: &str| match w.get(k) {
                    Some(v) if v.as_u64() == Some(0) => Ok(Some(0)),
                    _ => whole(w, k),
                };
                self.n_gpu_layers = match layers("n_gpu_layers")? {
                    Some(n) => Some(n),
                    None => layers("num_gpu")?,
                };
                // `max_model_len` (the CLI's --max-model-len) reads as ollama's num_ctx.
                self.num_ctx = match whole(w, "num_ctx")? {
                    Some(n) => Some(n),
                    None => whole(w, "max_model_len")?,
                };
                self.host_memory_gbps = positive(w, "host_memory_gbps")?;
            }
            _ => {}
        }
        Ok(())
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
fn read_cache(
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
fn whole(w: &Map<String, Value>, key: &str) -> Result<Option<u64>, CoreError> {
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
fn positive(w: &Map<String, Value>, key: &str) -> Result<Option<f64>, CoreError> {
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

/// `gpu_memory_utilization`, checked to lie in (0, 1].
fn utilization(v: Option<&Value>) -> Result<Option<f64>, CoreError> {
    fraction("gpu_memory_utilization", v)
}

/// A share of the GPU, checked to lie in (0, 1].
fn fraction(key: &str, v: Option<&Value>) -> Result<Option<f64>, CoreError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The job's own engine's settings are read and checked; the object is echoed as written,
    /// settings vramscope does not read included.
    #[test]
    fn reads_the_jobs_engine_and_echoes_the_object() {
        let v = json!({"gpu_memory_utilization": 0.8, "block_size": 32, "enforce_eager": true});
        let s = EngineSettings::resolve(Some(&v), Framework::Vllm).unwrap();
        assert_eq!(
            (s.gpu_memory_utilization, s.block_size),
            (Some(0.8), Some(32))
        );
        assert_eq!(s.max_num_seqs_or_default(), 256);
        assert_eq!(serde_json::to_value(&s).unwrap(), v);
        // llama.cpp's -ngl is a whole number (0 reads; the split refuses it); a fraction is
        // refused; another engine's setting is not read.
        let ngl0 = json!({"n_gpu_layers": 0});
        let s = EngineSettings::resolve(Some(&ngl0), Framework::LlamaCpp).unwrap();
        assert_eq!(s.n_gpu_layers, Some(0));
        let half = json!({"n_gpu_layers": 0.5});
        let e = EngineSettings::resolve(Some(&half), Framework::LlamaCpp).unwrap_err();
        assert!(e.to_string().starts_with("engine.n_gpu_layers"), "{e}");
        let s = EngineSettings::resolve(Some(&ngl0), Framework::Vllm).unwrap();
        assert_eq!(s.n_gpu_layers, None);
        let e = EngineSettings::resolve(Some(&json!([1])), Framework::Vllm).unwrap_err();
        assert!(e.to_string().starts_with("engine"), "{e}");
    }

    /// SGLang's and ollama's settings are read under their own names; `max_model_len` (the
    /// CLI's --max-model-len) stands for SGLang's context_length and ollama's num_ctx; a static
    /// fraction outside (0, 1] is refused, naming the setting.
    #[test]
    fn sglang_and_ollama_settings() {
        let v = json!({"mem_fraction_static": 0.8, "context_length": 8192,
                       "max_running_requests": 16});
        let s = EngineSettings::resolve(Some(&v), Framework::Sglang).unwrap();
        assert_eq!(s.mem_fraction_static, Some(0.8));
        assert_eq!(s.context_length, Some(8192));
        assert_eq!(s.max_running_requests, Some(16));
        let s = EngineSettings::resolve(Some(&json!({"max_model_len": 4096})), Framework::Sglang)
            .unwrap();
        assert_eq!(s.context_length, Some(4096));
        let e = EngineSettings::resolve(
            Some(&json!({"mem_fraction_static": 1.2})),
            Framework::Sglang,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("engine.mem_fraction_static"),
            "{e}"
        );
        let v = json!({"num_gpu": 20, "num_ctx": 8192});
        let s = EngineSettings::resolve(Some(&v), Framework::Ollama).unwrap();
        assert_eq!((s.n_gpu_layers, s.num_ctx), (Some(20), Some(8192)));
        let s = EngineSettings::resolve(Some(&json!({"max_model_len": 2048})), Framework::Ollama)
            .unwrap();
        assert_eq!(s.num_ctx, Some(2048));
        // vLLM does not read ollama's options.
        let s = EngineSettings::resolve(Some(&v), Framework::Vllm).unwrap();
        assert_eq!((s.n_gpu_layers, s.num_ctx), (None, None));
    }

    /// `engine.cache` reads for Hugging Face generate (`framework: pytorch`), `dynamic` or
    /// `static`; any other value, or the setting under a serving engine, is refused in one line
    /// naming it.
    #[test]
    fn generate_cache_is_pytorchs_alone() {
        let st = json!({"cache": "static"});
        let s = EngineSettings::resolve(Some(&st), Framework::Pytorch).unwrap();
        assert!(s.static_cache());
        let s = EngineSettings::resolve(Some(&json!({"cache": "Dynamic"})), Framework::Pytorch)
            .unwrap();
        assert_eq!(s.cache, Some(GenerateCache::Dynamic));
        assert!(!s.static_cache());
        let s = EngineSettings::resolve(None, Framework::Pytorch).unwrap();
        assert_eq!(s.cache, None);
        for (v, fw) in [
            (json!({"cache": "sliding"}), Framework::Pytorch),
            (json!({"cache": 1}), Framework::Pytorch),
            (st.clone(), Framework::Vllm),
            (st.clone(), Framework::LlamaCpp),
        ] {
            let e = EngineSettings::resolve(Some(&v), fw)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("engine.cache"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// A setting changed after resolution is checked as in resolution; a refused one leaves
    /// the settings as they were.
    #[test]
    fn set_checks_and_keeps_the_old_settings_on_error() {
        let mut s = EngineSettings::resolve(None, Framework::Vllm).unwrap();
        s.set("gpu_memory_utilization", json!(0.95), Framework::Vllm)
            .unwrap();
        assert_eq!(s.utilization_or_default(), 0.95);
        let e = s
            .set("gpu_memory_utilization", json!(1.5), Framework::Vllm)
            .unwrap_err();
        assert!(e.to_string().contains("(0, 1]"), "{e}");
        assert_eq!(s.utilization_or_default(), 0.95);
        assert_eq!(s.get("gpu_memory_utilization"), Some(&json!(0.95)));
    }
}
