//! One rank of FSDP2 (`fully_shard`, `torch/distributed/fsdp/_fully_shard/`, torch 2.15) as
//! the caching allocator sees it: every decoder layer one unit, the root (embeddings, final
//! norm, head) one more, as torchtitan and accelerate's FSDP2 plugin wrap a causal LM;
//! `reshard_after_forward=True` (FULL_SHARD, `parallel.zero: 3`) or `False` (SHARD_GRAD_OP,
//! `parallel.zero: 2`), the default prefetching, and either
//! `MixedPrecisionPolicy(param_dtype=bf16|fp16, reduce_dtype=fp32)` or no mixed precision;
//! one micro-batch or several, each reduce-scattered (FSDP2's default `reduce_grads=True`);
//! a full fine-tune or LoRA adapters over a frozen base ([`params`]).
//!
//! What each step allocates, and on which stream (`FSDPCommContext.lazy_init`: the default
//! stream, the all-gather copy-in stream, the all-gather stream, the reduce-scatter stream):
//!
//! - **Shards** (`FSDPParam._init_sharded_param`): each parameter's rank-0 chunk along dim 0,
//!   padded to `⌈dim0 / world⌉` rows (`padded_sharded_param = param_data.new_zeros(...)`),
//!   in the parameter's own dtype; the optimizer's states are `zeros_like` of the shard.
//! - **Unshard** (`FSDPParamGroup.unshard` → `foreach_all_gather`), on the copy-in stream:
//!   under mixed precision `_get_param_all_gather_inputs` casts every shard into one flat
//!   tensor (`flat_foreach_copy_input`, Σ shards × param_dtype), then
//!   `all_gather_output = torch.empty(Σ shards × world)`; the flat input is held by
//!   `all_gather_inputs` until `foreach_all_gather` returns (after the output exists). Without
//!   mixed precision the shards themselves are the inputs: no flat copy.
//! - **Copy-out** (`wait_for_unshard` → `foreach_all_gather_copy_out`), on the default stream:
//!   each parameter's `all_gather_outputs` (`init_all_gather_outputs` / `alloc_storage`: world ×
//!   padded shard, param_dtype), in order; the unsharded parameters are views of them. In
//!   forward the all-gather output is then held in `comm_ctx.all_gather_state` and released at
//!   the next unit's `wait_for_unshard` (`release_all_gather_state_for_comm_reuse`, after that
//!   unit's all-gather output is made), the last by the root's `_post_forward`; in backward it
//!   is freed right after the copy-out.
//! - **Reshard** (`reshard` → `FSDPParam.to_sharded` → `free_storage`): after each layer's
//!   forward, and after each unit's backward. The root does not reshard after forward
//!   (`FSDPState._lazy_init`: `post_forward_mesh_info = None`). Under
//!   `reshard_after_forward=False` no unit does (`FSDPParamGroup.reshard` returns in the
//!   `FORWARD` state when `post_forward_mesh_info` is `None`): every unit's unsharded
//!   parameters live from its forward to its post-backward, and the backward gathers nothing
//!   (`unshard` returns at `is_unsharded`, `wait_for_unshard` at no `_all_gather_result`, so
//!   `_backward_prefetch`'s unshard is a no-op too).
//! - **Prefetch**: in forward FSDP2 prefetches implicitly (the next all-gather is issued when
//!   the next unit's pre-forward runs: no earlier allocation); in backward `_backward_prefetch`
//!   unshards the unit before in post-forward order from each unit's `pre_backward` — the
//!   root's (the first hook of the backward) prefetches the last layer, layer i's layer i − 1,
//!   after its own copy-out.
//! - **Reduce** (`post_backward` → `foreach_reduce`): the unit's unsharded gradients (made by
//!   autograd in param_dtype: `_set_unsharded_grad_dtypes(defer_upcast=True)` leaves them in
//!   the dtype autograd produces) are taken, the unit resharded, the previous unit's
//!   reduce-scatter input released (`reduce_scatter_states`, at most
//!   `reduce_scatter_max_input_buffers` = 1 kept), then `reduce_scatter_input = torch.empty(Σ
//!   padded unsharded sizes, reduce_dtype)` on the default stream, the gradients freed after the
//!   copy-in (`unsharded_grads.clear()`), and `reduce_output` (input / world) on the
//!   reduce-scatter stream. The sharded gradients are views of `reduce_output`
//!   (`_cast_and_view_sharded_grads`: the reduce dtype is the shards' own), so it lives until
//!   `zero_grad(set_to_none=True)`. From a step's second micro-batch on the sharded `.grad`
//!   exists: `foreach_reduce` adds the new `reduce_output` into it
//!   (`sharded_param.grad._local_tensor += new_sharded_grad`) and drops it when it returns, so
//!   each later reduce-scatter's output is freed at once (the unsharded gradients were taken,
//!   `_take_unsharded_grads_to_reduce` sets `unsharded_param.grad = None`, so every
//!   micro-batch's backward makes them afresh). The root's post-backward runs in the
//!   backward's final callback (`_root_post_backward_final_callback`: its inputs need no
//!   gradient), and `_end_backward_iteration` releases the last reduce-scatter input.
//!
//! Cross-stream frees: FSDP2 calls no `record_stream`. It holds references (the all-gather
//! state, the reduce-scatter states) until the consuming stream has waited on an event, then
//! drops them; the caching allocator puts a freed block back in the pool of the stream that
//! allocated it, where only that stream's later requests find it. So each allocation is made
//! on its stream ([`super::Sink::stream`]) and freed at the moment the reference goes.

