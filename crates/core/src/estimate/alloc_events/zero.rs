//! One rank of DeepSpeed ZeRO stage 1 or 2 as the caching allocator sees it: rank 0 of the
//! data-parallel group, `deepspeed/runtime/zero/stage_1_and_2.py` (`DeepSpeedZeroOptimizer`,
//! DeepSpeed 0.19.8, the current release; read beside the repository at 0.19.6, commit
//! edaa722, whose default path differs only in the step's overflow check, below) with the
//! defaults of `runtime/zero/config.py`
//! (`contiguous_gradients=True`, `overlap_comm=False` below stage 3, `reduce_scatter=True`,
//! `use_multi_rank_bucket_allreduce=True`, `reduce_bucket_size` 5e8 elements,
//! `round_robin_gradients=False`), one parameter group (`deepspeed.initialize` with
//! `model.parameters()`, or transformers' integration when the config names the optimizer),
//! no offload. `bf16.enabled` keeps the model in bf16 with an fp32 master partition (the
//! job's `bf16-mixed`); with neither bf16 nor fp16 the model and the partition are fp32.
//! A full fine-tune, or LoRA adapters over a frozen base: only `requires_grad` parameters are
//! flattened, hooked and stepped (`__init__`'s `trainable_parameters`), the base stays as
//! loaded ([`params`]; measured on the CPU with PEFT, `validation/cpu-measured-zero.json`).
//! `runtime/engine.py` `_do_optimizer_sanity_check` picks this optimizer for both: the
//! `BF16_Optimizer` (`runtime/bf16_optimizer.py`) only when `data_types.grad_accum_dtype` is
//! fp32 under stage 1, which is not the default (`get_data_types`: the model's dtype).
//!
//! - **Init** (`__init__`): `empty_cache()`, then `flatten_dense_tensors_aligned`: a zero
//!   tensor pads the group to a multiple of `nccl_start_alignment_factor` (2) × world
//!   (`align_dense_tensors`), `_flatten_dense_tensors` concatenates it into one buffer of
//!   F elements, the pad freed as the call returns; `_update_model_bit16_weights` re-points
//!   each parameter's `.data` into it (their own storage freed, in order). The partition
//!   (P = F / world elements, rank r's the r-th slice) is cloned and cast
//!   (`.detach().clone().to(dtype=float32)`: a 16-bit copy, then the fp32 master, the copy
//!   freed; under fp32 the clone is the master). `initialize_optimizer_states` makes a
//!   zero fp32 gradient of P and drops it (`group.grad = None`).
//! - **Backward hooks** (`create_gradient_handling_hooks`, a post-accumulate hook per
//!   parameter): the first hook's `setup_buckets` allocates the IPG bucket,
//!   `torch.empty(reduce_bucket_size)` in the model's dtype, whatever the model's size.
//!   Stage 2 (`process_gradients` → `reduce_independent_p_g_buckets_and_remove_grads`): if
//!   the bucket would overflow it is reduced first; the gradient is copied into the bucket and
//!   `.grad` re-pointed there (its own storage freed), except a parameter of more elements
//!   than the bucket, which keeps its gradient and is reduced alone. Stage 1 only sets up
//!   the bucket in the hooks; `engine.backward` → `allreduce_gradients` → `reduce_gradients`
//!   then runs the same per parameter in the group's (module) order after the backward.
//! - **Reduce** (`reduce_ipg_grads` → `average_tensor` → `allreduce_and_scatter` →
//!   `allreduce_bucket`): `self.flatten(small_bucket)` copies the bucket's slices into a new
//!   tensor (flushed whenever the slices pass `reduce_bucket_size`: only an oversized
//!   parameter splits), all-reduced and copied back, freed on return. Then each parameter in
//!   the bucket: in rank 0's partition, `copy_grads_in_partition` (the first call allocates
//!   `grads_in_partition`, Σ numel of the partition's parameters, whole parameters) and
//!   re-points `.grad` there; outside it, stage 2 drops `.grad`, stage 1 keeps it (a view of
//!   the bucket, or an oversized parameter's own gradient, dropped by the epilogue's
//!   `_clear_param_grad_only`).
//! - **Epilogue** (`independent_gradient_partition_epilogue`): the last bucket reduced, the
//!   partition's gradients listed as views (`get_flat_partition`, zero-padded where the
//!   parameters do not fill P: never on rank 0 of a group larger than P),
//!   `_release_ipg_buffers` frees the bucket, `_clear_param_grad_only` every `.grad`.
//! - **Accumulation** (`gradient_accumulation_steps` > 1; `engine.py`
//!   `is_gradient_accumulation_boundary`: the last micro-batch): stage 2 runs the hooks and
//!   the epilogue every micro-batch (`allreduce_gradients`); the first's `grads_in_partition`
//!   is kept by `all_grad_tensors` (the views), each later one's made afresh
//!   (`_release_ipg_buffers` set it to `None`), added into it and freed as the epilogue
//!   returns; the padded views (`averaged_gradients`) only at the boundary. Stage 1 reduces at
//!   the boundary only: `.grad` accumulates (`AccumulateGrad`) and the bucket made at the
//!   first micro-batch's first hook stays (`setup_buckets` once per `ready_for_gradients`).
//! - **Step** (`step`): with bf16/fp16 (`check_grad_overflow`) 0.19.8's
//!   `runtime/utils.py` `has_inf_or_nan` tests each gradient view by `amax`/`amin` (scalars
//!   only; 0.19.6's `_has_inf_or_nan` made `x.float()`, `isnan`, `isinf`, `logical_or` and
//!   `.float()` of each view, 11 bytes per element at once); `get_grad_norm_direct` takes
//!   `g.data.to(get_norm_dtype())`, fp64 (8n), per view (`compute_grad_norm`, default true).
//!   Then the partition is
//!   flattened (P in the model's dtype), cast to fp32 (bf16: P × 4, the flat freed), the
//!   views dropped (`averaged_gradients[i] = None` frees `grads_in_partition`), the torch
//!   optimizer steps the fp32 partition (states `zeros_like` it on the first step, foreach
//!   Adam's `_foreach_sqrt`), the fp32 gradient freed; the updated partition is copied into
//!   the flat buffer and `all_gather_into_tensor` fills the rest in place (no allocation).
//!
//! Not written: the scalars (norms, the overflow count, 512 B blocks), NCCL's own buffers
//! (outside the caching allocator). Where a moment cannot be settled from source: stage 2's
//! hooks run when each gradient is made; the stream runs a block's hooks after its backward
//! (its weight gradients freed at their nodes, as `AccumulateGrad` hands each to the hook),
//! so a bucket reduced inside a block is reduced at the block's end.

