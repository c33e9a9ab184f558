//! An engine's arithmetic and advice: what `engines::engine(framework)` answers. Each method
//! has a default for an engine without that part (PyTorch's eager step has no launch
//! flags); the engine's own module (`engines/<engine>/mod.rs`) overrides what it has.

use crate::engines::flags::ServedModel;
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::serving::Device;
use crate::estimate::state_bytes::StateBytes;
use crate::gpu::Gpu;
use crate::job::{Framework, ResolvedJob};
use crate::model::ModelSpec;
use crate::report::{FitAnswer, Launch};

/// What a serving engine's device is computed from: an inference job on a model with an
/// architecture, its model states already counted.
pub struct Served<'a> {
    pub model: &'a ModelInput,
    pub spec: &'a ModelSpec,
    pub job: &'a ResolvedJob,
    /// The job's GPU, if it names one.
    pub gpu: Option<&'a Gpu>,
    pub states: &'a StateBytes,
}

/// One serving (or eager) engine.
pub trait Engine: Sync {
    /// The job's `framework` this engine serves.
    fn framework(&self) -> Framework;

    /// What one device holds while the engine serves the job (its start-up budget, its KV
    /// pool), warning what the engine would say; `None` for PyTorch's walked step
    /// (`estimate::simulate`), which also serves any engine that needs what the job lacks
    /// (llama.cpp's split needs the tensor inventory).
    fn device(
        &self,
        _s: &Served,
        _warnings: &mut Vec<String>,
    ) -> Result<Option<Device>, CoreError> {
        Ok(None)
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
