//! PyTorch's (Hugging Face `generate`'s) settings: `engine.cache` alone, read for every job by
//! `job::engine_settings::read_cache` (which refuses it under any other engine).

use crate::engines::spec::{EngineSpec, Traits};
use crate::error::CoreError;
use crate::job::engine_settings::EngineSettings;
use crate::job::Framework;
use serde_json::{Map, Value};

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct Pytorch;

impl EngineSpec for Pytorch {
    fn traits(&self) -> Traits {
        Traits::eager(Framework::Pytorch)
    }

    fn read_settings(
        &self,
        _w: &Map<String, Value>,
        _s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        Ok(())
    }
}
