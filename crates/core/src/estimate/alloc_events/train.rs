//! A training process's allocator events, step by step (`validation/gpu/run_one.py`'s order:
//! context probe, model build, `empty_cache()`, the batch, then steps of
//! `zero_grad(set_to_none=True)` → forward → backward → `optimizer.step()`), with a forward
//! and backward per micro-batch when gradients are accumulated, and `.grad` kept from step to
//! step under `zero_grad(set_to_none=False)`.

mod head_backward;
mod optimizer_step;
mod rank_hooks;

use super::{reserve_block, run_block, BlockIds, Phase, PlanEvents, Sink, Stream};
use crate::estimate::forward_plan::ForwardPlan;
use crate::job::Checkpointing;
use crate::vision::Part;
use head_backward::{chunk_head_grad, fused_backward, loss_and_head_backward};
use optimizer_step::optimizer;
pub use optimizer_step::StepKind;
use rank_hooks::{
    fsdp_layer_post_backward, fsdp_post_forward, fsdp_pre, fsdp_root_post_backward, ready_order,
    zero_epilogue, zero_keep_tape_grads, zero_layer_hooks, zero_side_hooks,
};

/// One parameter tensor as the step treats it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Param {
    /// Bytes of the parameter on the device.
    pub bytes: u64,
    /// Bytes of its gradient (0: frozen).
    pub grad: u64,
    /// Its block, or `None` for the embeddings, final norm and head.
    pub layer: Option<u32>,
    /// The embeddings (input side) rather than the final norm or head (output side).
    pub embedding: bool,
    /// Optimizer state tensors the caching allocator makes for it at the first `step()`
    /// (`zeros_like`, in order; `optimizer::first_state_bytes`: a paged state is none).
    pub states: [u64; 4],
    /// Its gradient is made by its block's tape (a linear's weight or bias, a LoRA adapter:
    /// `Tape::weight_grad`), not by the stream at the block's end.
    pub tape_grad: bool,
    /// A bitsandbytes 4-bit weight: loaded as `quant_load.rs` writes it (`bytes` unused).
    pub quant: Option<super::quant_load::QuantLoad>,
    /// The model component it belongs to (a VLM's vision tower and projector: their
    /// gradients are made by the tower's backward, `tower.rs`, not the text model's).
    pub part: Part,
}

impl Param {
    /// The text model's embeddings, final norm or head (outside its blocks).
    pub fn text_outside(&self) -> bool {
        self.layer.is_none() && self.part == Part::Language
    }
}

/// The loss's tensors (`stages.rs` `loss`, transformers `ForCausalLMLoss`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossSizes {
    /// The logits in the head's dtype.
    pub logits: u64,
    /// `logits.float()` when the logits are 16-bit (0 otherwise: `.float()` returns them).
    pub upcast: u64,
    /// The saved log-softmax (t·V in the loss width), and each of the two gradients of that
    /// size at the start of backward.
    pub log_softmax: u64,
    /// `pad(labels, (0, 1))` and `shift_labels[..., 1:].contiguous()` (int64).
    pub labels_padded: u64,
    pub labels_shifted: u64,
}