use super::{Param, Sink};
use crate::job::{Optimizer, Precision, ResolvedJob};

/// `reduce_bucket_size`'s default (`runtime/zero/config.py`: `pp_int(5e8)` elements).
pub const REDUCE_BUCKET: u64 = crate::estimate::states::DS_REDUCE_BUCKET;
/// `nccl_start_alignment_factor`: the flat buffer is padded to a multiple of 2 × world.
pub const ALIGNMENT: u64 = 2;

/// One rank's ZeRO layout (rank 0: its partition is the flat buffer's first P elements).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Zero {
    /// 1 or 2.
    pub stage: u8,
    pub world: u64,
    /// Bytes per element of the flat buffer, the gradients and the bucket (the model's dtype).
    pub width: u64,
    /// Each parameter's elements, module order.
    pub numel: Vec<u64>,
    /// Where each parameter starts in the flat buffer (elements).
    pub starts: Vec<u64>,
    /// The flat buffer's elements (F: the parameters padded to a multiple of 2 × world).
    pub flat: u64,
    /// The partition's elements (P = F / world).
    pub partition: u64,
    /// `reduce_bucket_size` in elements.
    pub bucket: u64,
    /// The optimizer's states on the fp32 partition (`zeros_like`, in order).
    pub states: [u64; 4],
    /// foreach Adam/AdamW's `_foreach_sqrt` of the partition at each step.
    pub foreach_sqrt: bool,
}

