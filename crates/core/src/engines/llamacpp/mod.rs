//! llama.cpp (`framework: llama.cpp`): its settings, its launch flags.

pub(crate) mod advice;
pub mod device;
pub(crate) mod fit;
pub(crate) mod launch;
pub mod settings;
pub mod split;

pub use settings::LlamaCpp;

use crate::engines::engine::{Engine, FitSearch};
use crate::engines::flags::{Builder, ServedModel};
use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::report::{FitAnswer, Launch};

impl Engine for LlamaCpp {
    fn fit_gpu_layers(
        &self,
        s: &FitSearch,
        evals: &mut u64,
        _notes: &mut Vec<String>,
    ) -> Result<Option<u64>, CoreError> {
        fit::most_gpu_layers(s.model, s.spec, s.job, s.capacity, evals)
    }

    /// Without the user's `-ngl` the answer is at the most layers that fit, and so is its
    /// speed (what `estimate` gives at that `-ngl`).
    fn fit_speed_at_layers(&self, job: &ResolvedJob) -> bool {
        job.engine.n_gpu_layers.is_none()
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
        Builder::launch("llama.cpp", |b| launch::flags(b, job, fit, n_blocks))
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