/// Everything the stream is made from.
#[derive(Debug, Clone)]
pub struct TrainInputs<'a> {
    pub plan: &'a ForwardPlan,
    pub events: &'a PlanEvents,
    /// In module order (the inventory's order).
    pub params: &'a [Param],
    /// The lm-head is the token embedding (tied): its gradient is first made by the head.
    pub tied: bool,
    /// cuBLAS workspace per handle (`overhead::cublas_workspace_bytes`).
    pub workspace: u64,
    /// cuBLASLt's own workspace, made by the first forward's first biased Linear (0: none;
    /// `inputs::lt_workspace_block`).
    pub lt_workspace: u64,
    pub checkpointing: Checkpointing,
    /// Full checkpointing is the reentrant kind (`ctx_held.rs`).
    pub reentrant: bool,
    /// The embedding's output is a leaf made to require grad (`techniques::
    /// input_grads_hook`): the first block's input gradient stays as its `.grad` until the
    /// graph is released.
    pub input_grad_kept: bool,
    /// Bytes of the hidden state between blocks and of its gradient.
    pub hidden: u64,
    /// The head input's gradient (b·s·h in the compute width).
    pub head_grad_input: u64,
    pub loss: LossSizes,
    /// What `optimizer.step()` makes besides the states (`train/optimizer_step.rs`).
    pub step: StepKind,
    /// Steps to run (the H200 runs: 1 warm-up + 2 measured).
    pub steps: u8,
    /// Forward and backward passes per optimizer step (gradient accumulation; at least 1).
    pub micro_batches: u32,
    /// `zero_grad(set_to_none=False)`: `p.grad.zero_()` keeps every gradient tensor
    /// (`torch/optim/optimizer.py` `zero_grad`), so nothing is released between steps.
    pub keep_grads: bool,
    /// torchtune's chunked output and loss in place of the whole logits and `loss`
    /// (`chunked_loss.rs`).
    pub chunked_output: Option<super::chunked_loss::ChunkedOutput>,
    /// Liger's fused linear cross-entropy in place of the head's matmul and `loss`
    /// (`fused_ce.rs`).
    pub fused_ce: Option<super::fused_ce::FusedCe>,
    /// torchtune's `LinearCrossEntropyLoss` in place of the head's matmul and `loss`
    /// (`linear_ce.rs`).
    pub linear_ce: Option<crate::estimate::linear_ce::LinearCe>,
    /// One rank of `DistributedDataParallel`: the reducer's buckets (`ddp.rs`).
    pub ddp: bool,
    /// One rank of FSDP2 (`fsdp.rs`): the parameters are its shards, each unit gathered,
    /// resharded and its gradients reduce-scattered around its forward and backward.
    pub fsdp: Option<&'a super::fsdp::Fsdp>,
    /// One rank of DeepSpeed ZeRO-1/2 (`zero.rs`): the parameters flattened into one buffer,
    /// the gradients reduced through its bucket, the fp32 partition stepped.
    pub zero: Option<&'a super::zero::Zero>,
}

/// Ids of what lives across phases.
struct Live {
    /// Gradients made by the stream, per parameter (`u32::MAX`: none yet).
    grads: Vec<u32>,
    /// Gradients the blocks' tapes made.
    tape_grads: Vec<u32>,
    /// The lm-head's contribution to a tied embedding's gradient (summed at the embedding).
    tied_head: u32,
    states_made: bool,
    second_handle: bool,
    /// Every parameter holds its `.grad` (made by an earlier backward and not released):
    /// backward adds into it (`AccumulateGrad`) and frees what it made.
    accumulating: bool,
    /// This micro-batch ends the accumulation (ZeRO's `is_gradient_accumulation_boundary`).
    boundary: bool,
    /// Each block's parameters by index, in module order: `by_layer[start[l]..start[l + 1]]`
    /// for layer `l` (one pass over the parameters, not one per layer and step).
    by_layer: Vec<u32>,
    start: Vec<u32>,
    /// FSDP's buffers across phases.
    fsdp: super::fsdp::Live,
    /// ZeRO's bucket and partition gradients across phases.
    zero: super::zero::Live,
    /// Tensors the blocks' ctx attributes hold (`BlockEvents::held`), freed with the graph
    /// when the backward is done (HF Trainer's `training_step` drops the loss on return).
    graph_held: Vec<u32>,
}

/// The parameters of each layer below `layers`, grouped by layer and in module order within
/// one (a counting sort): (indices, each layer's start, with the end last).
fn params_by_layer(params: &[Param], layers: usize) -> (Vec<u32>, Vec<u32>) {
    let mut start = vec![0u32; layers + 1];
    for p in params {
        if let Some(l) = p.layer.filter(|&l| (l as usize) < layers) {
            start[l as usize + 1] += 1;
        }
    }
    for l in 0..layers {
        start[l + 1] += start[l];
    }
    let mut at = start.clone();
    let mut by_layer = vec![0u32; start[layers] as usize];
    for (k, p) in params.iter().enumerate() {
        if let Some(l) = p.layer.filter(|&l| (l as usize) < layers) {
            by_layer[at[l as usize] as usize] = k as u32;
            at[l as usize] += 1;
        }
    }
    (by_layer, start)
}

