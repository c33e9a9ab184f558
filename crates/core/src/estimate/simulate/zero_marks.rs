//! DeepSpeed ZeRO-1/2's buffers in the walk (`alloc_events/zero_walk.rs`, read off the hooks
//! the stream runs, `alloc_events/zero.rs`), where the stream writes the job: the IPG bucket
//! from the head's hook to the epilogue (a temporary, as the heuristic's reduce bucket was);
//! under stage 2 each hook group's reduce as a mark after its part of the backward and the
//! partition's gradients it leaves; the epilogue (stage 1: every gradient reduced through the
//! bucket); the partition's gradients to the step.

use super::walk::Walk;
use crate::report::Category;

/// ZeRO's figures, where the stream writes the job as ZeRO-1/2.
pub(super) type Zero<'a> = Option<&'a crate::estimate::alloc_events::zero_walk::WalkBuffers>;

/// ZeRO's gradient bytes held from now on: `held` in place of the walk's gradients.
fn hold(w: &mut Walk, held: u64) {
    let now = w.live.c.gradients;
    w.sub(Category::Gradients, now);
    w.add(Category::Gradients, held);
}

/// A stage-2 hook group: its reduce marked where it adds anything, then what it leaves held
/// beside `kept` (a tied matrix's head contribution, held to the embeddings' backward).
fn group(
    w: &mut Walk,
    label: &'static str,
    g: crate::estimate::alloc_events::zero_walk::Group,
    kept: u64,
) {
    if g.transient > 0 {
        w.mark("backward", label.into(), g.transient);
    }
    hold(w, g.held + kept);
}

/// Whether the bucket is carried in from an earlier micro-batch: ZeRO-1 accumulating
/// (`setup_buckets` runs once per `ready_for_gradients`, which only the boundary's epilogue
/// clears).
fn bucket_carried(z: &crate::estimate::alloc_events::zero_walk::WalkBuffers) -> bool {
    !z.partitions_gradients() && z.carried > 0
}

/// At the step's start: the bucket where it is carried in ([`bucket_carried`]).
pub(super) fn carried_bucket(w: &mut Walk, zero: Zero) {
    if let Some(z) = zero.filter(|z| bucket_carried(z)) {
        w.add(Category::Temporaries, z.ipg);
    }
}

/// After the head's backward: the bucket (the first hook's `setup_buckets`) unless carried
/// in or a layer's hook is the first (`bucket_layer`), then under stage 2 the output side's hooks.
pub(super) fn head(w: &mut Walk, zero: Zero) {
    let Some(z) = zero else {
        return;
    };
    if !bucket_carried(z) && z.bucket_layer.is_none() {
        w.add(Category::Temporaries, z.ipg);
    }
    if z.partitions_gradients() {
        group(w, "ZeRO reduce (head)", z.head, z.tied_grads);
    }
}

/// After layer `i`'s backward: the bucket where this layer's hooks are the first
/// (`bucket_layer`: the output side frozen), then under stage 2 its hooks.
pub(super) fn layer(w: &mut Walk, zero: Zero, i: usize) {
    let Some(z) = zero else {
        return;
    };
    if !bucket_carried(z) && z.bucket_layer == Some(i) {
        w.add(Category::Temporaries, z.ipg);
    }
    if z.partitions_gradients() {
        group(w, "ZeRO reduce", z.layer(i), z.tied_grads);
    }
}

/// After the embeddings' backward under stage 2: their hooks.
pub(super) fn embedding(w: &mut Walk, zero: Zero) {
    if let Some(z) = zero.filter(|z| z.partitions_gradients()) {
        group(w, "ZeRO reduce (embeddings)", z.embedding, 0);
    }
}

/// The epilogue after the backward: stage 1 reduces every gradient (the walk's, whole) through
/// the bucket; the bucket goes, the partition's gradients stay to the step.
pub(super) fn epilogue(w: &mut Walk, zero: Zero) {
    let Some(z) = zero else {
        return;
    };
    w.mark("backward", "ZeRO epilogue".into(), z.epilogue.transient);
    hold(w, z.epilogue.held);
    w.sub(Category::Temporaries, z.ipg);
}
