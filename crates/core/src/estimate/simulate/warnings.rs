//! The step's warnings about the machine and the job: the reserve from the packing heuristic,
//! unified memory, `zero_grad: zeros` without effect, no bf16 on the GPU.

use super::step::keeps_zeroed_grads;
use crate::estimate::activations::ForwardPlan;
use crate::estimate::input::ModelInput;
use crate::estimate::serving::Device;
use crate::job::{ResolvedJob, Task};

/// The report's word where PyTorch's reserve came from the packing heuristic, not the
/// allocator model (no `allocator` summary; serving engines keep their own budgets).
pub(super) fn heuristic_reserve_warning(
    model: &ModelInput,
    job: &ResolvedJob,
    plan: Option<&ForwardPlan>,
    device: &Device,
) -> Option<String> {
    let (Some(spec), Some(plan)) = (&model.spec, plan) else {
        return None;
    };
    let heuristic = device.allocator.is_none()
        && device.engine.is_none()
        && device.peaks.peak_reserved.is_some();
    heuristic.then(|| crate::estimate::alloc_events::heuristic_reserve_warning(spec, job, plan))
}

/// A unified-memory machine's capacity is the GPU's share of memory the OS also lives in, and
/// on Metal the CUDA context and caching-allocator figures are CUDA measurements that stand in
/// for Metal's unmeasured ones.
pub(super) fn unified_memory_warning(gpu: Option<&crate::gpu::Gpu>, warnings: &mut Vec<String>) {
    let Some(g) = gpu.filter(|g| g.unified_memory) else {
        return;
    };
    warnings.push(format!(
        "{} shares its memory with the OS: the capacity is the GPU's share ({}), and the \
         desktop and other applications take from the same pool (--reserve GIB keeps some free)",
        g.id,
        crate::text::bytes(g.memory_bytes)
    ));
    if g.is_metal() {
        warnings.push(
            "Metal has no measured context or allocator figures in vramscope: the CUDA context \
             and caching-allocator overheads are CUDA figures, assumed, not measured on Apple \
             silicon"
                .into(),
        );
    }
}

/// `zero_grad: zeros` where the framework manages its own gradient buffers.
pub(super) fn zero_grad_warning(job: &ResolvedJob, warnings: &mut Vec<String>) {
    if job.task == Task::Train
        && job.zero_grad == crate::job::ZeroGrad::Zeros
        && !keeps_zeroed_grads(job)
    {
        warnings.push(format!(
            "zero_grad zeros has no effect with framework {}: it keeps its own gradient buffers",
            job.framework.as_str()
        ));
    }
}

/// On a GPU without bf16 (V100, T4): fp16 is the default precision there (said, since the
/// user may expect bf16), and bf16 asked for explicitly has no tensor-core support.
pub(super) fn precision_warning(
    gpu: Option<&crate::gpu::Gpu>,
    job: &ResolvedJob,
    warnings: &mut Vec<String>,
) {
    use crate::job::Precision;
    let Some(g) = gpu.filter(|g| !g.bf16) else {
        return;
    };
    match job.precision {
        Precision::Fp16Mixed | Precision::Fp16 => warnings.push(format!(
            "{} has no bf16: {} is used (the default on GPUs before Ampere; mixed precision \
             then needs loss scaling)",
            g.id,
            job.precision.as_str()
        )),
        Precision::Bf16Mixed | Precision::Bf16 => warnings.push(format!(
            "{} has no bf16 tensor cores: {} runs slowly or not at all there; use fp16-mixed",
            g.id,
            job.precision.as_str()
        )),
        Precision::Fp32 => {}
    }
}