/// The whole process recorded as a [`Stream`]: context, model load, `empty_cache()`, the
/// batch, `steps` steps.
pub fn train_stream(inp: &TrainInputs) -> Stream {
    let per_step = 8
        * inp
            .events
            .blocks
            .iter()
            .map(|b| b.sizes.len())
            .sum::<usize>()
        * inp.events.layer_block.len().max(1)
        / inp.events.blocks.len().max(1)
        + 6 * inp.params.len()
        + 64;
    let mut s = Stream::with_capacity(inp.params.len() * 4 + per_step * inp.steps as usize);
    train_into(&mut s, inp);
    s
}

/// The process's events into `s`.
pub fn train_into<S: Sink>(s: &mut S, inp: &TrainInputs) {
    s.phase(Phase::Context);
    // The first matmul's cuBLAS workspace (`CublasHandlePool.cpp`, kept for the process).
    s.alloc(inp.workspace);
    s.phase(Phase::Load);
    let mut dynamic_code = false;
    let mut loaded = Vec::with_capacity(inp.params.len());
    for p in inp.params {
        match p.quant {
            Some(q) => q.load_into(s, &mut dynamic_code),
            None => loaded.push(s.alloc(p.bytes)),
        }
    }
    // run_one.py empties the cache after the build; `from_pretrained` leaves no cached
    // garbage either (its temporaries are freed and the caller's loop reuses the blocks).
    // DeepSpeed's ZeRO optimizer empties it too, then flattens the parameters.
    s.empty_cache();
    if let Some(z) = inp.zero {
        super::zero::init(s, z, &loaded);
    }
    // DDP wraps the built model: the broadcast's buckets and the reducer's first bucket.
    let mut ddp_bucket = inp.ddp.then(|| super::ddp::construct(s, inp.params));
    let half = inp.plan.inputs / 2;
    s.alloc(half);
    s.alloc(inp.plan.inputs - half);
    let (by_layer, start) = params_by_layer(inp.params, inp.events.layer_block.len());
    let mut live = Live {
        grads: vec![u32::MAX; inp.params.len()],
        tape_grads: Vec::new(),
        tied_head: u32::MAX,
        states_made: false,
        second_handle: false,
        accumulating: false,
        boundary: true,
        by_layer,
        start,
        fsdp: inp.fsdp.map(super::fsdp::Live::new).unwrap_or_default(),
        zero: Default::default(),
        graph_held: Vec::new(),
    };
    for step in 0..inp.steps {
        s.phase(Phase::ZeroGrad(step));
        if !inp.keep_grads {
            release_grads(s, &mut live);
        }
        let last = inp.micro_batches.max(1) - 1;
        let mut micro = 0;
        while micro <= last {
            live.boundary = micro == last;
            s.phase(Phase::Forward(step));
            if step == 0 && micro == 0 && inp.lt_workspace > 0 {
                s.alloc(inp.lt_workspace);
            }
            if step > 0 || micro > 0 {
                if let Some(first) = ddp_bucket.take() {
                    super::ddp::rebuild(s, first, inp.params, &ready_order(inp, &live));
                }
            }
            let fwd = forward(s, inp, &mut live);
            s.phase(Phase::Backward(step));
            backward(s, inp, &fwd, &mut live);
            fsdp_root_post_backward(s, inp, &mut live);
            live.accumulating = true;
            // From the second micro-batch on each issues the same events: once one leaves the
            // allocator as it found it, every later one would too (their figures included),
            // so the simulation skips them (a recording sink keeps them all).
            // Under ZeRO the last (the boundary: its reduce, its epilogue) differs: skip to it.
            if micro < last && s.repeats(micro >= 1) {
                if inp.zero.is_none() {
                    break;
                }
                micro = last;
                continue;
            }
            micro += 1;
        }
        s.phase(Phase::Optimizer(step));
        optimizer(s, inp, &mut live);
    }
}

