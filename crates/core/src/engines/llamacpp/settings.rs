//! llama.cpp's settings (contract `engine`: `n_gpu_layers`, `host_memory_gbps`).

use crate::engines::spec::{EngineSpec, Traits};
use crate::error::CoreError;
use crate::job::engine_settings::{gpu_layers, positive, EngineSettings};
use crate::job::weight_format::{FileType, GgufFormat};
use crate::job::{Framework, KvDtype, WeightFormat};
use serde_json::{Map, Value};

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct LlamaCpp;

impl EngineSpec for LlamaCpp {
    /// `llama-server -ngl N` (`common/arg.cpp`).
    fn traits(&self) -> Traits {
        Traits::served(Framework::LlamaCpp).layers("-ngl")
    }

    /// `-ngl 0` (everything on the host) reads as a setting here; the split models it.
    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        s.n_gpu_layers = gpu_layers(w, "n_gpu_layers")?;
        s.host_memory_gbps = positive(w, "host_memory_gbps")?;
        Ok(())
    }

    /// llama.cpp's `-ctk/-ctv q8_0` or `q4_0`.
    fn kv_quant(&self, bits: u64) -> Option<(KvDtype, &'static str)> {
        Some(if bits == 8 {
            (KvDtype::Q8_0, "q8_0")
        } else {
            (KvDtype::Q4_0, "q4_0")
        })
    }

    /// A GGUF file: `Q8_0` at 8 bits, `Q4_K_M` at 4.
    fn weights_quant(&self, bits: u64) -> (WeightFormat, &'static str) {
        if bits == 8 {
            (
                WeightFormat::Gguf(GgufFormat::Mix(FileType::Q8_0)),
                "gguf:Q8_0",
            )
        } else {
            (
                WeightFormat::Gguf(GgufFormat::Mix(FileType::Q4_K_M)),
                "gguf:Q4_K_M",
            )
        }
    }
}
