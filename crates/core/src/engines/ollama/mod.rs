//! ollama (`framework: ollama`): its settings, its launch.

pub(crate) mod advice;
pub mod device;
mod fit;
mod launch;
pub mod settings;

pub use settings::Ollama;

use crate::engines::engine::{Engine, FitSearch};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::job::ResolvedJob;
use crate::report::{FitAnswer, Launch};

impl Engine for Ollama {
    /// Its command names no model: the Modelfile does.
    fn fit_job(
        &self,
        model: &ModelInput,
        job: ResolvedJob,
    ) -> Result<(ResolvedJob, Option<String>), CoreError> {
        Ok((fit::ollama_with_num_ctx(model, job)?, None))
    }

    fn fit_gpu_layers(
        &self,
        s: &FitSearch,
        evals: &mut u64,
        notes: &mut Vec<String>,
    ) -> Result<Option<u64>, CoreError> {
        fit::ollama_gpu_layers(s.model, s.spec, s.job, s.capacity, evals, notes)
    }

    #[allow(clippy::type_complexity)]
    fn fit_longest(
        &self,
        job: &ResolvedJob,
        max_pos: Option<u64>,
        fits: &mut dyn FnMut(&ResolvedJob) -> Result<bool, CoreError>,
    ) -> Option<Result<(Option<u64>, bool, u64), CoreError>> {
        Some(fit::longest_num_ctx(job, max_pos, fits))
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
        launch::launch(job, fit, n_blocks)
    }
}