use super::{Param, Sink};
use crate::error::CoreError;
use crate::estimate::states::LoraAdapter;
use crate::inventory::{Component, Inventory};
use crate::job::{Precision, ResolvedJob};

/// The default (compute) stream.
pub const DEFAULT_STREAM: u64 = 0;
/// `all_gather_copy_in_stream`: the all-gather inputs and outputs are allocated on it.
pub const COPY_IN_STREAM: u64 = 1;
/// `reduce_scatter_stream`: the reduce-scatter outputs (the sharded gradients).
pub const REDUCE_SCATTER_STREAM: u64 = 3;

/// One `fully_shard` unit: its parameters and what its collectives move.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unit {
    /// Indices into the parameters, in module order.
    pub params: Vec<usize>,
    /// Each parameter's all-gather output (world × padded shard elements × param_dtype).
    pub unsharded: Vec<u64>,
    /// Σ padded shard elements of its parameters.
    pub shard_elements: u64,
    /// Σ padded shard elements of those cast to `param_dtype` before the all-gather
    /// (`_get_param_all_gather_inputs`' `use_foreach_copy`: a parameter whose own dtype is
    /// `param_dtype` is its own input).
    pub cast_elements: u64,
    /// Σ padded shard elements of those with a gradient: the reduce-scatter's
    /// (`_take_unsharded_grads_to_reduce` skips a parameter whose `.grad` is `None`).
    pub grad_elements: u64,
}

/// The FSDP2 layout of one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fsdp {
    /// The decoder layers' units in order, then the root's.
    pub units: Vec<Unit>,
    /// The shard group's size (data-parallel ranks).
    pub world: u64,
    /// Bytes of the all-gathered (compute) dtype: param_dtype, or the shards' own.
    pub compute: u64,
    /// Bytes of the reduce dtype.
    pub reduce: u64,
    /// `reshard_after_forward`: FULL_SHARD (`zero: 3`); `false` is SHARD_GRAD_OP (`zero: 2`).
    pub reshard_after_forward: bool,
    /// The embeddings have no gradient (LoRA's frozen base), so the first layer's input needs
    /// none: its `RegisterPostBackwardFunction` is not in the graph and its post-backward runs
    /// in `_root_post_backward_final_callback`, after the root's (`all_states`: the root
    /// first).
    pub first_deferred: bool,
}

impl Fsdp {
    /// The root's unit (the last).
    pub fn root(&self) -> usize {
        self.units.len().saturating_sub(1)
    }

    /// The decoder layers' units.
    pub fn layers(&self) -> usize {
        self.root()
    }
}

