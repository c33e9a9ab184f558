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
use crate::report::{Components, PeakFigures, TimelinePoint};

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

/// The memory a pool engine (vLLM, SGLang) sizes its share from: the job's GPU's, or an A100
/// 80GB's with a warning that `sizes` ("vLLM sizes its KV pool") assumed it. Both engines
/// size from `torch.cuda.mem_get_info()`'s total (`vllm/worker/gpu_worker.py`
/// `determine_available_memory`, `sglang/srt/model_executor/model_runner.py`).
pub(crate) fn pool_capacity(gpu: Option<&Gpu>, sizes: &str, warnings: &mut Vec<String>) -> u64 {
    let device = gpu.or_else(|| crate::gpu::find("a100-80gb").ok());
    if gpu.is_none() {
        warnings.push(format!(
            "{sizes} from the GPU's memory: with no --gpu, an A100 80GB is assumed"
        ));
    }
    device.map_or(0, |g| g.memory_bytes)
}

/// What a pool engine (vLLM, SGLang) holds on one GPU, as its budget sizes it.
pub(crate) struct Pool {
    /// The weights as loaded.
    pub weights: u64,
    /// The KV pool preallocated at start-up.
    pub kv_pool: u64,
    /// This job's own sequences' KV, inside the pool ([`served_kv`]).
    pub job_kv: u64,
    /// What PyTorch reserves outside the weights and the pool (vLLM's profiling peak and CUDA
    /// graphs; SGLang's prefill chunk, CUDA graphs and request table).
    pub outside: u64,
    /// The memory outside PyTorch (`non_torch_bytes`).
    pub non_torch: u64,
}

/// This job's own sequences' KV (its batch at its prompt plus new tokens), what a pool engine
/// holds of it inside its pool.
pub(crate) fn served_kv(s: &Served) -> Result<u64, CoreError> {
    let ctx = s.job.seq.saturating_add(s.job.new_tokens);
    crate::estimate::engines::kv_bytes_per_gpu(s.spec, s.job, s.job.batch, ctx)
}

/// A pool engine's device from its [`Pool`]: the weights, the job's KV, what lies outside the
/// pool as temporaries and the memory outside PyTorch as `cuda_context`; PyTorch reserves the
/// weights, the whole pool and what lies outside it (vLLM's `gpu_memory_utilization` share,
/// SGLang's static share plus its chunk and graphs), so the allocator's reserve is that beyond
/// the allocations (the pool's free blocks); the device's total is the reserve plus the
/// memory outside PyTorch, the peak in the `serving` phase.
pub(crate) fn pool_device(
    pool: Pool,
    timeline: Vec<TimelinePoint>,
    engine: serde_json::Value,
    engine_starts: bool,
) -> Device {
    let mut components = Components {
        parameters: pool.weights,
        kv_cache: pool.job_kv,
        temporaries: pool.outside,
        cuda_context: pool.non_torch,
        ..Components::default()
    };
    let reserved = pool.weights + pool.kv_pool + pool.outside;
    let allocated = components.allocated();
    components.allocator_reserve = reserved.saturating_sub(allocated);
    let device_total = reserved + components.cuda_context;
    Device {
        components,
        peaks: PeakFigures {
            activation_bytes_per_layer: None,
            peak_allocated: Some(allocated),
            peak_reserved: Some(reserved),
            device_total: Some(device_total),
            peak_phase: Some("serving".into()),
        },
        kv_pool: Some(pool.kv_pool),
        timeline,
        engine: Some(engine),
        engine_starts,
        paged: 0,
        allocator: None,
    }
}
