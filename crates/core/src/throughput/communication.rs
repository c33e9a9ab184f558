//! Communication per layout, and how much of it the compute hides.
//!
//! Volumes are the collectives' own (Patarasuk & Yuan 2009 for the ring; NCCL's "bus
//! bandwidth" convention, nccl-tests `doc/PERFORMANCE.md`): an all-reduce of B bytes over n
//! ranks moves 2(n−1)/n·B per rank, a reduce-scatter or an all-gather (n−1)/n·B, an all-to-all
//! (n−1)/n·B. Rank order is Megatron-LM's (`parallel_state.py`: tensor innermost, then
//! context, then data, pipeline outermost), so a group stays within a node while the product
//! of its own and the inner degrees fits one (8 GPUs unless the catalog says).
//!
//! What overlaps, as the frameworks do it:
//! - data parallel gradients (DDP buckets, ZeRO-1/2's reduce-scatter, Megatron's
//!   `--overlap-grad-reduce`) run during the backward of the step's last micro-batch; only the
//!   part longer than that backward shows;
//! - ZeRO-3 / FSDP's parameter all-gathers are prefetched during the forward and backward,
//!   their gradient reduce-scatter during the backward (FSDP's `forward_prefetch`,
//!   `backward_prefetch`; DeepSpeed's prefetch bucket);
//! - context parallelism's ring passes K/V while the attention core computes
//!   (Liu et al. 2023, Ring Attention, §3);
//! - tensor parallelism's all-reduces (Shoeybi et al. 2019, §3: two in the forward and two in
//!   the backward of every layer, of b·s·h activations), expert parallelism's all-to-alls and
//!   pipeline sends are on the critical path (Megatron without async TP / comm overlap).

use super::compute::MicroBatch;
use super::hardware::Hardware;
use super::shape::ModelShape;
use super::Setup;
use crate::job::Checkpointing;

/// Exposed communication seconds of one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Communication {
    /// Per micro-batch, on the critical path (TP, EP, PP sends, the part of CP and of ZeRO-3's
    /// gathers that compute does not hide).
    pub per_micro_batch_s: f64,
    /// Once per step: the part of the data-parallel gradient reduction the last backward does
    /// not hide.
    pub per_step_s: f64,
}

/// Seconds of a ring all-reduce of `bytes` over `n` ranks at `bus` bytes/s.
pub fn all_reduce_s(bytes: f64, n: u64, bus: f64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    2.0 * (n - 1) as f64 / n as f64 * bytes / bus
}

/// Seconds of a reduce-scatter, an all-gather or an all-to-all of `bytes` over `n` ranks.
pub fn gather_s(bytes: f64, n: u64, bus: f64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    (n - 1) as f64 / n as f64 * bytes / bus
}

/// Exposed communication of the layout's step.
pub fn exposed(shape: &ModelShape, s: &Setup, hw: &Hardware, mb: &MicroBatch) -> Communication {
    let width = s.width as f64;
    let tokens = (s.micro_batch * s.seq) as f64 / s.cp as f64;
    let layers = shape.layers as f64 / s.pp as f64;
    let activation = tokens * shape.hidden as f64 * width;
    // Tensor parallel: 2 + 2 all-reduces per layer, 2 more when full recomputation reruns the
    // forward (Korthikanti et al. 2022, §4.2.2); sequence parallelism's reduce-scatter +
    // all-gather pairs move the same bytes.
    let tp_count = 4.0
        + if s.checkpointing == Checkpointing::Full {
            2.0
        } else {
            0.0
        };
    let tp = tp_count * layers * all_reduce_s(activation, s.tp, hw.bus(s.tp));
    // Context parallel: each layer passes its K/V chunk around the ring cp − 1 times in the
    // forward, and K/V plus their gradients in the backward.
    let kv = tokens * shape.kv_width as f64 * width;
    let cp_ring = 3.0 * layers * (s.cp.saturating_sub(1)) as f64 * kv / hw.bus(s.tp * s.cp);
    let cp = (cp_ring - mb.attention_s).max(0.0);
    // Expert parallel: dispatch and combine in the forward and again in the backward, of
    // top_k copies of each token.
    let moe_layers = shape.moe_layers as f64 / s.pp as f64;
    let ep_span = s.tp * s.cp * s.ep;
    let ep = 4.0 * moe_layers * gather_s(activation * shape.top_k as f64, s.ep, hw.bus(ep_span));
    // Pipeline: one activation forward and one gradient back per micro-batch and stage.
    let pp = if s.pp > 1 {
        2.0 * activation / s.tp as f64 / hw.bus(hw.node_gpus + 1)
    } else {
        0.0
    };
    let (zero3, dp) = data_parallel(shape, s, hw, mb);
    Communication {
        per_micro_batch_s: tp + cp + ep + pp + zero3,
        per_step_s: dp,
    }
}

/// ZeRO / FSDP / DDP: (exposed per micro-batch, exposed per step). Bytes are this GPU's
/// parameters (the model over tp × pp) at the gathered width and its gradients at the reduced
/// width.
fn data_parallel(shape: &ModelShape, s: &Setup, hw: &Hardware, mb: &MicroBatch) -> (f64, f64) {
    if s.dp <= 1 {
        return (0.0, 0.0);
    }
    let params = shape.params / (s.tp * s.pp) as f64;
    let trainable = if s.peft {
        s.trainable_params / (s.tp * s.pp) as f64
    } else {
        params
    };
    let bus = hw.bus(s.tp * s.cp * s.dp);
    let forward = mb.total() / 3.0;
    let backward = mb.total() - forward;
    let grads = trainable * s.grad_width as f64;
    let weights = params * s.width as f64;
    if s.zero >= 3 {
        // Gathered for the forward and again for the backward; gradients reduce-scattered.
        let ag = gather_s(weights, s.dp, bus);
        let rs = gather_s(grads, s.dp, bus);
        let exposed = (ag - forward).max(0.0) + (ag + rs - backward).max(0.0);
        return (exposed, 0.0);
    }
    // DDP all-reduce, or ZeRO-1/2's reduce-scatter + all-gather of the updated weights: the
    // same bytes (Rajbhandari et al. 2020, ZeRO §7.1), during the last backward where the
    // framework overlaps it by default.
    let reduce = all_reduce_s(grads, s.dp, bus);
    let hidden = if overlaps_grad_reduce(s.framework) {
        backward
    } else {
        0.0
    };
    (0.0, (reduce - hidden).max(0.0))
}

/// Whether a framework's defaults overlap the data-parallel gradient reduction (ZeRO 0–2)
/// with the backward: PyTorch DDP's buckets do (`DistributedDataParallel`, `bucket_cap_mb`
/// 25) and FSDP does; Megatron-LM only with `--overlap-grad-reduce` (off by default,
/// `megatron/training/arguments.py`), DeepSpeed only with `overlap_comm` (off by default for
/// stages 1–2, DeepSpeed's ZeRO config docs).
fn overlaps_grad_reduce(framework: crate::job::Framework) -> bool {
    use crate::job::Framework as F;
    !matches!(framework, F::Megatron | F::Deepspeed)
}