/// The bytes of a shard's dtype and of the compute dtype: FSDP keeps the parameters in their
/// loaded dtype (fp32 under mixed precision and fp32; 16 bit in pure bf16/fp16) and
/// all-gathers them in `param_dtype` (16 bit under mixed precision).
fn widths(precision: Precision) -> (u64, u64) {
    match precision {
        Precision::Fp32 => (4, 4),
        Precision::Bf16Mixed | Precision::Fp16Mixed => (4, 2),
        Precision::Bf16 | Precision::Fp16 => (2, 2),
    }
}

/// One parameter as FSDP shards it: its dim 0, its elements, its dtype's bytes, whether it
/// trains.
struct Piece {
    rows: u64,
    elements: u64,
    width: u64,
    trains: bool,
}

/// The parameters of one FSDP rank (rank 0, whose chunks are the padded ones) and its units:
/// each tensor's shard (`⌈dim0 / world⌉` rows, the shard's dtype), its unsharded gradient
/// (every element, in the compute dtype: what autograd makes for the unsharded parameter),
/// its optimizer states on the shard. Under LoRA the base is frozen in its loaded dtype (16
/// bit beside mixed precision, as `states.rs` keeps it) and each adapted weight `[out, in]`
/// is followed by its adapters in PEFT's module order (`base_layer`, `lora_A` `[r, in]`,
/// `lora_B` `[out, r]`: [`LoraAdapter`]), in `peft.adapter_dtype`, trained; `conv1d`: the
/// base's projections are `Conv1D` (`states::conv1d_weights`).
pub fn params(
    inv: &Inventory,
    job: &ResolvedJob,
    conv1d: bool,
) -> Result<(Vec<Param>, Fsdp), CoreError> {
    let (width, compute) = widths(job.precision);
    let lora = job.peft.as_ref();
    let base_width = if lora.is_some() && job.precision != Precision::Fp32 {
        2
    } else {
        width
    };
    let layers = inv
        .tensors
        .iter()
        .filter_map(|t| t.layer)
        .max()
        .map_or(0, |l| l as usize + 1);
    let mut f = Fsdp {
        units: vec![Unit::default(); layers + 1],
        world: job.parallel.dp.max(1),
        compute,
        reduce: if width != compute { 4 } else { compute },
        reshard_after_forward: job.parallel.zero >= 3,
        first_deferred: false,
    };
    let mut out = Vec::with_capacity(inv.tensors.len());
    for t in &inv.tensors {
        let rows = t.shape.first().copied().unwrap_or(1).max(1);
        let base = Piece {
            rows,
            elements: t.elements(),
            width: base_width,
            trains: lora.is_none(),
        };
        push_shard(&mut out, &mut f, job, t, base)?;
        let Some((p, a)) = lora.and_then(|p| adapter_of(t, p, conv1d).map(|a| (p, a))) else {
            continue;
        };
        let width = p.adapter_dtype.bytes();
        for [rows, cols] in a.tensors() {
            let piece = Piece {
                rows,
                elements: rows.saturating_mul(cols),
                width,
                trains: true,
            };
            push_shard(&mut out, &mut f, job, t, piece)?;
        }
    }
    f.first_deferred = !out.iter().any(|p| p.embedding && p.grad > 0);
    Ok((out, f))
}

/// The adapter LoRA puts beside `t` (a target module's 2-D weight: `states::lora_modules`'
/// matching), if any.
pub(super) fn adapter_of(
    t: &crate::inventory::Tensor,
    p: &crate::job::Peft,
    conv1d: bool,
) -> Option<LoraAdapter> {
    use crate::estimate::states::{adapters_of, lora_modules, LoraModules};
    let m = lora_modules(std::slice::from_ref(t), &p.targets, conv1d);
    let one = LoraModules {
        modules: m.modules,
        unmatched: None,
    };
    adapters_of(&one, &p.targets, p.rank).ok()?.first().copied()
}

