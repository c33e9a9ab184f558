//! torchtune's `LinearCrossEntropyLoss` as the allocator sees it (`loss: "linear-ce"`), its
//! sizes the walk's ([`LinearCe`], `estimate/linear_ce.rs`, which cites the source). The
//! order is the CPU measurement's (`scripts/measure_linear_ce.patch`: per chunk `aten::mm`,
//! the `.float()` copy, `_log_softmax`, the copy and the logits freed as
//! `compute_cross_entropy` returns; in backward per chunk the two fp32 gradients, the saved
//! log-softmax released, the 16-bit gradient, the projection's gradients; then each
//! `SliceBackward`'s zero `[N, h]`, then `IndexSelectBackward`'s `[b·s, h]`). Eager only: a
//! compiled recipe keeps the heuristic (`inputs::expressible` refuses `compile`).

use super::chunked_loss::{cross_entropy_backward, ChunkGrad};
use super::Sink;
use crate::estimate::linear_ce::LinearCe;
use crate::estimate::overhead::round_size;

/// What the loss's forward leaves for backward.
#[derive(Debug, Clone, Default)]
pub struct Saved {
    /// `mask_inputs`' indices (`IndexSelectBackward`) and masked targets (`NllLossBackward`).
    indices: u32,
    targets: u32,
    /// The masked hidden state, saved by the matmuls where the head trains (`u32::MAX`: not).
    hidden: u32,
    /// Per chunk: the fp32 log-softmax and `nll_loss`'s `total_weight`.
    log_softmax: Vec<u32>,
    total_weight: Vec<u32>,
}

/// The loss's forward on the model's output `output` (the final norm's `[b·s, h]`): the valid
/// count (a boolean mask and `nonzero`, dropped), `mask_inputs` (its mask dropped once the
/// indices exist; the hidden rows and targets gathered), then each chunk; the recipe's
/// `del outputs` after the loss returns.
pub fn forward<S: Sink>(s: &mut S, c: &LinearCe, output: u32) -> Saved {
    let n = round_size(c.masked().saturating_mul(8));
    // `total_valid_tokens`: `torch.where(targets != ignore_index)[0].numel()`.
    let mask = s.alloc(c.tokens);
    let idx = s.alloc(n);
    s.free(mask);
    s.free(idx);
    // `mask_inputs`.
    let mask = s.alloc(c.tokens);
    let indices = s.alloc(n);
    s.free(mask);
    let mut saved = Saved {
        indices,
        hidden: s.alloc(c.hidden_rows(c.masked())),
        targets: s.alloc(n),
        ..Saved::default()
    };
    for &r in &c.chunks {
        chunk_forward(s, c, r, &mut saved);
    }
    if !c.head_trains {
        s.free(saved.hidden);
        saved.hidden = u32::MAX;
    }
    s.free(output);
    saved
}

/// One chunk's `compute_cross_entropy`: the logits, their fp32 copy (none for fp32 logits),
/// the log-softmax and `total_weight` saved, the loss scalar added into the total and dropped.
fn chunk_forward<S: Sink>(s: &mut S, c: &LinearCe, r: u64, saved: &mut Saved) {
    let logits = s.alloc(c.logits(r));
    let copy = if c.logits_width == 4 {
        u32::MAX
    } else {
        s.alloc(c.fp32(r))
    };
    saved.log_softmax.push(s.alloc(c.fp32(r)));
    let loss = s.alloc(4);
    saved.total_weight.push(s.alloc(4));
    s.free(loss);
    s.free(copy);
    s.free(logits);
}

/// The backward, last chunk first; `head_grad` makes the projection's weight gradient as the
/// chunked output's projections do (`ChunkGrad`: the first kept, the second summed into a new
/// tensor, later ones added in place). Returns the model output's gradient.
pub fn backward<S: Sink>(
    s: &mut S,
    c: &LinearCe,
    saved: &Saved,
    mut head_grad: impl FnMut(&mut S, ChunkGrad) -> u32,
) -> u32 {
    let last = c.chunks.len().saturating_sub(1);
    let mut inputs = vec![u32::MAX; c.chunks.len()];
    let mut buffer = u32::MAX;
    for (k, &r) in c.chunks.iter().enumerate().rev() {
        let released = [saved.log_softmax[k], saved.total_weight[k]];
        let cast = if c.logits_width == 4 { 0 } else { c.logits(r) };
        let dlogits = cross_entropy_backward(s, c.fp32(r), cast, released);
        if k == last {
            buffer = head_grad(s, ChunkGrad::First);
            inputs[k] = s.alloc(c.hidden_rows(r));
            s.free(dlogits);
        } else {
            // `MmBackward`: the weight's contribution and the input's, dlogits released; then
            // `TBackward` hands the contribution to the input buffer, whose step
            // (`ChunkGrad::Later`) makes it anew: released and re-made at the same size, so
            // each moment holds the record's bytes.
            let made = s.alloc(c.weight_grad());
            inputs[k] = s.alloc(c.hidden_rows(r));
            s.free(dlogits);
            s.free(made);
            let second = k + 1 == last;
            buffer = head_grad(s, ChunkGrad::Later { second, buffer });
        }
        if k == 0 {
            s.free(saved.hidden);
            s.free(saved.targets);
        }
    }
    head_grad(s, ChunkGrad::AfterAll { buffer });
    // `SliceBackward`, last chunk first: a zero [N, h] each, summed in place into the first.
    let mut sum = u32::MAX;
    for id in inputs.into_iter().rev() {
        let z = s.alloc(c.hidden_rows(c.masked()));
        s.free(id);
        if sum == u32::MAX {
            sum = z;
        } else {
            s.free(z);
        }
    }
    let grad = s.alloc(c.hidden_rows(c.tokens));
    s.free(sum);
    s.free(saved.indices);
    grad
}
