//! The engines' specs, listed once, and the settings' reading through them:
//! `Job::resolve` → [`EngineSettings::resolve`] → the job's engine's `EngineSpec`.

use super::pytorch::settings::Pytorch;
use super::spec::EngineSpec;
use crate::error::CoreError;
use crate::job::engine_settings::{read_cache, EngineSettings};
use crate::job::{Framework, KvDtype, WeightFormat};
use serde_json::{Map, Value};

/// Every engine, once: `framework` → its spec.
pub static SPECS: &[&dyn EngineSpec] = &[
    &super::pytorch::settings::Pytorch,
    &super::vllm::settings::Vllm,
    &super::sglang::settings::Sglang,
    &super::llamacpp::settings::LlamaCpp,
    &super::ollama::settings::Ollama,
];

/// The spec of `framework`'s engine; `None` for a training framework (DeepSpeed, Megatron,
/// FSDP: no engine settings of their own).
pub fn spec(framework: Framework) -> Option<&'static dyn EngineSpec> {
    SPECS.iter().copied().find(|e| e.framework() == framework)
}

/// `framework`'s spelling of a KV cache of `bits`, as advice offers it (a training
/// framework's: transformers').
pub fn kv_quant(framework: Framework, bits: u64) -> Option<(KvDtype, &'static str)> {
    spec(framework).unwrap_or(&Pytorch).kv_quant(bits)
}

/// `framework`'s quantized weights of `bits`, as advice offers them (a training framework's:
/// transformers').
pub fn weights_quant(framework: Framework, bits: u64) -> (WeightFormat, &'static str) {
    spec(framework).unwrap_or(&Pytorch).weights_quant(bits)
}

/// The flag that sets `framework`'s layers on the GPU: its own (ollama's `num_gpu`), else
/// llama.cpp's `-ngl`.
pub fn layers_flag(framework: Framework) -> &'static str {
    spec(framework)
        .and_then(|e| e.layers_flag())
        .unwrap_or("-ngl")
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
        let mut s = EngineSettings::written(written);
        s.read(framework)?;
        Ok(s)
    }

    /// Sets one setting (as the user would write it) and reads the settings again: the value
    /// is checked as in resolution.
    pub fn set(&mut self, key: &str, v: Value, framework: Framework) -> Result<(), CoreError> {
        let mut next = self.clone();
        next.write(key, v);
        next.read(framework)?;
        *self = next;
        Ok(())
    }

    /// `engine.cache` (every engine: only PyTorch's reads it), then the engine's own settings.
    fn read(&mut self, framework: Framework) -> Result<(), CoreError> {
        let w = self.entries().clone();
        self.cache = read_cache(&w, framework)?;
        match spec(framework) {
            Some(e) => e.read_settings(&w, self),
            None => Ok(()),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::GenerateCache;
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

    /// Each engine's spellings as its own docs give them: vLLM `--kv-cache-dtype fp8` (no
    /// 4-bit KV), SGLang `fp8_e5m2`, llama.cpp's and ollama's `q8_0`/`q4_0` and GGUF quants,
    /// transformers' `int8`/`nf4` for PyTorch and the training frameworks (SGLang's weights
    /// too: the advice table offered it no format of its own); `-ngl`, ollama's `num_gpu`.
    #[test]
    fn spellings_by_engine() {
        let kv = |f, b| kv_quant(f, b).map(|(_, t)| t);
        assert_eq!(kv(Framework::Vllm, 8), Some("fp8"));
        assert_eq!(kv(Framework::Vllm, 4), None);
        assert_eq!(kv(Framework::Sglang, 8), Some("fp8_e5m2"));
        assert_eq!(kv(Framework::Ollama, 4), Some("q4_0"));
        assert_eq!(kv(Framework::LlamaCpp, 8), Some("q8_0"));
        assert_eq!(kv(Framework::Deepspeed, 8), Some("int8"));
        assert_eq!(kv(Framework::Pytorch, 4), None);
        let w = |f, b| weights_quant(f, b).1;
        assert_eq!(w(Framework::Vllm, 4), "awq:4");
        assert_eq!(w(Framework::Ollama, 4), "gguf:Q4_K_M");
        assert_eq!(w(Framework::Sglang, 8), "int8");
        assert_eq!(w(Framework::Fsdp, 4), "nf4");
        assert_eq!(layers_flag(Framework::Ollama), "num_gpu");
        assert_eq!(layers_flag(Framework::LlamaCpp), "-ngl");
        assert_eq!(
            spec(Framework::Vllm).unwrap().tp_flag(),
            Some("--tensor-parallel-size")
        );
        assert!(spec(Framework::Megatron).is_none());
    }
}
