//! Tensors a block's ctx attributes hold (`BlockEvents::held`: LLM.int8's `MatMul8bitLt`
//! inputs in `ctx.tensors`) under full checkpointing, by the checkpoint's kind (torch 2.15
//! `utils/checkpoint.py`; checked on the CPU with a custom Function holding its input as a ctx
//! attribute, `scripts/check_ctx_lifetime.py` `through_the_step`):
//!
//! - non-reentrant (`checkpoint_reentrant: false`): the first forward runs with grad and swaps
//!   only saved tensors for handles, so what its ctx attributes hold stays with the graph until
//!   the backward is done (`Live::graph_held`);
//! - reentrant: the first forward runs under `no_grad` and holds nothing;
//! - either way the recompute's own held tensors are gone by the end of its block's backward
//!   (the recomputed graph is discarded), so they are freed there.

use super::{run_block, BlockIds, Sink};
use crate::estimate::tape::{BlockEvents, Ev};

/// A checkpointed block's first forward: nothing saved (`forward_no_save`), and, when `holds`
/// (non-reentrant), its held slots kept; their ids are returned for the graph's release.
pub(super) fn first_forward<S: Sink>(
    s: &mut S,
    b: &BlockEvents,
    ids: BlockIds,
    holds: bool,
) -> Vec<u32> {
    if !holds || b.held.is_empty() {
        run_block(s, b, &b.forward_no_save, ids, true);
        return Vec::new();
    }
    let evs: Vec<Ev> = b
        .forward_no_save
        .iter()
        .copied()
        .filter(|e| !(e.is_free() && b.held.contains(&e.slot())))
        .collect();
    run_block(s, b, &evs, ids, true);
    b.held.iter().map(|&h| ids.id(b, h)).collect()
}

/// The ids a checkpointed block recomputes into: fresh ones when its first forward's held
/// slots are still live (`holds`), so that the recompute's own tensors do not take their ids.
pub(super) fn recompute_ids<S: Sink>(
    s: &mut S,
    b: &BlockEvents,
    ids: BlockIds,
    holds: bool,
) -> BlockIds {
    if !holds || b.held.is_empty() {
        return ids;
    }
    BlockIds {
        base: s.reserve(2 * b.entries as usize),
        ..ids
    }
}

/// After a checkpointed block's backward: the recompute's held tensors freed.
pub(super) fn release_recomputed<S: Sink>(s: &mut S, b: &BlockEvents, ids: BlockIds) {
    for &h in &b.held {
        s.free(ids.id(b, h));
    }
}
