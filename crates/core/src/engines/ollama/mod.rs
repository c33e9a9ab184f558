//! ollama (`framework: ollama`): its settings, its launch.

pub mod device;
mod launch;
pub mod settings;

use crate::engines::engine::{Engine, Served};
use crate::error::CoreError;
use crate::estimate::serving::Device;
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// ollama: llama.cpp's engine behind ollama's server.
pub struct Ollama;

impl Engine for Ollama {
    fn framework(&self) -> Framework {
        Framework::Ollama
    }

    /// Its command names no model: the Modelfile does.
    /// llama.cpp's split needs the tensor inventory; without it, PyTorch's step.
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        let Some(inv) = &s.model.inventory else {
            return Ok(None);
        };
        device::ollama_device(s.model, s.spec, inv, s.job, s.gpu, warnings).map(Some)
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
        launch::launch(job, fit, n_blocks)
    }
}