impl Zero {
    /// Parameters of `numel` elements over `world` ranks, `width` bytes each, a bucket of
    /// `bucket` elements: the flat buffer padded to a multiple of [`ALIGNMENT`] × world, the
    /// partition its world-th part (stage 2, no optimizer states: set them after).
    pub fn of(numel: Vec<u64>, world: u64, width: u64, bucket: u64) -> Self {
        let starts: Vec<u64> = numel
            .iter()
            .scan(0u64, |at, &n| {
                let start = *at;
                *at += n;
                Some(start)
            })
            .collect();
        let align = ALIGNMENT * world.max(1);
        let flat = numel.iter().sum::<u64>().div_ceil(align) * align;
        Zero {
            stage: 2,
            world,
            width,
            numel,
            starts,
            flat,
            partition: flat / world.max(1),
            bucket,
            ..Zero::default()
        }
    }

    /// Whether parameter `k` starts inside rank 0's partition (`get_partition_info`: the
    /// parameters starting in `[0, P)`).
    pub fn in_partition(&self, k: usize) -> bool {
        self.offset(k) < self.partition
    }

    /// Where parameter `k` starts in the flat buffer.
    pub fn offset(&self, k: usize) -> u64 {
        self.starts.get(k).copied().unwrap_or(self.flat)
    }

    /// `grads_in_partition`'s elements: the partition's parameters whole.
    pub fn partition_grads(&self) -> u64 {
        (0..self.numel.len())
            .filter(|&k| self.in_partition(k))
            .map(|k| self.numel[k])
            .sum()
    }

    /// The partition's gradient views in order (`get_flat_partition`: each parameter up to
    /// the partition's end), then the zero padding where they fall short of P.
    pub fn pieces(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut covered = 0u64;
        for (k, &n) in self.numel.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if !self.in_partition(k) {
                break;
            }
            let take = n.min(self.partition - covered);
            out.push(take);
            covered += take;
        }
        if covered < self.partition {
            out.push(self.partition - covered);
        }
        out
    }

    /// The zero padding `get_flat_partition` adds where the partition's parameters end before
    /// P (elements).
    pub fn padding(&self) -> u64 {
        self.partition.saturating_sub(self.partition_grads())
    }

    /// The reduce's flattened copies of parameter `k`'s gradient reduced alone (an
    /// oversized one): its slices by partition, flushed once their sum passes the bucket
    /// (`allreduce_and_scatter`).
    pub fn oversized_flushes(&self, k: usize) -> Vec<u64> {
        let (start, n) = (self.offset(k), self.numel.get(k).copied().unwrap_or(0));
        let p = self.partition.max(1);
        let (mut at, mut sum, mut out) = (start, 0u64, Vec::new());
        while at < start + n {
            let end = ((at / p + 1) * p).min(start + n);
            sum += end - at;
            at = end;
            if sum > self.bucket {
                out.push(sum);
                sum = 0;
            }
        }
        if sum > 0 {
            out.push(sum);
        }
        out
    }
}

/// The layout of `params` (module order, their gradients' bytes at `width`) for `job`.
pub fn layout(
    params: &[Param],
    job: &ResolvedJob,
    width: u64,
) -> Result<Zero, crate::error::CoreError> {
    let numel = params.iter().map(|p| p.grad / width.max(1)).collect();
    let z = Zero::of(numel, job.parallel.dp.max(1), width, REDUCE_BUCKET);
    Ok(Zero {
        stage: job.parallel.zero.min(2) as u8,
        states: crate::estimate::optimizer::first_state_bytes(job.optimizer, &[z.partition], 4)?,
        foreach_sqrt: matches!(job.optimizer, Optimizer::Adam | Optimizer::AdamW),
        ..z
    })
}