/// `zero_grad(set_to_none=True)`: every `.grad` released, in parameter order.
fn release_grads<S: Sink>(s: &mut S, live: &mut Live) {
    for g in live.grads.iter_mut() {
        s.free(*g);
        *g = u32::MAX;
    }
    for g in live.tape_grads.drain(..) {
        s.free(g);
    }
    super::fsdp::zero_grad(s, &mut live.fsdp);
    live.accumulating = false;
}

/// What the forward leaves for the backward.
struct Fwd {
    embedding_out: u32,
    embedding_extra: u32,
    /// A VLM's tower (`tower.rs`).
    tower: Option<super::tower::TowerFwd>,
    /// Eager attention's masks (freed after the blocks, or under checkpointing after their
    /// backward).
    mask: u32,
    blocks: Vec<BlockIds>,
    head_kept: u32,
    head_copy: u32,
    last_hidden: u32,
    loss: LossSaved,
}

/// What the loss's forward leaves: the standard loss's log-softmax and shifted labels
/// (`u32::MAX` under another loss), or another loss's saved tensors.
struct LossSaved {
    log_softmax: u32,
    labels_shifted: u32,
    /// The chunked loss's saved tensors (`chunked_loss.rs`).
    chunked: Option<super::chunked_loss::Saved>,
    /// The fused loss's saved gradients (`fused_ce.rs`).
    fused: Option<super::fused_ce::Saved>,
    /// `LinearCrossEntropyLoss`'s saved tensors (`linear_ce.rs`).
    linear: Option<super::linear_ce::Saved>,
}

fn ckpt(inp: &TrainInputs) -> bool {
    inp.checkpointing == Checkpointing::Full
}

/// Selective checkpointing: each block's attention core checkpointed (`tape/selective.rs`).
fn selective(inp: &TrainInputs) -> bool {
    inp.checkpointing == Checkpointing::Selective
}

/// The embeddings stage: the text embeddings (a VLM's then its tower, projector and merge,
/// `tower.rs`), eager attention's masks and what the stage keeps besides its output:
/// (the first block's input, the masks, the stage's other kept bytes, the tower).
fn embeddings<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
) -> (u32, u32, u32, Option<super::tower::TowerFwd>) {
    let plan = inp.plan;
    let e = &plan.embedding;
    let mut embedding_out = s.alloc(inp.hidden);
    // A VLM's text embeddings, then its tower, projector and merge (`tower.rs`).
    let image = inp.events.tower.as_ref().map(|t| {
        let extra = s.alloc(e.kept.saturating_sub(inp.hidden + t.walk_kept));
        let top = s.alloc(t.embedding_transient);
        s.free(top);
        let (f, merged) = super::tower::forward(s, t, embedding_out, inp.hidden);
        embedding_out = merged;
        (f, extra)
    });
    // Eager attention's masks (`activations::eager_masks`), before the rotary cos/sin.
    let pattern = s.alloc(plan.masks.pattern * u64::from(plan.masks.bytes > 0));
    let mask = s.alloc(plan.masks.bytes);
    s.free(pattern);
    let (tower, embedding_extra) = match image {
        Some((f, extra)) => (Some(f), extra),
        None => {
            let extra = s.alloc(e.kept.saturating_sub(inp.hidden));
            let t = s.alloc(e.peak.saturating_sub(e.kept));
            s.free(t);
            (None, extra)
        }
    };
    (embedding_out, mask, embedding_extra, tower)
}