/// `piece` of tensor `t` sharded onto rank 0 and added to its unit.
fn push_shard(
    out: &mut Vec<Param>,
    f: &mut Fsdp,
    job: &ResolvedJob,
    t: &crate::inventory::Tensor,
    piece: Piece,
) -> Result<(), CoreError> {
    let rows = piece.rows.max(1);
    let shard = rows.div_ceil(f.world).saturating_mul(piece.elements / rows);
    let (trains, width) = (piece.trains, piece.width);
    out.push(Param {
        bytes: shard.saturating_mul(width),
        grad: if trains {
            piece.elements.saturating_mul(f.compute)
        } else {
            0
        },
        layer: t.layer,
        embedding: t.component == Component::Embedding && t.layer.is_none(),
        states: if trains {
            crate::estimate::optimizer::first_state_bytes(job.optimizer, &[shard], width)?
        } else {
            [0; 4]
        },
        tape_grad: matches!(t.component, Component::Attention | Component::Mlp),
        quant: None,
        part: t.part,
    });
    let root = f.root();
    let u = &mut f.units[t.layer.map_or(root, |l| l as usize)];
    u.params.push(out.len() - 1);
    u.unsharded
        .push(shard.saturating_mul(f.world).saturating_mul(f.compute));
    u.shard_elements = u.shard_elements.saturating_add(shard);
    if width != f.compute {
        u.cast_elements = u.cast_elements.saturating_add(shard);
    }
    if trains {
        u.grad_elements = u.grad_elements.saturating_add(shard);
    }
    Ok(())
}

/// What FSDP holds across the step's phases (the stream's tensor ids).
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// `comm_ctx.all_gather_state`: the last forward all-gather output, held to the next
    /// copy-out.
    held: Option<u32>,
    /// Each unit's all-gather output, issued and not yet copied out.
    gathered: Vec<Option<u32>>,
    /// Each unit's unsharded parameters (empty: sharded).
    unsharded: Vec<Vec<u32>>,
    /// The reduce-scatter input kept by `reduce_scatter_states`.
    rs_input: Option<u32>,
    /// Each unit's `reduce_output`, which its sharded gradients view.
    reduced: Vec<Option<u32>>,
    /// The first layer's unsharded gradients, its post-backward deferred to the final
    /// callback ([`Fsdp::first_deferred`]).
    deferred: Vec<u32>,
}

impl Live {
    pub fn new(f: &Fsdp) -> Self {
        let n = f.units.len();
        Live {
            gathered: vec![None; n],
            unsharded: vec![Vec::new(); n],
            reduced: vec![None; n],
            ..Live::default()
        }
    }
}

/// `unshard`: the unit's all-gather issued (nothing if it is unsharded or already issued).
pub fn unshard<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, unit: usize) {
    let Some(u) = f.units.get(unit) else {
        return;
    };
    if live.gathered[unit].is_some() || !live.unsharded[unit].is_empty() {
        return;
    }
    s.stream(COPY_IN_STREAM);
    let flat = if u.cast_elements > 0 {
        s.alloc(u.cast_elements.saturating_mul(f.compute))
    } else {
        u32::MAX
    };
    let out = s.alloc(
        u.shard_elements
            .saturating_mul(f.world)
            .saturating_mul(f.compute),
    );
    s.free(flat);
    s.stream(DEFAULT_STREAM);
    live.gathered[unit] = Some(out);
}

/// `wait_for_unshard`: in forward the held output released first, the parameters copied
/// out, this output held; in backward freed after the copy-out.
pub fn wait_for_unshard<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, unit: usize, forward: bool) {
    let Some(out) = live.gathered.get_mut(unit).and_then(Option::take) else {
        return;
    };
    if forward {
        release_held(s, live);
    }
    let ids = f.units[unit]
        .unsharded
        .iter()
        .map(|&b| s.alloc(b))
        .collect();
    live.unsharded[unit] = ids;
    if forward {
        live.held = Some(out);
    } else {
        s.free(out);
    }
}

/// `unshard` then `wait_for_unshard`: a unit's pre-forward (or pre-backward).
pub fn pre<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, unit: usize, forward: bool) {
    unshard(s, f, live, unit);
    wait_for_unshard(s, f, live, unit, forward);
}

/// `release_all_gather_state_*`: the held all-gather output freed.
pub fn release_held<S: Sink>(s: &mut S, live: &mut Live) {
    if let Some(h) = live.held.take() {
        s.free(h);
    }
}

