//! How each framework keeps the model states: the byte widths of each state per trainable element
//! ([`Widths`]) and which of them are divided over data-parallel ranks ([`shards`]).
//!
//! Framework profiles:
//! - `pytorch` (plain PyTorch / HF Trainer): parameters in their dtype (fp32 under autocast),
//!   gradients like the parameters, optimizer states `zeros_like(param)`; no master copy.
//! - `deepspeed`: the ZeRO paper's accounting (Rajbhandari et al. 2020, §3.1: mixed-precision
//!   Adam holds 2Ψ + 2Ψ + KΨ with K = 12: fp32 master 4Ψ, momentum 4Ψ, variance 4Ψ); stage 1
//!   partitions optimizer states and master, stage 2 also gradients, stage 3 also parameters.
//! - `megatron` (Megatron-LM `docs/api-guide/dist_optimizer.md`, the bytes-per-parameter
//!   table; `megatron/core/optimizer/optimizer.py` `Float16OptimizerWithFloat16Params`):
//!   `bf16-mixed` keeps bf16 parameters, the fp32 `main_grad` buffer (gradients accumulated in
//!   fp32), fp32 master and Adam moments: 18 B/param, 6 + 12/d with the distributed optimizer;
//!   `fp16-mixed` keeps fp16 parameters and fp16 gradients, and the optimizer copies them into
//!   fp32 `main_param.grad` for the step (`_copy_model_grads_to_main_grads`): 20 B/param,
//!   4 + 16/d; `fp32`: 16, 8 + 8/d.
//! - `fsdp`: parameters, gradients and states in the parameters' dtype, sharded over dp by
//!   strategy (0 = NO_SHARD; 2 = SHARD_GRAD_OP and 3 = FULL_SHARD shard all three, and differ
//!   in how long the unsharded copies live).

use crate::job::{Framework, Precision, ResolvedJob};

/// Byte widths of each state per trainable element, by framework and precision.
#[derive(Clone, Copy)]
pub(super) struct Widths {
    pub(super) param: u64,
    pub(super) grad: u64,
    pub(super) master: u64,
    pub(super) state: u64,
    /// An fp32 copy of the gradients the optimizer makes for its step, sharded like the
    /// optimizer states (Megatron's fp16 path); freed after the step.
    pub(super) main_grad: u64,
}

pub(super) fn widths(job: &ResolvedJob) -> Widths {
    let p = job.precision;
    match (job.framework, p) {
        (
            Framework::Deepspeed | Framework::Megatron,
            Precision::Fp16Mixed | Precision::Bf16Mixed,
        ) => {
            // Megatron accumulates bf16 models' gradients in an fp32 `main_grad` buffer
            // (`accumulate_allreduce_grads_in_fp32`, forced for bf16), fp16 models' in fp16;
            // DeepSpeed keeps 16-bit gradients either way (ZeRO paper §3.1, 2Ψ).
            let fp32_main_grad = job.framework == Framework::Megatron && p == Precision::Bf16Mixed;
            let fp16_copy = job.framework == Framework::Megatron && p == Precision::Fp16Mixed;
            Widths {
                param: 2,
                grad: if fp32_main_grad { 4 } else { 2 },
                master: 4,
                state: 4,
                main_grad: if fp16_copy { 4 } else { 0 },
            }
        }
        // DeepSpeed's ZeRO-1/2 optimizer keeps an fp32 partition of the parameters whatever
        // the model's dtype (`stage_1_and_2.py` `__init__`: `single_partition_of_fp32_groups`
        // is the partition's `.clone()`, a copy also when the model is fp32); ZeRO-3 steps
        // the fp32 partition itself (`stage3.py` `_create_fp32_partitions`).
        (Framework::Deepspeed, Precision::Fp32) if matches!(job.parallel.zero, 1 | 2) => Widths {
            param: 4,
            grad: 4,
            master: 4,
            state: 4,
            main_grad: 0,
        },
        (_, Precision::Fp32 | Precision::Fp16Mixed | Precision::Bf16Mixed) => Widths {
            param: 4,
            grad: 4,
            master: 0,
            state: 4,
            main_grad: 0,
        },
        (_, Precision::Fp16 | Precision::Bf16) => Widths {
            param: 2,
            grad: 2,
            master: 0,
            state: 2,
            main_grad: 0,
        },
    }
}

/// Which states are divided over data-parallel ranks: (parameters, gradients, states+master).
pub(super) fn shards(job: &ResolvedJob, warnings: &mut Vec<String>) -> (u64, u64, u64) {
    let dp = job.parallel.dp.max(1);
    let z = job.parallel.zero;
    match job.framework {
        // FSDP keeps every parameter sharded outside its unit's computation under
        // SHARD_GRAD_OP as under FULL_SHARD (torch `ShardingStrategy.SHARD_GRAD_OP`:
        // "everything is sharded outside computation"; FSDP2 `fully_shard` shards at
        // construction whatever `reshard_after_forward`): the unsharded copies are its buffers
        // (`states/buffers.rs`, `alloc_events/fsdp.rs`).
        Framework::Fsdp => (
            if z >= 2 { dp } else { 1 },
            if z >= 2 { dp } else { 1 },
            if z >= 1 { dp } else { 1 },
        ),
        Framework::Deepspeed => (
            if z >= 3 { dp } else { 1 },
            if z >= 2 { dp } else { 1 },
            if z >= 1 { dp } else { 1 },
        ),
        Framework::Megatron => (1, 1, if z >= 1 { dp } else { 1 }),
        _ => {
            if z > 0 {
                warnings.push(format!(
                    "parallel.zero {z} has no meaning for framework {}: use deepspeed or fsdp; \
                     states are not sharded",
                    job.framework.as_str()
                ));
            }
            (1, 1, 1)
        }
    }
}
