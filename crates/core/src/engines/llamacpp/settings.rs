//! llama.cpp's settings (contract `engine`: `n_gpu_layers`, `host_memory_gbps`).

use crate::engines::spec::EngineSpec;
use crate::error::CoreError;
use crate::job::engine_settings::{gpu_layers, positive, EngineSettings};
use crate::job::Framework;
use serde_json::{Map, Value};

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct LlamaCpp;

impl EngineSpec for LlamaCpp {
    fn framework(&self) -> Framework {
        Framework::LlamaCpp
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

    /// `llama-server -ngl N` (`common/arg.cpp`).
    fn layers_flag(&self) -> Option<&'static str> {
        Some("-ngl")
    }
}
