//! SGLang (`framework: sglang`): its settings, its launch flags.

pub(crate) mod advice;
pub mod budget;
mod device;
mod fit;
mod launch;
pub mod settings;

pub use settings::Sglang;

use crate::engines::engine::{Engine, FitSearch};
use crate::engines::flags::{revision, Builder, ServedModel};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::job::ResolvedJob;
use crate::report::{FitAnswer, Launch};

impl Engine for Sglang {
    fn fit_job(
        &self,
        model: &ModelInput,
        job: ResolvedJob,
    ) -> Result<(ResolvedJob, Option<String>), CoreError> {
        fit::sglang_within_capacity(model, job)
    }

    fn fit_search(&self, s: &FitSearch) -> Result<Option<FitAnswer>, CoreError> {
        fit::sglang_fit(s).map(Some)
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, _n_blocks: u64) -> Option<Launch> {
        Builder::launch("sglang", |b| launch::flags(b, job, fit))
    }

    /// `python -m sglang.launch_server --model-path MODEL [--revision R]`.
    fn program(&self, model: &ServedModel) -> Option<String> {
        Some(format!(
            "python -m sglang.launch_server --model-path {}{}",
            model.name,
            revision(model, "--revision")
        ))
    }
}
