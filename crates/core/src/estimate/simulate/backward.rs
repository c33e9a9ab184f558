//! The backward in the walk: the loss gradient, the head, the blocks newest first, the
//! embeddings; how each part's gradient is charged, and FSDP2's and ZeRO's buffers in it.

use super::walk::{layer_label, Fsdp, Walk};
use super::zero_marks::{self, Zero};
use crate::estimate::activations::ForwardPlan;
use crate::estimate::states::StateBytes;
use crate::estimate::techniques;
use crate::job::ResolvedJob;
use crate::report::Category;

/// FSDP's root post-backward, the backward's final callback (`alloc_events/fsdp.rs`): the root
/// resharded, layer 0's reduce-scatter input released, the root's made while its unsharded
/// gradients live; then those gradients and that input go (its sharded gradients are the
/// walk's full gradients after it). A deferred first layer (LoRA's frozen embeddings:
/// `first_deferred`) is resharded after the root and its reduce-scatter input made then.
fn root_post_backward(
    w: &mut Walk,
    f: &crate::estimate::alloc_events::fsdp::WalkBuffers,
    rs_held: u64,
) {
    w.sub(Category::Temporaries, f.root + rs_held);
    w.mark("backward", "root reduce-scatter".into(), f.root_rs);
    w.sub(Category::Temporaries, f.head_grads + f.embedding_grads);
    if f.first_deferred {
        w.sub(Category::Temporaries, f.layer(Some(0)));
        let rs = f.layer_rs.first().copied().unwrap_or(0);
        w.mark("backward", "layer 0 reduce-scatter".into(), rs);
    }
}

/// The backward: the loss gradient first (three fp32 b·s·V tensors live together), the head,
/// the blocks in reverse (a checkpointed block first recomputes its forward), the embeddings;
/// gradients grow to their full size. Accumulating over micro-batches (`carried_grads` > 0),
/// a new gradient is added in place into the `.grad` kept from the earlier ones
/// (`AccumulateGrad`, torch/csrc/autograd/functions/accumulate_grad.h: `variable_grad +=
/// new_grad` outside grad mode) and freed: a transient, not a new state.
pub(super) fn walk_backward(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    carried_grads: u64,
    (fsdp, zero): (Fsdp, Zero),
) {
    use Category::*;
    let hooked = techniques::in_backward(job);
    let hs = st.hook_step;
    w.mark(
        "backward",
        "loss (log-softmax backward)".into(),
        plan.loss.backward_transient,
    );
    w.sub(Activations, plan.loss.saved);
    // ZeRO-2: each gradient goes into the bucket as it is made (`zero_marks.rs`).
    let zero2 = zero.filter(|z| z.partitions_gradients());
    let grads = GradSplit {
        hooked,
        accumulating: carried_grads > 0 || zero2.is_some(),
        reduced: fsdp.is_some(),
    };
    let split = |g: u64, hook: u64| grads.of(g, hook);
    let (head_kept, head_new) = match zero2 {
        Some(z) => (z.tied_grads, z.head_grads),
        None if hooked => (hs.tied_grad, hs.head),
        None => split(st.head_grad, 0),
    };
    // FSDP: the root's gradients stay unsharded (compute dtype) until its post-backward.
    let head_kept = if fsdp.is_some() { 0 } else { head_kept };
    w.add(Temporaries, fsdp.map_or(0, |f| f.head_grads));
    w.add(Gradients, head_kept);
    w.mark(
        "backward",
        "head".into(),
        plan.loss.dlogits + plan.logits_grad_input + head_new,
    );
    w.sub(Activations, plan.head.kept + plan.head.weight_copies);
    zero_marks::head(w, zero);
    let rs_held = walk_layers_backward(w, st, plan, job, grads, (fsdp, zero));
    if plan.masks_held_to_backward(job.checkpointing) {
        w.sub(Activations, plan.masks.bytes);
    }
    // A VLM's image branch runs its backward before the text embeddings' (`alloc_events/
    // tower.rs`, `vision_events::backward_top`).
    if let Some(t) = plan.events.as_ref().and_then(|e| e.tower.as_ref()) {
        if t.backward_top > 0 {
            w.mark("backward", "vision tower".into(), t.backward_top);
        }
    }
    w.sub(Activations, plan.embedding.kept);
    let (e_kept, e_new) = match zero2 {
        Some(z) => (0, z.embedding_grads),
        None => split(st.embedding_grad, hs.embedding),
    };
    let e_kept = if fsdp.is_some() { 0 } else { e_kept };
    w.add(Temporaries, fsdp.map_or(0, |f| f.embedding_grads));
    w.add(Gradients, e_kept);
    // A tied parameter's step runs once its two contributions are summed (they are gone by
    // then): its scratch replaces them rather than joining them.
    let tied = match zero2 {
        Some(z) => 2 * z.tied_grads,
        None if hooked => st.embedding_backward_transient.max(hs.tied_scratch),
        None => st.embedding_backward_transient,
    };
    // PEFT's input-gradient hook: the first block's input gradient kept as `.grad` on the
    // embedding's output, and that leaf, both held by the graph to the backward's end.
    let input_grad = if techniques::input_grads_hook(job, st.embedding_grad > 0) {
        2 * plan.hidden
    } else {
        0
    };
    let tied = tied.max(in_embedding_backward(st, plan, input_grad));
    w.mark("backward", "embeddings".into(), tied + e_new + input_grad);
    zero_marks::embedding(w, zero);
    if let Some(f) = fsdp {
        root_post_backward(w, f, rs_held);
    }
    if hooked {
        // The tied parameter's hook ran: its gradient is freed; nothing else is resident.
        w.sub(Gradients, hs.tied_grad);
        w.sub(Activations, plan.inputs);
        return;
    }
    // Gradients reached their full size; any rounding difference goes to the last layer.
    let g_now = w.live.c.gradients;
    let g_full = st.resident.gradients;
    if g_full > g_now && zero2.is_none() {
        w.add(Gradients, g_full - g_now);
    }
    zero_marks::epilogue(w, zero);
    w.sub(Activations, plan.inputs);
}

