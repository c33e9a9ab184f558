//! An engine's composition: its fit knobs, launch flags and advice, what
//! `engines::engine(framework)` answers (its device is `device.rs`'s, a floor below). Each method
//! has a default for an engine without that part (PyTorch's eager step has no launch
//! flags); the engine's own module (`engines/<engine>/mod.rs`) overrides what it has.

use crate::engines::flags::ServedModel;
use crate::engines::spec::EngineSpec;
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use crate::report::{FitAnswer, Launch};

/// What a fit search runs on: the model with its architecture, the job, the GPU and what the
/// user's reserve leaves of it.
pub struct FitSearch<'a> {
    pub model: &'a ModelInput,
    pub spec: &'a ModelSpec,
    pub job: &'a ResolvedJob,
    pub gpu: &'a Gpu,
    /// The GPU's memory less the reserve (contract `reserve`).
    pub capacity: u64,
    /// The model's `max_position_embeddings`.
    pub max_pos: Option<u64>,
}

/// One serving (or eager) engine: its arithmetic on top of its spec (the framework it serves,
/// its settings and spellings).
pub trait Engine: EngineSpec {
    /// The job as the engine's fit searches it (vLLM's utilization lowered to leave the reserve
    /// free, ollama's `num_ctx` made explicit, SGLang's static fraction lowered to fit), with a
    /// note of what was changed; the job as it is by default.
    fn fit_job(
        &self,
        _model: &ModelInput,
        job: ResolvedJob,
    ) -> Result<(ResolvedJob, Option<String>), CoreError> {
        Ok((job, None))
    }

    /// The engine's own search of what fits (vLLM's and SGLang's pools), asked of an inference
    /// job only (as are [`Engine::fit_gpu_layers`] and [`Engine::fit_longest`]); `None` for the search
    /// of a PyTorch step's batch and sequence (with [`Engine::fit_gpu_layers`] and
    /// [`Engine::fit_longest`] below).
    fn fit_search(&self, _s: &FitSearch) -> Result<Option<FitAnswer>, CoreError> {
        Ok(None)
    }

    /// The most layers on the GPU within `capacity` (llama.cpp's `-ngl`), counting the
    /// evaluations and noting what the user should know; `None` for an engine that holds
    /// every layer on the GPU.
    fn fit_gpu_layers(
        &self,
        _s: &FitSearch,
        _evals: &mut u64,
        _notes: &mut Vec<String>,
    ) -> Result<Option<u64>, CoreError> {
        Ok(None)
    }

    /// The longest context that fits (`fits` asks the estimator) when the engine searches
    /// another setting than the prompt (ollama's `num_ctx`): the longest, whether the search
    /// stopped at the model's maximum positions, and that cap; `None` for the prompt's search.
    #[allow(clippy::type_complexity)]
    fn fit_longest(
        &self,
        _job: &ResolvedJob,
        _max_pos: Option<u64>,
        _fits: &mut dyn FnMut(&ResolvedJob) -> Result<bool, CoreError>,
    ) -> Option<Result<(Option<u64>, bool, u64), CoreError>> {
        None
    }

    /// Whether the fit answer's speed is the estimate's at the layers the search found
    /// (llama.cpp without the user's `-ngl`) rather than at the job's own settings.
    fn fit_speed_at_layers(&self, _job: &ResolvedJob) -> bool {
        false
    }

    /// The longest request the job's KV pool holds, as `fit` finds it (vLLM's, at most its
    /// `max_model_len`): what advice lowers `max_model_len` to; `None` for other engines.
    fn longest_request(&self, _model: &ModelInput, _job: &ResolvedJob) -> Option<u64> {
        None
    }

    /// The requests of the job's context the engine's pool holds at once (a what-if row's
    /// `concurrent_requests`); `None` for an engine without such a pool figure.
    fn concurrent_requests(
        &self,
        _model: &ModelInput,
        _job: &ResolvedJob,
        _report: &crate::report::Report,
    ) -> Option<u64> {
        None
    }

    /// The engine's flags for a serving job's fit answer (contract `fit.launch`), the command
    /// not yet naming the model; `None` when nothing fits or the engine has no launcher.
    /// `n_blocks`: the model's transformer blocks (llama.cpp counts the output layer as one
    /// more).
    fn launch(&self, _job: &ResolvedJob, _fit: &FitAnswer, _n_blocks: u64) -> Option<Launch> {
        None
    }

    /// The program and its model argument (`vllm serve MODEL`); `None` when the engine's
    /// command names no model (ollama's Modelfile does).
    fn program(&self, _model: &ServedModel) -> Option<String> {
        None
    }
}