/// The parameters of one ZeRO rank in module order, as the engine leaves them before the
/// optimizer is built (`_configure_distributed_model` → `_cast_module_mixed_precision`: every
/// parameter cast to bf16 under `bf16.enabled`, LoRA's fp32 adapters included; moved to the
/// device): each tensor and its gradient at the model's width, no per-parameter optimizer
/// state (the optimizer steps the fp32 partition); and the rank's layout. Under LoRA the base
/// is frozen (no gradient, left out of the flat buffer: `__init__` keeps only
/// `param.requires_grad` in `bit16_groups`, and `create_gradient_handling_hooks` hooks only
/// those) and each adapted weight is followed by its adapters in PEFT's module order
/// (`base_layer`, `lora_A` `[r, in]`, `lora_B` `[out, r]`: [`LoraAdapter`]), trained.
/// `None` where a block's parameter has more elements than the bucket (reduced alone in the
/// middle of its block: not written) or a parameter takes no gradient (an idle tower's).
///
/// [`LoraAdapter`]: crate::estimate::states::LoraAdapter
pub fn params(
    inv: &crate::inventory::Inventory,
    job: &ResolvedJob,
    conv1d: bool,
) -> Result<Option<(Vec<Param>, Zero)>, crate::error::CoreError> {
    use crate::inventory::Component;
    let oversized_in_block =
        |t: &crate::inventory::Tensor| t.layer.is_some() && t.elements() > REDUCE_BUCKET;
    if inv.tensors.iter().any(|t| t.idle || oversized_in_block(t)) {
        return Ok(None);
    }
    let width = if job.precision == Precision::Fp32 {
        4
    } else {
        2
    };
    let lora = job.peft.as_ref();
    let mut params = Vec::with_capacity(inv.tensors.len());
    for t in registration_order(inv).into_iter().map(|k| &inv.tensors[k]) {
        let bytes = t.elements().saturating_mul(width);
        let trains = lora.is_none();
        params.push(Param {
            bytes,
            grad: if trains { bytes } else { 0 },
            layer: t.layer,
            embedding: t.component == Component::Embedding && t.layer.is_none(),
            states: [0; 4],
            // A frozen weight's linear makes no weight gradient on the tape.
            tape_grad: trains && matches!(t.component, Component::Attention | Component::Mlp),
            quant: None,
            part: t.part,
        });
        let Some(a) = lora.and_then(|p| super::fsdp::adapter_of(t, p, conv1d)) else {
            continue;
        };
        for [rows, cols] in a.tensors() {
            let bytes = rows.saturating_mul(cols).saturating_mul(width);
            params.push(Param {
                bytes,
                grad: bytes,
                layer: t.layer,
                tape_grad: true,
                part: t.part,
                ..Param::default()
            });
        }
    }
    let z = layout(&params, job, width)?;
    Ok(Some((params, z)))
}

/// The tensors in `model.parameters()` order, which the flat buffer follows: the inventory's
/// (the checkpoint's) order but that a decoder layer registers its norms after its attention
/// and MLP (transformers' `LlamaDecoderLayer.__init__`: `self_attn`, `mlp`,
/// `input_layernorm`, `post_attention_layernorm`; measured on the CPU,
/// `validation/cpu-measured-zero.json`: rank 0's partition ends in the second block's
/// `q_proj`, not its first norm).
fn registration_order(inv: &crate::inventory::Inventory) -> Vec<usize> {
    use crate::inventory::Component;
    let t = &inv.tensors;
    let mut group = vec![0usize; t.len()];
    for k in 0..t.len() {
        group[k] = match t[k].layer {
            Some(l) if k > 0 && t[k - 1].layer == Some(l) => group[k - 1],
            _ => k,
        };
    }
    let mut order: Vec<usize> = (0..t.len()).collect();
    order.sort_by_key(|&k| {
        (
            group[k],
            t[k].layer.is_some() && t[k].component == Component::Norm,
        )
    });
    order
}

/// What ZeRO holds across the step (the stream's ids).
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// The IPG bucket (`ipg_buckets[dtype].buffer[0]`).
    ipg: Option<u32>,
    /// Elements in the bucket and the parameters they belong to.
    elements: u64,
    pending: Vec<usize>,
    /// An oversized parameter's own gradient, waiting for its reduce.
    oversized: Option<(usize, u32)>,
    /// `grads_in_partition` (and the epilogue's zero padding): the first micro-batch's, which
    /// `all_grad_tensors` keeps and later ones add into, held to the step.
    partition_grads: Vec<u32>,
    /// A later micro-batch's own `grads_in_partition` (made afresh: `_release_ipg_buffers`
    /// set it to `None`), freed as its epilogue returns.
    fresh: Vec<u32>,
    /// Whether this backward's `grads_in_partition` is made.
    made: bool,
    /// Stage 1: gradients outside the partition kept to the epilogue's `_clear_param_grad_only`.
    kept: Vec<u32>,
}

