//! The event walk of one step, in its order: what is resident at the start, the forward, the
//! backward, the optimizer step.

use super::backward::walk_backward;
use super::forward::walk_forward;
use super::walk::{Fsdp, Walk};
use super::zero_marks::{self, Zero};
use crate::estimate::activations::ForwardPlan;
use crate::estimate::prefill_walk::PrefillLayer;
use crate::estimate::states::StateBytes;
use crate::estimate::{overhead, techniques};
use crate::job::{Framework, ResolvedJob, Task};
use crate::report::Category;

/// The event walk of one step.
pub(super) fn walk(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    (fsdp, zero, prefill): (Fsdp, Zero, &[PrefillLayer]),
) {
    let train = job.task == Task::Train;
    let carried_grads = walk_start(w, st, plan, job, gpu, (fsdp.is_none(), zero));
    walk_forward(w, plan, job, (fsdp, prefill));
    if !train {
        return;
    }
    walk_backward(w, st, plan, job, carried_grads, (fsdp, zero));
    // Optimizer step (with the optimizer in backward, each parameter's ran in its hook).
    if techniques::in_backward(job) {
        return;
    }
    if st.resident.optimizer_states > 0
        || st.step_scratch > 0
        || !matches!(job.optimizer, crate::job::Optimizer::None)
    {
        let scratch = zero.map_or(st.step_scratch, |z| z.step);
        w.mark("optimizer", "optimizer step".into(), scratch);
    }
}

/// Resident before the step: weights, optimizer states (steady state: made on the first
/// step), master weights, the batch; gradients while accumulating over micro-batches, or from
/// one step to the next when `zero_grad()` zeroes them in place ([`keeps_zeroed_grads`])
/// (returned: the gradients carried into the step's backward).
fn walk_start(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    (no_fsdp, zero): (bool, Zero),
) -> u64 {
    use Category::*;
    let train = job.task == Task::Train;
    w.add(Parameters, st.resident.parameters);
    // Paged states live outside PyTorch's allocator (`techniques`): not walked.
    w.add(
        OptimizerStates,
        st.resident.optimizer_states.saturating_sub(st.paged_states),
    );
    w.add(MasterWeights, st.resident.master_weights);
    let carried_grads = if train && (job.grad_accum > 1 || keeps_zeroed_grads(job)) {
        zero.map_or(st.resident.gradients, |z| z.carried)
    } else {
        0
    };
    w.add(Gradients, carried_grads);
    w.add(Activations, plan.inputs);
    // cuBLAS/cuBLASLt workspaces go through the caching allocator and stay allocated, as do
    // the data-parallel communication buffers.
    let ws = overhead::blas_workspaces_bytes_for(gpu, train, job.torch_version, plan.lt_gemm);
    w.add(Temporaries, ws);
    if no_fsdp && zero.is_none() {
        w.add(Temporaries, st.comm_buffers);
    }
    // ZeRO-1 accumulating: the bucket made by the first micro-batch's hooks (`zero_marks`).
    zero_marks::carried_bucket(w, zero);
    w.mark("start", "weights and optimizer states resident".into(), 0);
    carried_grads
}

/// `zero_grad: zeros`: `zero_grad(set_to_none=False)` (torch/optim/optimizer.py and
/// torch/nn/modules/module.py `zero_grad`, the default before torch 2.0, pytorch/pytorch#92731;
/// the HF Trainer calls `model.zero_grad()` after each optimizer step, transformers/trainer.py)
/// runs `p.grad.zero_()` and keeps the tensors: from the second step on every gradient is
/// resident through the forward, and backward adds into it in place (`AccumulateGrad`), as
/// when accumulating over micro-batches. DeepSpeed and Megatron keep their own gradient
/// buffers, so the field is for the frameworks that call torch's (`pytorch`, `fsdp`).
pub(super) fn keeps_zeroed_grads(job: &ResolvedJob) -> bool {
    job.zero_grad == crate::job::ZeroGrad::Zeros
        && matches!(job.framework, Framework::Pytorch | Framework::Fsdp)
}
