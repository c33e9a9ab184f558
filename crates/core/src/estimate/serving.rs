//! What one device holds, however it was found (a walked PyTorch step, or a serving engine's
//! own budget: `engines/<engine>/device.rs`), and the memory outside PyTorch's allocator.

use super::overhead;
use crate::job::ResolvedJob;
use crate::report::{AllocatorSummary, Components, PeakFigures, TimelinePoint};

/// What one device holds over the step, however it was found: by walking a PyTorch step, or
/// from a serving engine's own budget.
pub struct Device {
    pub(crate) components: Components,
    /// The report's peaks as the device reaches them (`per_gpu`'s); the layer's activations
    /// are the step's plan's, filled in by `simulate::run`.
    pub(crate) peaks: PeakFigures,
    pub(crate) kv_pool: Option<u64>,
    pub(crate) timeline: Vec<TimelinePoint>,
    pub(crate) engine: Option<serde_json::Value>,
    /// vLLM refuses to start when its pool cannot hold one request of max_model_len tokens.
    pub(crate) engine_starts: bool,
    /// Paged optimizer states counted in `device_total` (unified memory, evictable).
    pub(crate) paged: u64,
    /// The caching-allocator model's figures where the step was simulated event by event.
    pub(crate) allocator: Option<AllocatorSummary>,
}

/// Memory outside PyTorch's allocator: the CUDA context, and NCCL's buffers when several GPUs
/// talk (`overhead.rs`).
pub(crate) fn non_torch_bytes(gpu: Option<&crate::gpu::Gpu>, job: &ResolvedJob) -> u64 {
    overhead::cuda_context_bytes_with(gpu, job.cuda_module_loading)
        + if job.parallel.gpus > 1 {
            overhead::nccl_bytes(job.parallel.gpus)
        } else {
            0
        }
}