/// `post_forward` → `reshard`: the unit's unsharded parameters freed, under
/// `reshard_after_forward` only.
pub fn post_forward<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, unit: usize) {
    if f.reshard_after_forward {
        reshard(s, live, unit);
    }
}

/// `reshard`: the unit's unsharded parameters freed.
pub fn reshard<S: Sink>(s: &mut S, live: &mut Live, unit: usize) {
    if let Some(ids) = live.unsharded.get_mut(unit) {
        for id in ids.drain(..) {
            s.free(id);
        }
    }
}

/// `post_backward`: reshard, the previous reduce-scatter input released, this unit's made,
/// its unsharded gradients (`grads`, in parameter order) freed, its `reduce_output` made on
/// the reduce-scatter stream.
pub fn post_backward<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, unit: usize, grads: &[u32]) {
    reshard(s, live, unit);
    if let Some(old) = live.rs_input.take() {
        s.free(old);
    }
    let shard = f.units.get(unit).map_or(0, |u| u.grad_elements);
    if shard == 0 {
        // `if not unsharded_grads: return`, after the reshard and the release.
        return;
    }
    let bytes = shard.saturating_mul(f.reduce);
    live.rs_input = Some(s.alloc(bytes.saturating_mul(f.world)));
    // `unsharded_grads.clear()`: CPython's `list.clear` releases the items last first
    // (`Objects/listobject.c` `list_clear`).
    for &g in grads.iter().rev() {
        s.free(g);
    }
    s.stream(REDUCE_SCATTER_STREAM);
    let out = s.alloc(bytes);
    s.stream(DEFAULT_STREAM);
    // An earlier micro-batch's output is the sharded `.grad`: this one is added into it and
    // dropped when `foreach_reduce` returns.
    if live.reduced[unit].is_some() {
        s.free(out);
    } else {
        live.reduced[unit] = Some(out);
    }
}

/// A layer's post-backward as autograd runs it ([`post_backward`]); the first layer's kept
/// for the final callback when its input needs no gradient ([`Fsdp::first_deferred`]).
pub fn layer_post_backward<S: Sink>(
    s: &mut S,
    f: &Fsdp,
    live: &mut Live,
    unit: usize,
    grads: Vec<u32>,
) {
    if unit == 0 && f.first_deferred {
        live.deferred = grads;
    } else {
        post_backward(s, f, live, unit, &grads);
    }
}

/// `_root_post_backward_final_callback`: the root's post-backward, then a deferred first
/// layer's, then `_end_backward_iteration`.
pub fn final_callback<S: Sink>(s: &mut S, f: &Fsdp, live: &mut Live, root_grads: &[u32]) {
    post_backward(s, f, live, f.root(), root_grads);
    if f.first_deferred && f.layers() > 0 {
        let grads = std::mem::take(&mut live.deferred);
        post_backward(s, f, live, 0, &grads);
    }
    end_backward(s, live);
}

/// `_end_backward_iteration`: the last reduce-scatter input released.
pub fn end_backward<S: Sink>(s: &mut S, live: &mut Live) {
    if let Some(old) = live.rs_input.take() {
        s.free(old);
    }
}

/// `zero_grad(set_to_none=True)`: the sharded gradients go, and with them each unit's
/// `reduce_output`.
pub fn zero_grad<S: Sink>(s: &mut S, live: &mut Live) {
    for r in live.reduced.iter_mut() {
        if let Some(id) = r.take() {
            s.free(id);
        }
    }
}

/// FSDP's buffers as the walk (`simulate.rs`) charges them, read off the same layout: what
/// each unit's collectives hold at the walk's marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkBuffers {
    /// The root's unsharded parameters (its all-gather output is the same size), gathered
    /// before the embeddings and resharded in the backward's final callback.
    pub root: u64,
    /// Each layer's unsharded parameters (= its all-gather output).
    pub layers: Vec<u64>,
    /// Each layer's reduce-scatter input (its padded unsharded size in the reduce dtype).
    pub layer_rs: Vec<u64>,
    /// The root's reduce-scatter input.
    pub root_rs: u64,
    /// The root's unsharded gradients (compute dtype): the output side's (final norm, head),
    /// then the embeddings'.
    pub head_grads: u64,
    pub embedding_grads: u64,
    /// SHARD_GRAD_OP (`reshard_after_forward=False`): each layer's unsharded parameters kept
    /// from its forward to its post-backward, nothing gathered in the backward.
    pub kept: bool,
    /// The first layer's post-backward runs after the root's ([`Fsdp::first_deferred`]).
    pub first_deferred: bool,
}

