//! llama.cpp (`framework: llama.cpp`): its settings, its launch flags.

mod launch;
pub mod settings;

use crate::engines::engine::Engine;
use crate::engines::flags::{Builder, ServedModel};
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// llama.cpp's server.
pub struct LlamaCpp;

impl Engine for LlamaCpp {
    fn framework(&self) -> Framework {
        Framework::LlamaCpp
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