/// `DeepSpeedZeroOptimizer.__init__` after the model's parameters (`params`: their ids, module
/// order) are on the device: the flat buffer, the parameters re-pointed into it, the fp32
/// master partition, `initialize_optimizer_states`' dropped gradient.
pub fn init<S: Sink>(s: &mut S, z: &Zero, params: &[u32]) {
    let total: u64 = z.numel.iter().sum();
    let pad = s.alloc((z.flat - total).saturating_mul(z.width));
    s.alloc(z.flat.saturating_mul(z.width));
    s.free(pad);
    // Only the trainable parameters are flattened (a frozen one, numel 0 here, stays as loaded).
    for (k, &id) in params.iter().enumerate() {
        if z.numel.get(k).is_some_and(|&n| n > 0) {
            s.free(id);
        }
    }
    let clone = s.alloc(z.partition.saturating_mul(z.width));
    if z.width != 4 {
        s.alloc(z.partition.saturating_mul(4));
        s.free(clone);
    }
    let g = s.alloc(z.partition.saturating_mul(4));
    s.free(g);
}

/// `setup_buckets` at a backward's first hook: the IPG bucket.
pub fn setup<S: Sink>(s: &mut S, z: &Zero, live: &mut Live) {
    if live.ipg.is_none() {
        live.ipg = Some(s.alloc(z.bucket.saturating_mul(z.width)));
    }
}

/// `reduce_independent_p_g_buckets_and_remove_grads` for parameter `k` whose gradient is
/// `grad` (`u32::MAX`: already freed where it was made).
pub fn hook<S: Sink>(s: &mut S, z: &Zero, live: &mut Live, k: usize, grad: u32) {
    setup(s, z, live);
    let n = z.numel.get(k).copied().unwrap_or(0);
    if n == 0 {
        s.free(grad);
        return;
    }
    if live.elements + n > z.bucket {
        reduce(s, z, live);
    }
    if n > z.bucket {
        live.oversized = Some((k, grad));
    } else {
        s.free(grad);
    }
    live.elements += n;
    live.pending.push(k);
}

/// `reduce_ipg_grads`: the bucket's flattened copy made and freed, then each of its
/// parameters' gradients copied into the partition's buffer or dropped.
pub fn reduce<S: Sink>(s: &mut S, z: &Zero, live: &mut Live) {
    let flushes = match live.oversized {
        Some((k, _)) => z.oversized_flushes(k),
        None => vec![live.elements],
    };
    for f in flushes.into_iter().filter(|&f| f > 0) {
        let t = s.alloc(f.saturating_mul(z.width));
        s.free(t);
    }
    for k in std::mem::take(&mut live.pending) {
        let own = live.oversized.filter(|&(o, _)| o == k).map(|(_, g)| g);
        if z.in_partition(k) {
            if !live.made {
                let g = s.alloc(z.partition_grads().saturating_mul(z.width));
                live.made = true;
                match live.partition_grads.is_empty() {
                    true => live.partition_grads.push(g),
                    false => live.fresh.push(g),
                }
            }
            if let Some(g) = own {
                s.free(g);
            }
        } else if let Some(g) = own {
            if z.stage >= 2 {
                s.free(g);
            } else {
                live.kept.push(g);
            }
        }
    }
    live.oversized = None;
    live.elements = 0;
}

/// Stage 2 accumulating: the first micro-batch's `grads_in_partition`, as its reduce left it
/// (`copy_grads_in_partition`), which `all_grad_tensors` keeps to the boundary.
pub fn carry_partition<S: Sink>(s: &mut S, z: &Zero, live: &mut Live) {
    if live.partition_grads.is_empty() && z.partition_grads() > 0 {
        let g = s.alloc(z.partition_grads().saturating_mul(z.width));
        live.partition_grads.push(g);
    }
}

