//! An engine's device: what one GPU holds while it serves a job (its start-up budget, its KV
//! pool). The estimator's floor: `estimate::simulate` asks it through `devices.rs`, and PyTorch's
//! walked step is the default. Each engine's is in `engines/<engine>/device.rs`.

use crate::engines::spec::EngineSpec;
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::serving::Device;
use crate::estimate::state_bytes::StateBytes;
use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

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

/// An engine's device fill, on top of its spec (the framework it serves).
pub trait EngineDevice: EngineSpec {
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
}