/// The embeddings' fullest moment inside their own backward node: its input gradient (the
/// embeddings' output gradient, `[b, s, h]`) beside the weight gradient
/// `embedding_dense_backward` makes (the tied one's contribution, half the tied transient;
/// an untied one's is counted as a gradient already). The engine's `call_function`
/// (`torch/csrc/autograd/engine.cpp`, torch 2.x) holds a node's input gradients until the
/// node returns, and only then is a tied weight's contribution summed with the head's (the
/// transient's other half): the sum's moment no longer holds the input gradient. None when
/// the embeddings train nothing (no node runs), or PEFT's hook keeps it (`input_grad`
/// counts it).
fn in_embedding_backward(st: &StateBytes, plan: &ForwardPlan, input_grad: u64) -> u64 {
    let trains = st.embedding_grad > 0 || st.embedding_backward_transient > 0;
    if !trains || input_grad > 0 {
        return 0;
    }
    st.embedding_backward_transient / 2 + plan.hidden
}

/// How a part's gradient is charged: (kept after its backward, made and gone within it). A
/// gradient stays; one accumulated into a carried `.grad` is a transient; one stepped by its
/// hook is a transient of one parameter at a time. Under FSDP2 (`reduced`) the part's sharded
/// gradient is its reduce-scatter output: kept from the first micro-batch, and a later one's
/// is added into it after the unit's unsharded gradients are freed
/// (`alloc_events/fsdp.rs`), outside the block's fullest moment.
#[derive(Debug, Clone, Copy)]
struct GradSplit {
    hooked: bool,
    accumulating: bool,
    reduced: bool,
}

impl GradSplit {
    fn of(self, g: u64, hook: u64) -> (u64, u64) {
        match (self.hooked, self.accumulating) {
            (true, _) => (0, hook),
            (false, true) if self.reduced => (0, 0),
            (false, true) => (0, g),
            (false, false) => (g, 0),
        }
    }

    /// The backward adds its weight gradients into `.grad`s it keeps (FSDP2 takes the
    /// unsharded ones at each post-backward: its blocks' backward is the first's).
    fn into_kept_grads(self) -> bool {
        self.accumulating && !self.hooked && !self.reduced
    }
}

/// The blocks' backward, newest first (a checkpointed block first recomputes its forward).
/// Under FSDP2 each layer's pre-backward copies it out and prefetches the one before, its
/// post-backward reshards it and keeps its reduce-scatter input in place of the last one
/// (returned: the input still held).
fn walk_layers_backward(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    grads: GradSplit,
    (fsdp, zero): (Fsdp, Zero),
) -> u64 {
    use Category::*;
    let hs = st.hook_step;
    let mut rs_held = 0;
    for (i, l) in plan.layers.iter().enumerate().rev() {
        // FSDP's pre-backward: the prefetched layer copied out, the one before prefetched
        // (FULL_SHARD; under SHARD_GRAD_OP every layer is gathered already).
        w.add(Temporaries, fsdp.map_or(0, |f| f.prefetched_before(i)));
        let recompute = l.recomputed;
        let (g_kept, g_new) = grads.of(st.layer_grads.get(i).copied().unwrap_or(0), hs.layer);
        let saved = l.kept + l.weight_copies;
        let back = techniques::brought_back(job, saved) - techniques::kept_on_gpu(job, saved);
        let previous = plan
            .layers
            .get(i + 1)
            .map_or(0, |p| p.kept + p.weight_copies);
        let held = techniques::held_from_previous(job, previous);
        w.add(Activations, recompute + back);
        // The block's fullest moment: what its backward has made (with the weight gradients
        // in flight when they are accumulated into kept `.grad`s, read off that sequence)
        // and what it has released by then of its saved tensors.
        let (made, released) = match (grads.into_kept_grads(), l.backward_accumulate) {
            (true, Some((made, released))) => (made, released),
            _ => (l.backward_transient + g_new, l.backward_released),
        };
        let gone = released.min(techniques::brought_back(job, saved) + recompute);
        w.sub(Activations, gone);
        w.mark("backward", layer_label(i), made + held);
        w.sub(
            Activations,
            techniques::brought_back(job, saved) + recompute - gone,
        );
        w.add(Gradients, g_kept);
        zero_marks::layer(w, zero, i);
        if let Some(f) = fsdp.filter(|f| !(i == 0 && f.first_deferred)) {
            // Post-backward: resharded, the last reduce-scatter input released, this one kept.
            w.sub(Temporaries, f.layer(Some(i)) + rs_held);
            rs_held = f.layer_rs.get(i).copied().unwrap_or(0);
            w.add(Temporaries, rs_held);
        }
    }
    rs_held
}