/// Stage 1's `reduce_gradients` after the backward: every parameter's gradient (`grads`,
/// module order) through [`hook`].
pub fn reduce_gradients<S: Sink>(s: &mut S, z: &Zero, live: &mut Live, grads: &[u32]) {
    for (k, &g) in grads.iter().enumerate() {
        hook(s, z, live, k, g);
    }
}

/// `independent_gradient_partition_epilogue`: the last bucket reduced; at the accumulation
/// `boundary` the zero padding of the partition's views (`get_flat_partition`) where its
/// parameters fall short of P; the bucket freed, every `.grad` dropped; a later
/// micro-batch's own `grads_in_partition`, added into the first's (`all_grad_tensors`,
/// `add_`), freed as the call returns (its last holder, `avg_new`, a local).
pub fn epilogue<S: Sink>(s: &mut S, z: &Zero, live: &mut Live, boundary: bool) {
    reduce(s, z, live);
    let pad = z.padding();
    if boundary && pad > 0 {
        live.partition_grads
            .push(s.alloc(pad.saturating_mul(z.width)));
    }
    if let Some(id) = live.ipg.take() {
        s.free(id);
    }
    for g in live.kept.drain(..).chain(live.fresh.drain(..)) {
        s.free(g);
    }
    live.made = false;
}

/// `step`: the norm over the partition's views (the overflow check makes scalars only), the
/// flat fp32 gradient, the views' buffer dropped, the optimizer's step (its states made on
/// the first, `first`), the fp32 gradient dropped.
pub fn step<S: Sink>(s: &mut S, z: &Zero, live: &mut Live, first: bool) {
    for n in z.pieces() {
        let d = s.alloc(8 * n);
        s.free(d);
    }
    let flat = s.alloc(z.partition.saturating_mul(z.width));
    let grad = if z.width != 4 {
        let g = s.alloc(z.partition.saturating_mul(4));
        s.free(flat);
        g
    } else {
        flat
    };
    for g in live.partition_grads.drain(..) {
        s.free(g);
    }
    if first {
        for &b in &z.states {
            s.alloc(b);
        }
    }
    if z.foreach_sqrt {
        let t = s.alloc(z.states[1]);
        s.free(t);
    }
    s.free(grad);
}

#[cfg(test)]
mod tests {
    use super::super::{Event, Stream};
    use super::*;

    /// A layout of `numel` over `world` ranks with a bucket of `bucket` elements, 2-byte
    /// elements, no optimizer states.
    fn layout_of(numel: &[u64], world: u64, bucket: u64, stage: u8) -> Zero {
        Zero {
            stage,
            ..Zero::of(numel.to_vec(), world, 2, bucket)
        }
    }

    /// Allocations as +bytes, frees as −bytes (of the freed block), in order.
    fn signed(s: &Stream) -> Vec<i64> {
        let mut size = vec![0i64; s.ids()];
        s.events
            .iter()
            .filter_map(|e| match *e {
                Event::Alloc { id, bytes } => {
                    size[id as usize] = bytes as i64;
                    Some(bytes as i64)
                }
                Event::Free { id } => Some(-size[id as usize]),
                _ => None,
            })
            .collect()
    }

    /// Parameters of 6, 3, 5, 2 elements over 2 ranks: N = 16, already a multiple of 4, so
    /// F = 16 and P = 8; rank 0's partition holds the first two (starting at 0 and 6), whole:
    /// `grads_in_partition` 9 elements (18 B). A bucket of 8. Stage 2's hooks in ready order
    /// (last parameter first), each gradient freed into the bucket: 2 (bucket 2), 5 (7), then
    /// 3 overflows it — 7 + 3 > 8 — so the 7 are reduced first (flattened copy 14 B, freed;
    /// neither parameter in the partition), 3 copied (3); then 6 overflows (3 + 6 > 8): the 3
    /// reduced (6 B), its parameter in the partition makes `grads_in_partition` (18 B); 6
    /// copied. The epilogue reduces the 6 (12 B) and frees the bucket (8 · 2 = 16 B).
    #[test]
    fn stage2_reduces_whenever_the_bucket_would_overflow() {
        let z = layout_of(&[6, 3, 5, 2], 2, 8, 2);
        assert_eq!((z.flat, z.partition, z.partition_grads()), (16, 8, 9));
        let mut s = Stream::default();
        let mut live = Live::default();
        let grads: Vec<u32> = z.numel.iter().map(|&n| s.alloc(2 * n)).collect();
        for k in (0..4).rev() {
            hook(&mut s, &z, &mut live, k, grads[k]);
        }
        epilogue(&mut s, &z, &mut live, true);
        assert_eq!(
            signed(&s),
            [12, 6, 10, 4, 16, -4, -10, 14, -14, -6, 6, -6, 18, -12, 12, -12, -16]
        );
    }

