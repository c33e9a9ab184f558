//! A vision tower's events in a training step (`plan_events::TowerEvents`, made by
//! `estimate/vision_events.rs`), in the order transformers 5.24's `Gemma3Model.forward` runs
//! them between the text embeddings and the decoder, and autograd runs their backward: the
//! image branch's nodes are newer than the text embedding's (the tower runs after
//! `get_input_embeddings()`), so after `MaskedScatterBackward` the engine's ready queue
//! (highest sequence number first, `torch/csrc/autograd/engine.cpp`) runs the projector and the
//! tower to their end before the text embeddings' backward.

use super::plan_events::TowerEvents;
use super::{reserve_block, run_block, BlockIds, Sink};

/// What the tower's forward leaves for its backward.
#[derive(Debug, Clone, Default)]
pub(super) struct TowerFwd {
    inputs_kept: u32,
    blocks: Vec<BlockIds>,
    /// The last block's output (the projector's input), kept while the tower trains.
    last: u32,
    projector_kept: u32,
    /// `masked_scatter`'s saved placeholder mask.
    mask: u32,
    /// Autocast's cached weight copies of checkpointed blocks, freed when the autocast region
    /// exits (after the loss), as the text blocks' are.
    pub(super) cached: Vec<u32>,
}

/// The tower's forward, after the text embeddings (`embedding_out`) exist: its inputs (the
/// pixels' 16-bit copy and the convolution's weight copy, kept when the tower trains), the
/// embeddings' output, each block (checkpointed: its first forward saves nothing), the
/// projector, then the merge. `masked_scatter` (`aten/src/ATen/native/TensorAdvancedIndexing.cpp`
/// `masked_scatter`: `expand_outplace`, then `clone()` and `masked_scatter_`) makes the merged
/// embeddings, and CUDA's `masked_scatter__cuda` (`native/cuda/IndexKernel.cpp`) an int64
/// `maskPrefixSum` of the embeddings' shape for the kernel, freed as it returns; rebinding
/// `inputs_embeds` frees the text embeddings and the image features. Returns the merged
/// embeddings (the first decoder layer's input).
pub(super) fn forward<S: Sink>(
    s: &mut S,
    t: &TowerEvents,
    embedding_out: u32,
    hidden: u64,
) -> (TowerFwd, u32) {
    let b = &t.block;
    let inputs_kept = s.alloc(t.inputs_kept);
    let transient = s.alloc(t.inputs_transient);
    let mut input = s.alloc(t.embeddings);
    s.free(transient);
    let mut blocks = Vec::with_capacity(t.layers as usize);
    let mut cached = Vec::new();
    for _ in 0..t.layers {
        let ids = reserve_block(s, b, input);
        if t.checkpointed {
            // The tower has no ctx-held tensors (no bitsandbytes linears): nothing outlives it
            // but autocast's cached weight copies, freed when the region exits.
            run_block(s, b, &b.forward_no_save, ids, true);
            cached.extend(b.copies.iter().map(|&c| ids.id(b, c)));
        } else {
            run_block(s, b, &b.forward, ids, false);
        }
        if !t.trains {
            // A frozen weight's cast is not cached (`autocast_mode.cpp` `cached_cast` caches
            // only leaves that require grad) and nothing saves it under `no_grad`: it goes
            // once its matmul has run (here: with its block).
            for &c in &b.copies {
                s.free(ids.id(b, c));
            }
        }
        input = ids.output(b);
        blocks.push(ids);
    }
    let projector_kept = s.alloc(t.projector_kept);
    let top = s.alloc(t.projector_transient);
    s.free(top);
    let features = s.alloc(t.features);
    if !t.trains {
        s.free(input);
    }
    let mask = s.alloc(t.mask);
    let merged = s.alloc(hidden);
    let prefix_sum = s.alloc(t.prefix_sum);
    s.free(prefix_sum);
    s.free(features);
    s.free(embedding_out);
    let fwd = TowerFwd {
        inputs_kept,
        blocks,
        last: input,
        projector_kept,
        mask,
        cached,
    };
    (fwd, merged)
}

/// `MaskedScatterBackward` (`tools/autograd/derivatives.yaml`: `self: grad.masked_fill(mask,
/// 0)`, `source: masked_scatter_backward(grad, mask, source.sizes())`, the second a
/// `masked_select` of the image rows): both gradients made, then the incoming one and the
/// saved mask released. Returns (the text embeddings' gradient, the image features' — `u32::MAX`
/// when nothing below the merge trains).
pub(super) fn merge_backward<S: Sink>(
    s: &mut S,
    t: &TowerEvents,
    fwd: &TowerFwd,
    grad: u32,
    hidden: u64,
) -> (u32, u32) {
    let text = s.alloc(hidden);
    let image = if t.projector_trains || t.trains {
        s.alloc(t.features)
    } else {
        u32::MAX
    };
    s.free(grad);
    s.free(fwd.mask);
    (text, image)
}

/// The projector's backward: its transient, the tower output's gradient when the tower
/// trains (returned), what it kept and the features' gradient released. The projector's
/// weight gradients are the caller's (made before the tower's blocks run).
pub(super) fn projector_backward<S: Sink>(
    s: &mut S,
    t: &TowerEvents,
    fwd: &TowerFwd,
    image_grad: u32,
) -> u32 {
    let top = s.alloc(t.projector_transient);
    s.free(top);
    let out = if t.trains {
        s.alloc(t.embeddings)
    } else {
        u32::MAX
    };
    s.free(image_grad);
    s.free(fwd.projector_kept);
    s.free(fwd.last);
    out
}

/// The tower's blocks' backward, newest first (a checkpointed block first replays its
/// forward, saving, and drops the replayed output), each block's weight gradients from its
/// tape (kept as `.grad` into `tape_grads`; added and freed when `accumulating`); then the
/// embeddings' input gradient and what the tower's inputs kept are released.
pub(super) fn blocks_backward<S: Sink>(
    s: &mut S,
    t: &TowerEvents,
    fwd: &TowerFwd,
    mut grad: u32,
    accumulating: bool,
    tape_grads: &mut Vec<u32>,
) {
    let b = &t.block;
    for &ids in fwd.blocks.iter().rev() {
        let ids = BlockIds {
            output_grad: grad,
            ..ids
        };
        if t.checkpointed {
            run_block(s, b, &b.forward, ids, true);
            s.free(ids.output(b));
        }
        run_block(s, b, b.backward_under(false, accumulating), ids, false);
        if !accumulating {
            tape_grads.extend(b.weight_grads.iter().map(|&w| ids.id(b, w)));
        }
        s.free(grad);
        if t.checkpointed {
            s.free(ids.input);
        }
        grad = ids.input_grad(b);
    }
    s.free(grad);
    s.free(fwd.inputs_kept);
}