/// Embeddings, blocks, head and loss; leaving autocast frees the cached copies nothing saved.
/// Under FSDP the root is gathered first, each layer around its forward, and the last
/// all-gather output released when the root's forward returns.
fn forward<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live) -> Fwd {
    let plan = inp.plan;
    if let Some(f) = inp.fsdp {
        fsdp_pre(s, inp, live, f.root(), true);
    }
    let (embedding_out, mask, embedding_extra, tower) = embeddings(s, inp);
    let mut input = embedding_out;
    let mut blocks = Vec::with_capacity(inp.events.layer_block.len());
    let mut cached = Vec::new();
    for (i, &bi) in inp.events.layer_block.iter().enumerate() {
        let Some(b) = inp.events.blocks.get(bi as usize) else {
            continue;
        };
        fsdp_pre(s, inp, live, i, true);
        let ids = reserve_block(s, b, input);
        if ckpt(inp) {
            // A checkpointed block runs without saving (its input kept by the checkpoint);
            // autocast's cache holds its weight copies until the region exits.
            let held = super::ctx_held::first_forward(s, b, ids, !inp.reentrant);
            live.graph_held.extend(held);
            cached.extend(b.copies.iter().map(|&c| ids.id(b, c)));
        } else {
            run_block(s, b, b.forward_under(selective(inp)), ids, false);
        }
        fsdp_post_forward(s, inp, live, i);
        input = ids.output(b);
        blocks.push(ids);
    }
    if !plan.masks_held_to_backward(inp.checkpointing) {
        s.free(mask);
    }
    let head = &plan.head;
    // The chunked output under autocast casts the head's input chunk by chunk.
    let chunk_casts = inp
        .chunked_output
        .as_ref()
        .map_or(0, |c| crate::estimate::overhead::round_size(c.casts()));
    let head_kept = s.alloc(head.kept.saturating_sub(chunk_casts));
    if inp.fused_ce.is_none() {
        // The head's peak counts the logits made next.
        let t = s.alloc(head.peak.saturating_sub(head.kept + inp.loss.logits));
        s.free(t);
    }
    // The chunked output under autocast makes the weight's copy at its first chunk.
    let chunk_copy = inp.chunked_output.as_ref().map_or(0, |c| c.weight_copy);
    let head_copy = s.alloc(head.weight_copies.saturating_sub(chunk_copy));
    let loss = loss_forward(s, inp, live);
    for c in cached.iter().chain(tower.iter().flat_map(|t| &t.cached)) {
        s.free(*c);
    }
    super::fsdp::release_held(s, &mut live.fsdp);
    Fwd {
        embedding_out,
        embedding_extra,
        tower,
        mask,
        blocks,
        head_kept,
        head_copy,
        last_hidden: input,
        loss,
    }
}

/// The loss's forward, whichever the job's.
fn loss_forward<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live) -> LossSaved {
    let (chunked, fused) = match (&inp.chunked_output, &inp.fused_ce) {
        (Some(c), _) => (Some(super::chunked_loss::forward(s, c)), None),
        (_, Some(c)) => (None, Some(super::fused_ce::forward(s, c))),
        _ => (None, None),
    };
    // The model's output (the final norm's, unsaved), held until the recipe's `del outputs`.
    let linear = inp.linear_ce.as_ref().map(|c| {
        let output = s.alloc(c.hidden_rows(c.tokens));
        super::linear_ce::forward(s, c, output)
    });
    let (log_softmax, labels_shifted) = if chunked.is_some() || fused.is_some() || linear.is_some()
    {
        (u32::MAX, u32::MAX)
    } else {
        standard_loss_forward(s, &inp.loss, &mut live.fsdp)
    };
    LossSaved {
        log_softmax,
        labels_shifted,
        chunked,
        fused,
        linear,
    }
}

/// The standard loss's forward (`LossSizes`): the logits, their fp32 upcast, the padded and
/// shifted labels and the log-softmax; returns the log-softmax and the shifted labels, which
/// backward reads. The model's outputs are dropped before backward (HF Trainer, run_one.py):
/// nothing saved the logits (log_softmax saves its output). The model's forward returns before
/// that: under FSDP the root's post-forward releases the last all-gather output first (as the
/// CPU record of `scripts/measure_fsdp_cpu.py` orders them).
fn standard_loss_forward<S: Sink>(
    s: &mut S,
    l: &LossSizes,
    fsdp: &mut super::fsdp::Live,
) -> (u32, u32) {
    let logits = s.alloc(l.logits);
    let upcast = s.alloc(l.upcast);
    let padded = s.alloc(l.labels_padded);
    let labels_shifted = s.alloc(l.labels_shifted);
    let log_softmax = s.alloc(l.log_softmax);
    s.free(upcast);
    s.free(padded);
    super::fsdp::release_held(s, fsdp);
    s.free(logits);
    (log_softmax, labels_shifted)
}

