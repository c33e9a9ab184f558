//! PyTorch's (Hugging Face `generate`'s) settings: `engine.cache` alone, read for every job by
//! `job::engine_settings::read_cache` (which refuses it under any other engine).

use crate::engines::spec::EngineSpec;
use crate::error::CoreError;
use crate::job::engine_settings::EngineSettings;
use crate::job::Framework;
use serde_json::{Map, Value};

/// PyTorch's spec.
pub struct PytorchSpec;

impl EngineSpec for PytorchSpec {
    fn framework(&self) -> Framework {
        Framework::Pytorch
    }

    fn read_settings(
        &self,
        _w: &Map<String, Value>,
        _s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        Ok(())
    }
}
