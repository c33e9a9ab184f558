//! vLLM (`framework: vllm`): its settings, its launch flags.

pub(crate) mod advice;
pub mod budget;
mod device;
pub mod fit;
mod launch;
pub mod settings;

pub use settings::Vllm;

use crate::engines::engine::{Engine, FitSearch};
use crate::engines::flags::{revision, Builder, ServedModel};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::job::ResolvedJob;
use crate::report::{FitAnswer, Launch};

impl Engine for Vllm {
    fn fit_job(
        &self,
        _model: &ModelInput,
        job: ResolvedJob,
    ) -> Result<(ResolvedJob, Option<String>), CoreError> {
        fit::vllm_within_reserve(&job)
    }

    fn fit_search(&self, s: &FitSearch) -> Result<Option<FitAnswer>, CoreError> {
        fit::vllm_fit(s).map(Some)
    }

    fn longest_request(&self, model: &ModelInput, job: &ResolvedJob) -> Option<u64> {
        advice::longest_request(model, job)
    }

    fn concurrent_requests(
        &self,
        model: &ModelInput,
        job: &ResolvedJob,
        report: &crate::report::Report,
    ) -> Option<u64> {
        advice::concurrent(model, job, report)
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, _n_blocks: u64) -> Option<Launch> {
        Builder::launch("vllm", |b| launch::flags(b, job, fit))
    }

    /// `vllm serve MODEL [--revision R]`.
    fn program(&self, model: &ServedModel) -> Option<String> {
        Some(format!(
            "vllm serve {}{}",
            model.name,
            revision(model, "--revision")
        ))
    }
}