/// The loss, the head, the blocks newest first, the embeddings.
fn backward<S: Sink>(s: &mut S, inp: &TrainInputs, fwd: &Fwd, live: &mut Live) {
    // FSDP: the root's pre-backward (the loss's hook, the backward's first) prefetches the
    // last layer.
    if let Some(f) = inp.fsdp.filter(|f| f.layers() > 0) {
        super::fsdp::unshard(s, f, &mut live.fsdp, f.layers() - 1);
    }
    let mut grad = match (&inp.chunked_output, &fwd.loss.chunked, fwd.loss.fused) {
        (Some(c), Some(saved), _) => super::chunked_loss::backward(s, inp, c, saved, |s, which| {
            chunk_head_grad(s, inp, live, which)
        }),
        (_, _, Some(saved)) => fused_backward(s, inp, live, saved),
        _ => match (&inp.linear_ce, &fwd.loss.linear) {
            (Some(c), Some(saved)) => {
                super::linear_ce::backward(s, c, saved, |s, w| chunk_head_grad(s, inp, live, w))
            }
            _ => loss_and_head_backward(s, inp, fwd, live),
        },
    };
    zero_side_hooks(s, inp, live, false);
    s.free(fwd.head_copy);
    s.free(fwd.head_kept);
    s.free(fwd.last_hidden);
    blocks_backward(s, inp, fwd, live, &mut grad);
    s.free(fwd.mask);
    if let (Some(t), Some(f)) = (&inp.events.tower, &fwd.tower) {
        grad = tower_backward(s, inp, live, (t, f), grad);
    }
    // The embedding stage's other kept tensors (the rotary cos/sin the blocks' multiplies
    // saved) went with the first block's backward, the last reader.
    s.free(fwd.embedding_extra);
    let incoming = if inp.input_grad_kept { u32::MAX } else { grad };
    embedding_grads(s, inp, live, incoming);
    zero_side_hooks(s, inp, live, true);
    s.free(fwd.embedding_out);
    for h in std::mem::take(&mut live.graph_held) {
        s.free(h);
    }
    if inp.input_grad_kept {
        s.free(grad);
    }
    zero_epilogue(s, inp, live, live.boundary);
}

/// A VLM's image branch backward (`tower.rs`), between the decoder's and the text
/// embeddings': the merge's two gradients, the projector's (its weight gradients), the
/// tower's blocks and then its other weights' gradients (norms, embeddings: the ones no
/// block's tape made), each part newest tensor first. Returns the text embeddings' gradient.
fn tower_backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    (t, f): (&super::plan_events::TowerEvents, &super::tower::TowerFwd),
    grad: u32,
) -> u32 {
    let (text, image) = super::tower::merge_backward(s, t, f, grad, inp.hidden);
    if image == u32::MAX {
        return text;
    }
    let out = super::tower::projector_backward(s, t, f, image);
    part_grads(s, inp, live, Part::Projector, false);
    if t.trains {
        let accumulating = live.accumulating;
        super::tower::blocks_backward(s, t, f, out, accumulating, &mut live.tape_grads);
        part_grads(s, inp, live, Part::Vision, !t.block.weight_grads.is_empty());
    }
    text
}

/// The gradients of `part`'s parameters, last first, but those its blocks' tapes made
/// (`taped`: the blocks record their linears' weight gradients).
fn part_grads<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live, part: Part, taped: bool) {
    for (k, p) in inp.params.iter().enumerate().rev() {
        if p.part == part && !(taped && p.tape_grad) {
            grad_of(s, live, k, p.grad);
        }
    }
}

