//! torchtune's chunked output and loss as the allocator sees them (`loss: "chunked-output"`):
//! `TransformerDecoder.chunked_output` (`torchtune/modules/transformer.py`) projects the final
//! hidden state in [`OUTPUT_CHUNKS`] chunks along the sequence, every chunk's logits kept in a
//! list; `CEWithChunkedOutputLoss` (`torchtune/modules/loss/ce_chunked_output_loss.py`)
//! flattens each chunk of the recipe's shifted labels (a copy) and cross-entropies the chunks
//! in turn, each `logits_chunk.float()` freed once its `log_softmax` (saved) exists; the
//! recipe's `del logits` (`recipes/full_finetune_single_device.py` `_loss_step`) drops the
//! chunks. The sizes are the walk's (`stages::loss_chunked_output`).

use super::{Sink, TrainInputs};
use crate::estimate::stages::OUTPUT_CHUNKS;

/// The chunked output's sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkedOutput {
    /// Rows (batch × positions) of each chunk, in order: `torch.chunk` along the sequence,
    /// ⌈s / 8⌉ positions each and the last the rest.
    pub rows: Vec<u64>,
    pub vocab: u64,
    /// Bytes per logit (the head's dtype; no autocast).
    pub logits_width: u64,
    /// Bytes of one row of the hidden state's gradient.
    pub hidden_row: u64,
    /// The recipe's shifted labels: `torch.hstack((labels[..., 1:], ignore))`, int64 `[b, s]`.
    pub labels: u64,
    /// Under autocast ([`ChunkedOutput::under_autocast`]): bytes of one row of each chunk's
    /// 16-bit input cast, and the head weight's 16-bit copy; 0 without.
    pub cast_row: u64,
    pub weight_copy: u64,
}

/// Which projection's weight gradient a chunk's backward makes ([`backward`]'s `head_grad`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkGrad {
    /// The first to run (the last chunk's).
    First,
    /// Every later one, added into autograd's input buffer (`buffer`, under autocast): the
    /// `second` into a new tensor, the buffered first contribution being a view
    /// (`InputBuffer::accumulate`: `old_var + var` where neither may be stolen; measured), the
    /// rest in place into that sum.
    Later { second: bool, buffer: u32 },
    /// After every projection: under autocast the summed 16-bit gradient `buffer` is cast to
    /// the fp32 parameter (`ToCopyBackward`); nothing without.
    AfterAll { buffer: u32 },
}

impl ChunkedOutput {
    /// The chunks of a `batch × seq` step (`stages::loss_chunked_output`'s split).
    pub fn new(batch: u64, seq: u64, vocab: u64, logits_width: u64, hidden_row: u64) -> Self {
        let n = OUTPUT_CHUNKS.min(seq.max(1));
        let per = seq.div_ceil(n);
        let rows = (0..n)
            .map(|i| seq.saturating_sub(i * per).min(per))
            .filter(|&c| c > 0)
            .map(|c| batch.saturating_mul(c))
            .collect();
        ChunkedOutput {
            rows,
            vocab,
            logits_width,
            hidden_row,
            labels: batch.saturating_mul(seq).saturating_mul(8),
            cast_row: 0,
            weight_copy: 0,
        }
    }

    /// The chunks under autocast (`torch.autocast`, CUDA's lower-precision list in
    /// `aten/src/ATen/autocast_mode.cpp`: `linear`): each chunk's `self.output(chunk)` casts
    /// its fp32 input view (`tensor_split` of the fp32 final norm's output) to a new 16-bit
    /// tensor of `hidden` per row, which the matmul saves for the weight's gradient; the fp32
    /// weight is cast once (`cached_cast`: a leaf that requires grad is cached for the autocast
    /// region) to `weight_copy` bytes, made by the first chunk's linear and saved by every
    /// chunk's. The logits are 16-bit (`logits_width` 2).
    pub fn under_autocast(self, hidden: u64, weight_copy: u64) -> Self {
        ChunkedOutput {
            logits_width: 2,
            cast_row: hidden.saturating_mul(2),
            weight_copy,
            ..self
        }
    }

    /// The bytes of every chunk's 16-bit input cast together.
    pub fn casts(&self) -> u64 {
        self.rows.iter().sum::<u64>().saturating_mul(self.cast_row)
    }

    fn logits(&self, rows: u64) -> u64 {
        rows.saturating_mul(self.vocab)
            .saturating_mul(self.logits_width)
    }

    fn fp32(&self, rows: u64) -> u64 {
        rows.saturating_mul(self.vocab).saturating_mul(4)
    }
}

/// What the chunked loss's forward leaves for backward: per chunk its saved log-softmax and
/// flattened labels, and the shifted labels.
#[derive(Debug, Clone, Default)]
pub struct Saved {
    log_softmax: Vec<u32>,
    labels: Vec<u32>,
    shifted: u32,
    /// Under autocast: each chunk's 16-bit input and the weight's copy, saved by the matmuls.
    casts: Vec<u32>,
    copy: u32,
}

