//! llama.cpp (`framework: llama.cpp`): its settings, its launch flags.

pub mod device;
mod launch;
pub mod settings;

use crate::engines::engine::{Engine, Served};
use crate::engines::flags::{Builder, ServedModel};
use crate::error::CoreError;
use crate::estimate::serving::Device;
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// llama.cpp's server.
pub struct LlamaCpp;

impl Engine for LlamaCpp {
    fn framework(&self) -> Framework {
        Framework::LlamaCpp
    }

    /// The split needs the tensor inventory; without it, PyTorch's step.
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        let Some(inv) = &s.model.inventory else {
            return Ok(None);
        };
        device::llamacpp_device(s.model, s.spec, inv, s.job, s.gpu, warnings).map(Some)
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
        let mut b = Builder::new();
        launch::flags(&mut b, job, fit, n_blocks)?;
        Some(b.into_launch("llama.cpp"))
    }

    /// `llama-server -m FILE`, or `-hf ORG/NAME:QUANT` for a Hub repo's GGUF file.
    fn program(&self, model: &ServedModel) -> Option<String> {
        Some(if model.hub_gguf {
            format!("llama-server -hf {}", model.name)
        } else {
            format!("llama-server -m {}", model.name)
        })
    }
}