/// The blocks' backward, newest first; `grad` the gradient flowing down (the block input's,
/// at the end).
fn blocks_backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    fwd: &Fwd,
    live: &mut Live,
    grad: &mut u32,
) {
    for (i, &bi) in inp.events.layer_block.iter().enumerate().rev() {
        let (Some(b), Some(&ids)) = (inp.events.blocks.get(bi as usize), fwd.blocks.get(i)) else {
            continue;
        };
        let ids = BlockIds {
            output_grad: *grad,
            ..ids
        };
        // FSDP's pre-backward: this layer copied out, the layer before prefetched.
        fsdp_pre(s, inp, live, i, false);
        if let (Some(f), Some(before)) = (inp.fsdp, i.checked_sub(1)) {
            super::fsdp::unshard(s, f, &mut live.fsdp, before);
        }
        let ids = if ckpt(inp) {
            let ids = super::ctx_held::recompute_ids(s, b, ids, !inp.reentrant);
            // Recompute (saving this time), then drop the recomputed output.
            run_block(s, b, &b.forward, ids, true);
            s.free(ids.output(b));
            ids
        } else {
            ids
        };
        let sel = selective(inp);
        // FSDP takes every unsharded gradient at the post-backward: a later micro-batch's
        // backward makes them afresh, as the first's does; ZeRO-2's hooks take each at once.
        let zero2 = inp.zero.is_some_and(|z| z.stage >= 2);
        if (live.accumulating && inp.fsdp.is_none()) || zero2 {
            run_block(s, b, b.backward_under(sel, true), ids, false);
        } else {
            run_block(s, b, b.backward_under(sel, false), ids, false);
            let tape: Vec<u32> = b.weight_grads.iter().map(|&w| ids.id(b, w)).collect();
            if inp.zero.is_some() {
                zero_keep_tape_grads(inp, live, i, &tape);
            } else if inp.fsdp.is_none() {
                live.tape_grads.extend(tape);
            }
        }
        if ckpt(inp) {
            super::ctx_held::release_recomputed(s, b, ids);
        } else {
            live.graph_held.extend(b.held.iter().map(|&h| ids.id(b, h)));
        }
        layer_grads(s, inp, live, i as u32, !b.weight_grads.is_empty());
        zero_layer_hooks(s, inp, live, i);
        s.free(*grad);
        if ckpt(inp) {
            s.free(ids.input);
        }
        if inp.fsdp.is_some() {
            let tape: Vec<u32> = b.weight_grads.iter().map(|&w| ids.id(b, w)).collect();
            fsdp_layer_post_backward(s, inp, live, i, &tape);
        }
        *grad = ids.input_grad(b);
    }
}

/// Gradients of the final norm and head, newest module first (`AccumulateGrad` keeps each as
/// `.grad`); a tied head's weight gradient is the embedding's first contribution, held by
/// autograd's input buffer until the embedding's own is added to it.
fn output_side_grads<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live, made: Option<u32>) {
    let first = first_embedding(inp);
    // Under autocast the head's weight gradient is made in 16 bit (the copy's size) and cast
    // to the fp32 parameter (the SmolLM2 trace: 54 MiB bf16, then 108 MiB fp32); `made`: that
    // 16-bit gradient exists already (the chunked output's summed buffer).
    let cast = made.unwrap_or_else(|| s.alloc(inp.plan.head.weight_copies));
    for (k, p) in inp.params.iter().enumerate().rev() {
        if p.text_outside() && !p.embedding {
            grad_of(s, live, k, p.grad);
        }
    }
    if inp.tied {
        if let Some(k) = first {
            live.tied_head = s.alloc(inp.params[k].grad);
        }
    }
    s.free(cast);
}

/// The first embedding tensor (the token embedding, first in module order).
fn first_embedding(inp: &TrainInputs) -> Option<usize> {
    inp.params
        .iter()
        .position(|p| p.embedding && p.text_outside())
}

/// Parameter `k`'s gradient: kept as its `.grad` when it has none yet, else added into it
/// and freed (`AccumulateGrad`, `accumulate_grad.h`: `variable_grad += new_grad`).
fn grad_of<S: Sink>(s: &mut S, live: &mut Live, k: usize, bytes: u64) {
    if bytes == 0 {
        return;
    }
    if live.grads[k] == u32::MAX {
        live.grads[k] = s.alloc(bytes);
    } else {
        let new = s.alloc(bytes);
        s.free(new);
    }
}