impl WalkBuffers {
    /// The walk's figures for `params` laid out by `f` ([`params`]).
    pub fn of(params: &[Param], f: &Fsdp) -> Self {
        let unsharded = |u: &Unit| u.unsharded.iter().sum::<u64>();
        let rs = |u: &Unit| {
            u.grad_elements
                .saturating_mul(f.world)
                .saturating_mul(f.reduce)
        };
        let layers = &f.units[..f.layers()];
        let root = f.units.get(f.root());
        let side = |emb: bool| {
            params
                .iter()
                .filter(|p| p.layer.is_none() && p.embedding == emb)
                .map(|p| p.grad)
                .sum()
        };
        WalkBuffers {
            root: root.map_or(0, unsharded),
            layers: layers.iter().map(unsharded).collect(),
            layer_rs: layers.iter().map(rs).collect(),
            root_rs: root.map_or(0, rs),
            head_grads: side(false),
            embedding_grads: side(true),
            kept: !f.reshard_after_forward,
            first_deferred: f.first_deferred,
        }
    }

    /// What layer `i`'s forward leaves gathered: its unsharded parameters under
    /// SHARD_GRAD_OP, nothing under FULL_SHARD.
    pub fn kept_after_forward(&self, i: usize) -> u64 {
        if self.kept {
            self.layer(Some(i))
        } else {
            0
        }
    }

    /// What a layer's pre-backward gathers beyond what is gathered already: the layer before
    /// prefetched under FULL_SHARD, nothing under SHARD_GRAD_OP.
    pub fn prefetched_before(&self, i: usize) -> u64 {
        if self.kept {
            0
        } else {
            self.layer(i.checked_sub(1))
        }
    }

    /// Layer `i`'s unsharded bytes (0 past the ends).
    pub fn layer(&self, i: Option<usize>) -> u64 {
        i.and_then(|i| self.layers.get(i)).copied().unwrap_or(0)
    }

    /// Held at the loss's backward (`simulate.rs` `walk_forward`'s end, `walk_backward`'s
    /// first mark): the root's unsharded parameters (gathered before the embeddings) and,
    /// under FULL_SHARD, the last layer's all-gather output (held through the head and the
    /// loss, then the same layer prefetched by the root's pre-backward); under SHARD_GRAD_OP
    /// every layer's unsharded parameters (the last all-gather output released by the root's
    /// post-forward, nothing prefetched).
    pub fn at_loss(&self) -> u64 {
        let layers = if self.kept {
            self.layers.iter().sum()
        } else {
            self.layer(self.layers.len().checked_sub(1))
        };
        self.root + layers
    }

    /// Held at the root's post-backward (`simulate.rs` `root_post_backward`'s mark): the
    /// root's unsharded gradients and its reduce-scatter input, the root and the last layer's
    /// input already released.
    pub fn at_root_reduce(&self) -> u64 {
        self.head_grads + self.embedding_grads + self.root_rs
    }
}

/// The walk's FSDP figures for a job the stream writes as FSDP2 (`inputs::expressible`), or
/// `None` (the heuristic's `comm_buffers` then stand).
pub fn walk_buffers(
    inv: Option<&Inventory>,
    job: &ResolvedJob,
    covered: bool,
    conv1d: bool,
) -> Result<Option<WalkBuffers>, CoreError> {
    let Some(inv) = inv.filter(|_| covered && job.framework == crate::job::Framework::Fsdp) else {
        return Ok(None);
    };
    let (p, f) = params(inv, job, conv1d)?;
    Ok(Some(WalkBuffers::of(&p, &f)))
}
