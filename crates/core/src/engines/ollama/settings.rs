//! ollama's settings: its model options (`api/types.go` Options: `num_gpu` layers on the GPU,
//! `num_ctx` per slot) and `host_memory_gbps`.

use crate::engines::llamacpp::settings::LlamaCpp;
use crate::engines::spec::{EngineSpec, Traits};
use crate::error::CoreError;
use crate::job::engine_settings::{gpu_layers, positive, whole, EngineSettings};
use crate::job::{Framework, KvDtype, WeightFormat};
use serde_json::{Map, Value};

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct Ollama;

impl EngineSpec for Ollama {
    /// ollama's option for llama.cpp's `-ngl` is `num_gpu`.
    fn traits(&self) -> Traits {
        Traits::served(Framework::Ollama).layers("num_gpu")
    }

    /// llama.cpp's `n_gpu_layers` (what vramscope's layer search sets) comes first when both
    /// it and `num_gpu` are written; 0 (everything on the host) reads, as for llama.cpp.
    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        s.n_gpu_layers = match gpu_layers(w, "n_gpu_layers")? {
            Some(n) => Some(n),
            None => gpu_layers(w, "num_gpu")?,
        };
        // `max_model_len` (the CLI's --max-model-len) reads as ollama's num_ctx.
        s.num_ctx = match whole(w, "num_ctx")? {
            Some(n) => Some(n),
            None => whole(w, "max_model_len")?,
        };
        s.host_memory_gbps = positive(w, "host_memory_gbps")?;
        Ok(())
    }

    /// llama-server's, underneath (`OLLAMA_KV_CACHE_TYPE`).
    fn kv_quant(&self, bits: u64) -> Option<(KvDtype, &'static str)> {
        LlamaCpp.kv_quant(bits)
    }

    /// llama.cpp's GGUF files (ollama's library tags are GGUF quants).
    fn weights_quant(&self, bits: u64) -> (WeightFormat, &'static str) {
        LlamaCpp.weights_quant(bits)
    }
}