/// The forward from the head's input on: each chunk's projection (kept in the list), the
/// shifted labels and their flattened chunks, then each chunk's upcast and log-softmax, then
/// `del logits`.
pub fn forward<S: Sink>(s: &mut S, c: &ChunkedOutput) -> Saved {
    let (mut casts, mut logits) = (Vec::new(), Vec::with_capacity(c.rows.len()));
    let mut copy = u32::MAX;
    for &r in &c.rows {
        // The weight's copy first, then the chunk's input cast (as the CPU measurement of
        // autocast's `linear` orders them).
        if copy == u32::MAX {
            copy = s.alloc(c.weight_copy);
        }
        casts.push(s.alloc(r.saturating_mul(c.cast_row)));
        logits.push(s.alloc(c.logits(r)));
    }
    let shifted = s.alloc(c.labels);
    let labels = c.rows.iter().map(|&r| s.alloc(r * 8)).collect();
    let mut log_softmax = Vec::with_capacity(c.rows.len());
    for &r in &c.rows {
        // `logits.float()` is the chunk itself when the logits are fp32 already.
        let upcast = if c.logits_width == 4 {
            u32::MAX
        } else {
            s.alloc(c.fp32(r))
        };
        log_softmax.push(s.alloc(c.fp32(r)));
        s.free(upcast);
    }
    for id in logits {
        s.free(id);
    }
    Saved {
        log_softmax,
        labels,
        shifted,
        casts,
        copy,
    }
}

/// The backward of the losses and the projections. The losses' nodes are newer than every
/// projection's, so autograd runs all of them first, the last chunk first: `nll_loss`'s and
/// `log_softmax`'s fp32 gradients, the saved log-softmax and the chunk's labels released, the
/// gradient cast back to the logits' dtype (`ToCopyBackward`). Then each projection, last
/// chunk first: its weight's gradient (`head_grad`: the first made as the `.grad` or tied
/// buffer, each later one added into autograd's input buffer and freed,
/// `InputBuffer::accumulate`), the chunk's input gradient, its logits gradient released.
/// `torch.chunk`'s backward (`SplitBackward`) then concatenates the chunks' input gradients
/// into one `b·s·h` tensor, returned. Under autocast each matmul's input gradient is 16-bit,
/// cast to the fp32 input's dtype by the chunk's `ToCopyBackward` (next by sequence number) and
/// freed; the matmul releases its saved input cast, the last (the first chunk's) the weight's
/// copy; the weight's `ToCopyBackward`, older than every matmul, runs after them all on the
/// summed 16-bit gradient.
pub fn backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    c: &ChunkedOutput,
    saved: &Saved,
    mut head_grad: impl FnMut(&mut S, ChunkGrad) -> u32,
) -> u32 {
    let mut dlogits = vec![u32::MAX; c.rows.len()];
    for (k, &r) in c.rows.iter().enumerate().rev() {
        let released = [saved.log_softmax[k], saved.labels[k]];
        let cast = if c.logits_width == 4 { 0 } else { c.logits(r) };
        dlogits[k] = cross_entropy_backward(s, c.fp32(r), cast, released);
    }
    s.free(saved.shifted);
    let mut inputs = vec![u32::MAX; c.rows.len()];
    let mut buffer = u32::MAX;
    for (k, &r) in c.rows.iter().enumerate().rev() {
        buffer = if k + 1 == c.rows.len() {
            head_grad(s, ChunkGrad::First)
        } else {
            let second = k + 2 == c.rows.len();
            head_grad(s, ChunkGrad::Later { second, buffer })
        };
        // The matmul's input gradient: 16-bit under autocast, else the input's own.
        let row = if c.cast_row > 0 {
            c.cast_row
        } else {
            c.hidden_row
        };
        let g = s.alloc(r.saturating_mul(row));
        s.free(dlogits[k]);
        if let Some(&id) = saved.casts.get(k) {
            s.free(id);
        }
        if k == 0 {
            s.free(saved.copy);
        }
        inputs[k] = if c.cast_row > 0 {
            let f = s.alloc(r.saturating_mul(c.hidden_row));
            s.free(g);
            f
        } else {
            g
        };
    }
    head_grad(s, ChunkGrad::AfterAll { buffer });
    let grad = s.alloc(inp.head_grad_input);
    for id in inputs {
        s.free(id);
    }
    grad
}

/// One chunk's `cross_entropy` backward: `nll_loss`'s and `log_softmax`'s fp32 gradients
/// (`fp32` bytes each), the first and the saved tensors `released` freed, the second cast back
/// to the logits' dtype (`cast` bytes; 0: fp32 logits, the gradient is dlogits). Returns
/// dlogits.
pub fn cross_entropy_backward<S: Sink>(s: &mut S, fp32: u64, cast: u64, released: [u32; 2]) -> u32 {
    let g1 = s.alloc(fp32);
    let g2 = s.alloc(fp32);
    s.free(g1);
    for id in released {
        s.free(id);
    }
    if cast == 0 {
        return g2;
    }
    let d = s.alloc(cast);
    s.free(g2);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `torch.chunk` of 4096 positions in 8: 512 each; of 100: ⌈100/8⌉ = 13 positions, seven
    /// chunks of 13 and the last 9 (7·13 = 91); of 5 positions: 5 chunks of 1.
    #[test]
    fn chunks_as_torch_chunk_splits() {
        assert_eq!(ChunkedOutput::new(2, 4096, 10, 2, 8).rows, vec![1024; 8]);
        let c = ChunkedOutput::new(1, 100, 10, 2, 8);
        assert_eq!(c.rows, vec![13, 13, 13, 13, 13, 13, 13, 9]);
        assert_eq!(ChunkedOutput::new(3, 5, 10, 2, 8).rows, vec![3; 5]);
    }
}
