//! The forward in the walk: embeddings, each block, the head and the loss, with FSDP2's gathered
//! parameters and a prefill's cache made layer by layer.

use super::walk::{layer_label, Fsdp, Walk};
use crate::estimate::activations::ForwardPlan;
use crate::estimate::prefill_walk::PrefillLayer;
use crate::estimate::techniques;
use crate::job::{ResolvedJob, Task};
use crate::report::Category;

/// The forward: embeddings, each block, the head; in training also the loss, and leaving the
/// autocast region frees the cached weight copies nothing saved. Under FSDP2 the root's
/// parameters are gathered first (kept to the backward's end; its all-gather output held to
/// layer 0's copy-out), each layer's unsharded parameters and held all-gather output live
/// through its forward, and the last layer's output is held through the head and loss.
///
/// `prefill`: each layer's cache and its block's top with it (`prefill_walk.rs`), where the
/// prefill's cache is made layer by layer; empty otherwise.
pub(super) fn walk_forward(
    w: &mut Walk,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    (fsdp, prefill): (Fsdp, &[PrefillLayer]),
) {
    use Category::*;
    let train = job.task == Task::Train;
    let root = fsdp.map_or(0, |f| f.root);
    w.add(Temporaries, root);
    w.add(Activations, plan.embedding.kept);
    w.mark(
        "forward",
        "embeddings".into(),
        plan.embedding.peak.saturating_sub(plan.embedding.kept) + root,
    );
    if let Some(f) = fsdp.filter(|f| f.root > f.layer(Some(0))) {
        // Layer 0's all-gather output made while the root's is still held.
        w.mark(
            "forward",
            "all-gather layer 0".into(),
            f.root + f.layer(Some(0)),
        );
    }
    if plan.masks.bytes > 0 {
        w.add(Activations, plan.masks.bytes);
        w.mark("forward", "attention masks".into(), plan.masks.pattern);
    }
    for (i, l) in plan.layers.iter().enumerate() {
        let mut transient = l.forward_peak.saturating_sub(l.kept);
        if let Some(p) = prefill.get(i) {
            w.add(KvCache, p.cache);
            transient = p.top.saturating_sub(p.cache);
        }
        let kept = techniques::kept_on_gpu(job, l.kept + l.weight_copies);
        w.add(Activations, kept + l.cached_copies);
        let gathered = fsdp.map_or(0, |f| 2 * f.layer(Some(i)));
        w.mark("forward", layer_label(i), transient + gathered);
        w.add(Temporaries, fsdp.map_or(0, |f| f.kept_after_forward(i)));
        if i == 0 && !train && plan.first_input == 0 {
            // Under no_grad the embeddings stay bound to `inputs_embeds` in the model's
            // forward to its end (`modeling_llama.py` `LlamaModel.forward`), and the loop holds
            // each later layer's input (the layer before's output) until that layer returns:
            // from the second layer on, two hidden states live beside the block's own tensors.
            // Where the first input is a tensor of its own (`ForwardPlan::first_input`, kept
            // by the embedding stage), the rebinding frees it as layer 0's output of the same
            // size takes its place: nothing added.
            w.add(Activations, plan.hidden);
        }
    }
    if !plan.masks_held_to_backward(job.checkpointing) {
        w.sub(Activations, plan.masks.bytes);
    }
    // The last layer's all-gather output, held to the root's post-forward, then under
    // FULL_SHARD the same layer prefetched by the root's pre-backward.
    let last = plan.layers.len().checked_sub(1);
    let held = fsdp.map_or(0, |f| f.layer(last));
    w.add(Temporaries, held);
    let cached_copies: u64 = plan.layers.iter().map(|l| l.cached_copies).sum();
    if !train {
        // The hidden state between blocks, the head's working set and the last logits.
        w.mark(
            "forward",
            "final norm and head".into(),
            plan.head.peak + plan.logits,
        );
        return;
    }
    w.add(Activations, plan.head.kept + plan.head.weight_copies);
    w.mark("forward", "final norm and head".into(), plan.logits);
    w.add(Activations, plan.loss.saved);
    w.mark("forward", "loss".into(), plan.loss.forward_transient);
    if fsdp.is_some_and(|f| f.kept) {
        // SHARD_GRAD_OP: the held output goes at the root's post-forward, nothing prefetched.
        w.sub(Temporaries, held);
    }
    w.sub(Activations, cached_copies);
    // DPO: the reference's no-grad forward after the policy's (accelerate's autocast wraps
    // each model's forward, so the policy's cached weight copies are gone by then).
    if plan.reference_forward > 0 {
        w.mark(
            "forward",
            "reference model forward (no_grad)".into(),
            plan.reference_forward,
        );
    }
}
