//! What a training step holds beside the model states proper: the data-parallel frameworks'
//! communication buffers, and what CPU offload moves to the host.

use super::StateBytes;
use crate::job::{Framework, ResolvedJob, Task};

/// DeepSpeed's defaults (`deepspeed/runtime/zero/config.py`): `reduce_bucket_size` 5e8 and
/// `stage3_prefetch_bucket_size` 5e7 elements.
pub const DS_REDUCE_BUCKET: u64 = 500_000_000;
pub const DS_PREFETCH_BUCKET: u64 = 50_000_000;

/// Communication buffers and CPU offload, per framework:
/// - DDP (`pytorch`, dp > 1): the reducer's buckets hold a copy of every gradient unless
///   `gradient_as_bucket_view=True` (torch `DistributedDataParallel` docs: "the saved memory
///   size will be equal to the total gradients size").
/// - DeepSpeed ZeRO-1/2: one reduce bucket of 5e8 gradient elements; ZeRO-3 also the 5e7-element
///   prefetch bucket and the largest block gathered whole.
/// - FSDP: FULL_SHARD gathers one unit (a block) and prefetches the next, and reduce-scatters
///   one unit's unsharded gradients; SHARD_GRAD_OP keeps every unit's parameters unsharded
///   (in the compute dtype) from its forward to its backward, and reduce-scatters as
///   FULL_SHARD does (`elements`: the model's parameters, all gathered).
/// - Offload (DeepSpeed ZeRO-Offload / ZeRO-Infinity, FSDP `CPUOffload`): optimizer states and
///   the fp32 master move to host RAM (and the parameters with `optimizer+params`).
pub(super) fn buffers_and_offload(
    out: &mut StateBytes,
    job: &ResolvedJob,
    (largest_block, elements): (u64, u64),
    param_width: u64,
    grad_width: u64,
    warnings: &mut Vec<String>,
) {
    let dp = job.parallel.dp.max(1);
    let z = job.parallel.zero;
    let train = job.task == Task::Train;
    if !train {
        return;
    }
    let compute = 2u64.min(param_width);
    out.comm_buffers = match job.framework {
        Framework::Pytorch if dp > 1 => out.resident.gradients,
        Framework::Deepspeed if dp > 1 || z > 0 => {
            let reduce = DS_REDUCE_BUCKET * grad_width;
            if z >= 3 {
                reduce + DS_PREFETCH_BUCKET * param_width + largest_block * param_width
            } else {
                reduce
            }
        }
        Framework::Fsdp if z >= 3 => 2 * largest_block * compute + largest_block * grad_width,
        Framework::Fsdp if z == 2 => elements.saturating_mul(compute) + largest_block * grad_width,
        _ => 0,
    };
    if job.parallel.offload != crate::job::Offload::None {
        if !matches!(job.framework, Framework::Deepspeed | Framework::Fsdp) {
            warnings.push(format!(
                "parallel.offload has no effect with framework {}: use deepspeed or fsdp",
                job.framework.as_str()
            ));
            return;
        }
        out.host += out.resident.optimizer_states + out.resident.master_weights;
        out.resident.optimizer_states = 0;
        out.resident.master_weights = 0;
        out.step_scratch = 0;
        if job.framework == Framework::Deepspeed {
            gradients_to_host(out, z, grad_width);
        }
        if job.parallel.offload == crate::job::Offload::OptimizerParams {
            if z < 3 && job.framework == Framework::Deepspeed {
                warnings.push(
                    "parameter offload needs ZeRO stage 3; parameters stay on the GPU".into(),
                );
            } else {
                out.host += out.resident.parameters;
                out.resident.parameters = 0;
            }
        }
    }
}

/// DeepSpeed with `offload_optimizer`: the gradients go to the host as they are reduced, in
/// fp32 (the CPU optimizer steps them there). ZeRO-1/2 (`deepspeed/runtime/zero/
/// stage_1_and_2.py`, `async_inplace_copy_grad_to_fp32_buffer_from_gpu`): each reduced
/// gradient is copied into its partition of `single_partition_of_fp32_groups[i].grad`, an
/// fp32 CPU tensor, and `param.grad = None` frees it; the GPU keeps the IPG reduce bucket
/// (already among the communication buffers) and `temp_grad_buffer_for_gpu_offload`, one
/// tensor of the largest parameter's size made at init. ZeRO-3 (`stage3.py`): the gradient
/// partitions live in `grad_partitions_flat_buffer`, allocated on `self.device`, the CPU when
/// the optimizer is offloaded. So no gradient is resident on the GPU, and none is carried
/// from layer to layer: each sits in the reduce bucket until reduced.
fn gradients_to_host(out: &mut StateBytes, zero: u64, grad_width: u64) {
    let elements = out.resident.gradients / grad_width.max(1);
    out.host += elements.saturating_mul(4);
    out.resident.gradients = 0;
    out.layer_grads.iter_mut().for_each(|g| *g = 0);
    out.head_grad = 0;
    out.embedding_grad = 0;
    if zero < 3 {
        out.comm_buffers += out.hook_step.largest_grad;
    }
}