/// A block's weight gradients the tape did not make (norms; every one when the block's tape
/// records none), last parameter first.
fn layer_grads<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live, layer: u32, taped: bool) {
    let (l, n) = (layer as usize, live.by_layer.len());
    let from = live.start.get(l).map_or(n, |&x| x as usize);
    let to = live.start.get(l + 1).map_or(n, |&x| x as usize);
    for j in (from..to).rev() {
        let k = live.by_layer[j] as usize;
        let p = &inp.params[k];
        if !(taped && p.tape_grad) {
            grad_of(s, live, k, p.grad);
        }
    }
}

/// The embeddings' gradients (`embedding_dense_backward`). A tied embedding's is summed with
/// the head's contribution by autograd's input buffer (`InputBuffer::accumulate`,
/// `torch/csrc/autograd/input_buffer.cpp`): in place when the buffered contribution is a
/// plain tensor it may steal — under autocast it is `ToCopyBackward`'s fresh fp32 copy (the
/// H200 SmolLM2 trace: one 108 MiB gradient, added and freed) — else into a new tensor, both
/// parts released and the sum kept (the fp32 GPT-2 trace, whose contribution is the
/// transposed matmul output: +147 MiB, +147 MiB, −147, −147).
///
/// `incoming` (the embeddings' output gradient; `u32::MAX`: kept by PEFT's hook) is freed
/// when the first embedding's node returns, before the sum: the engine's `call_function`
/// (`torch/csrc/autograd/engine.cpp`, torch 2.x) owns a node's input gradients in its local
/// `inputs`, gone as it returns, and `evaluate_function` adds the node's outputs into the
/// next input buffer only then. Measured on the CPU (a tied two-layer Llama in bf16, torch
/// 2.15): the `[b, s, h]` input gradient is destroyed between `embedding_dense_backward`'s
/// `zeros` and the sum's `add`.
fn embedding_grads<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live, incoming: u32) {
    let first = first_embedding(inp);
    if first.is_none() {
        s.free(incoming);
    }
    for (k, p) in inp.params.iter().enumerate().rev() {
        if !(p.embedding && p.text_outside()) {
            continue;
        }
        if inp.tied && Some(k) == first && live.tied_head != u32::MAX {
            let own = s.alloc(p.grad);
            s.free(incoming);
            let sum = if inp.events.autocast {
                s.free(own);
                live.tied_head
            } else {
                let sum = s.alloc(p.grad);
                s.free(own);
                s.free(live.tied_head);
                sum
            };
            if live.grads[k] == u32::MAX {
                live.grads[k] = sum;
            } else {
                s.free(sum);
            }
            live.tied_head = u32::MAX;
        } else {
            grad_of(s, live, k, p.grad);
            if Some(k) == first {
                s.free(incoming);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The grouped indices list each layer's parameters as the filter over all of them
        /// does (module order), for parameters in any order, outside every layer, or in a
        /// layer past the blocks (left out).
        #[test]
        fn params_by_layer_is_the_filter(
            layers in proptest::collection::vec(proptest::option::of(0u32..12), 0..80),
            blocks in 0usize..10,
        ) {
            let params: Vec<Param> = layers
                .iter()
                .map(|&layer| Param { layer, ..Param::default() })
                .collect();
            let (by_layer, start) = params_by_layer(&params, blocks);
            prop_assert_eq!(start.len(), blocks + 1);
            for l in 0..blocks {
                let got = &by_layer[start[l] as usize..start[l + 1] as usize];
                let want: Vec<u32> = (0..params.len() as u32)
                    .filter(|&k| params[k as usize].layer == Some(l as u32))
                    .collect();
                prop_assert_eq!(got, &want[..]);
            }
            prop_assert_eq!(by_layer.len() as u32, start[blocks]);
        }
    }
}