    /// Parameters of 10, 2, 4 over 2 ranks (F = 16, P = 8), a bucket of 8: the first is
    /// larger than the bucket. Stage 1 reduces in module order after the backward: the 10
    /// overflows the empty bucket (nothing to reduce) and is kept as its own gradient,
    /// reduced alone when the 2 arrives: its slices by partition, 8 then 2, pass the bucket
    /// only together (8 is not > 8), so one flattened copy of 10 (20 B); it starts in the
    /// partition, so `grads_in_partition` (its 10 elements, 20 B) is made and its own gradient
    /// freed. The 2 and 4 are freed into the bucket; the epilogue reduces their 6 (12 B) and
    /// frees the bucket (16 B).
    #[test]
    fn an_oversized_gradient_is_reduced_alone() {
        let z = layout_of(&[10, 2, 4], 2, 8, 1);
        assert_eq!(z.oversized_flushes(0), [10]);
        let mut s = Stream::default();
        let mut live = Live::default();
        let grads: Vec<u32> = z.numel.iter().map(|&n| s.alloc(2 * n)).collect();
        reduce_gradients(&mut s, &z, &mut live, &grads);
        epilogue(&mut s, &z, &mut live, true);
        assert_eq!(
            signed(&s),
            [20, 4, 8, 16, 20, -20, 20, -20, -4, -8, 12, -12, -16]
        );
        // 20 elements over 4 ranks: F = 24, P = 6. Its slices 6, 6 pass the bucket of 8
        // (12 > 8: flushed), then 6 and 2 make 8, flushed at the end.
        assert_eq!(layout_of(&[20], 4, 8, 2).oversized_flushes(0), [12, 8]);
    }

    /// Stage 1 keeps a reduced oversized gradient outside the partition to the epilogue's
    /// `_clear_param_grad_only`; stage 2 drops it at its reduce. Parameters 8 and 10 over 4
    /// ranks: N = 18 padded to F = 24, P = 6; the 10 starts at 8, outside rank 0's partition.
    /// A bucket of 8: the 8 fills it exactly and is reduced when the 10 arrives (16 B copy;
    /// it starts in the partition: `grads_in_partition` of its 8 elements, 16 B); the 10 is
    /// held (20 B) and reduced by the epilogue — its slices [8, 12) and [12, 18), 4 then 6,
    /// pass the bucket together: one 20 B copy. Stage 2 frees its gradient then, before the
    /// bucket; stage 1 after the bucket.
    #[test]
    fn stage1_keeps_an_oversized_gradient_outside_the_partition_to_the_epilogue() {
        for (stage, tail) in [(2u8, vec![-20, -16]), (1, vec![-16, -20])] {
            let z = layout_of(&[8, 10], 4, 8, stage);
            assert_eq!((z.partition, z.in_partition(1)), (6, false));
            let mut s = Stream::default();
            let mut live = Live::default();
            let grads: Vec<u32> = z.numel.iter().map(|&n| s.alloc(2 * n)).collect();
            reduce_gradients(&mut s, &z, &mut live, &grads);
            epilogue(&mut s, &z, &mut live, true);
            let mut want = vec![16, 20, 16, -16, 16, -16, 16, 20, -20];
            want.extend(tail);
            assert_eq!(signed(&s), want, "stage {stage}");
        }
    }
}
