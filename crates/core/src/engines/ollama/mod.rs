//! ollama (`framework: ollama`): its settings, its launch.

mod launch;
pub mod settings;

use crate::engines::engine::Engine;
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// ollama: llama.cpp's engine behind ollama's server.
pub struct Ollama;

impl Engine for Ollama {
    fn framework(&self) -> Framework {
        Framework::Ollama
    }

    /// Its command names no model: the Modelfile does.
    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
        launch::launch(job, fit, n_blocks)
    }
}
