//! torchtune's `LinearCrossEntropyLoss` (`loss: "linear-ce"`), as its source runs it
//! (`torchtune/modules/loss/cross_entropy_loss.py`, pytorch/torchtune `bd2a0fc7`, 2026-04-23;
//! no PyPI release has it, 0.6.1 being the last): the recipe's `loss.set_model_output(model)`
//! makes the decoder return its final norm's output (`skip_output_layer`), and the loss
//!
//! 1. masks the ignored tokens out (`mask_inputs`: `torch.where(target != ignore_index)[0]`,
//!    then `hidden.index_select(0, indices)` — a new `[N, h]` tensor — and the same of the
//!    targets, int64); `IndexSelectBackward` saves the indices;
//! 2. splits both in `num_output_chunks` = 8 (`tensor_split`: ⌊N/8⌋ + 1 rows for the first
//!    N mod 8 chunks, ⌊N/8⌋ for the rest: slices, each with its `SliceBackward`);
//! 3. per chunk, `compute_cross_entropy`: `logits = self.linear_projection(hidden_chunk)` in
//!    the model's dtype, `F.cross_entropy(logits.float(), target_chunk, reduction="sum")` —
//!    the fp32 copy, `log_softmax` (its fp32 output saved by `LogSoftmaxBackward` and
//!    `NllLossBackward`, with the target chunk and a scalar `total_weight`), the chunk's
//!    logits and copy freed as the function returns. The matmul saves its input (the masked
//!    hidden's rows) only where the head's weight trains.
//!
//! Labels: torchtune's SFT dataset shifts them (`torchtune/datasets/_sft.py`: `tokens[1:]`,
//! one `CROSS_ENTROPY_IGNORE_IDX` appended), so at least the last position of every row is
//! ignored: `N = b·(s − 1)`, every other position taken as trained (no prompt masking nor
//! padding — the most rows the loss can project).
//!
//! Backward (measured, `scripts/measure_linear_ce.patch`,
//! `validation/results/cpu-tiny-llama-bf16-adamw-sdpa-linearce-b2s256.json`):
//! every node of a chunk is newer than the previous chunk's, so autograd runs one chunk whole
//! before the next, the last chunk first — `nll_loss`'s and `log_softmax`'s fp32 gradients,
//! the saved log-softmax released, the gradient cast back to the logits' dtype, then the
//! projection: the weight's gradient (where it trains: the first kept, the second summed into
//! a new tensor with the first, later ones added in place — `InputBuffer::accumulate`) and the
//! chunk's input gradient, which waits for the `SliceBackward`s (older than every chunk). Each
//! `SliceBackward` makes a zero `[N, h]` tensor (`slice_backward`), summed in place into the
//! first; `IndexSelectBackward` then makes the `[b·s, h]` gradient of the model's output.
//!
//! `compile: True`: the recipe's `training.compile_loss` calls `apply_compile_strategy`, which
//! compiles `compute_cross_entropy` alone — one graph per chunk of the projection, upcast and
//! cross-entropy, cut as [`super::compile::loss`] cuts the whole loss: the chunk's 16-bit
//! logits and two fp32 statistics per row saved, no fp32 chunk made; its backward writes the
//! chunk's 16-bit gradient in one fused kernel (`compile::chunked_output_loss`). From source,
//! not measured.
//!
//! torchtune trains in its dtype, without autocast; a `bf16-mixed` job gets 16-bit logits and
//! the hidden state's own width here, the head's 16-bit weight copy from `stages::head`, and
//! no chunk-by-chunk input casts (the stream keeps the heuristic for it).

use super::blocks::Numerics;
use super::overhead::round_size;
use super::stages::LossMemory;
use crate::model::ModelSpec;

/// `LinearCrossEntropyLoss(num_output_chunks=8)`, the default every torchtune recipe keeps.
pub const CHUNKS: u64 = 8;

/// The rows the loss projects out of `batch × seq` positions: the last of each row is the
/// dataset's appended ignore label.
pub fn rows(batch: u64, seq: u64) -> u64 {
    batch.saturating_mul(seq.saturating_sub(1))
}

/// `tensor_split(CHUNKS)` of `n` rows: ⌊n/8⌋ + 1 rows for the first n mod 8, ⌊n/8⌋ for the
/// rest (fewer chunks than 8 only with fewer rows, empty ones dropped).
pub fn chunk_rows(n: u64) -> Vec<u64> {
    let (q, r) = (n / CHUNKS, n % CHUNKS);
    (0..CHUNKS)
        .map(|i| q + u64::from(i < r))
        .filter(|&c| c > 0)
        .collect()
}

/// The loss's sizes for a job: chunks, widths, and whether the head trains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearCe {
    /// Rows of each chunk, in order.
    pub chunks: Vec<u64>,
    /// `b·s`: the model output's rows.
    pub tokens: u64,
    pub vocab: u64,
    pub hidden: u64,
    /// Bytes per logit (the model's dtype; 16-bit under autocast) and per hidden element.
    pub logits_width: u64,
    pub hidden_width: u64,
    /// The head's weight requires grad (`stages::head_trains`).
    pub head_trains: bool,
    pub compile: bool,
}

impl LinearCe {
    /// The walk's: widths from the job's numerics.
    pub fn new(spec: &ModelSpec, batch: u64, seq: u64, num: Numerics, head_trains: bool) -> Self {
        let logits = if num.autocast { 2 } else { num.compute };
        LinearCe {
            compile: num.compile,
            ..Self::of(spec, (batch, seq), (logits, num.param), head_trains)
        }
    }

    /// Eager, `widths` = (logits, hidden) bytes per element.
    pub fn of(
        spec: &ModelSpec,
        (batch, seq): (u64, u64),
        widths: (u64, u64),
        trains: bool,
    ) -> Self {
        LinearCe {
            chunks: chunk_rows(rows(batch, seq)),
            tokens: batch.saturating_mul(seq),
            vocab: spec.vocab_size,
            hidden: spec.hidden_size,
            logits_width: widths.0,
            hidden_width: widths.1,
            head_trains: trains,
            compile: false,
        }
    }

    /// `N`: the masked rows.
    pub fn masked(&self) -> u64 {
        self.chunks.iter().sum()
    }

    /// A chunk's logits in the model's dtype.
    pub fn logits(&self, rows: u64) -> u64 {
        round_size(rows.saturating_mul(self.vocab) * self.logits_width)
    }

    /// A chunk's fp32 tensor of logits' shape (the upcast, the log-softmax, their gradients).
    pub fn fp32(&self, rows: u64) -> u64 {
        round_size(rows.saturating_mul(self.vocab) * 4)
    }

    /// `rows` rows of the hidden state (the masked copy, a chunk's input gradient).
    pub fn hidden_rows(&self, rows: u64) -> u64 {
        round_size(rows.saturating_mul(self.hidden) * self.hidden_width)
    }

    /// The head weight's gradient, in the logits' dtype (0: frozen).
    pub fn weight_grad(&self) -> u64 {
        if self.head_trains {
            round_size(self.vocab.saturating_mul(self.hidden) * self.logits_width)
        } else {
            0
        }
    }

    /// What one chunk leaves for backward: eager, its fp32 log-softmax and `total_weight`
    /// (a scalar); compiled, its 16-bit logits and two fp32 statistics per row.
    pub fn chunk_saved(&self, rows: u64) -> u64 {
        if self.compile {
            self.logits(rows) + 2 * round_size(rows * 4)
        } else {
            self.fp32(rows) + round_size(4)
        }
    }

    /// The masked targets and the indices (int64, `N` each), saved.
    pub fn index_tensors(&self) -> u64 {
        2 * round_size(self.masked().saturating_mul(8))
    }

    /// The masked hidden state when the matmuls save it (the head trains).
    pub fn saved_hidden(&self) -> u64 {
        if self.head_trains {
            self.hidden_rows(self.masked())
        } else {
            0
        }
    }
}

/// The walk's charge: what the loss saves, its forward transient at the last chunk (the
/// model's output `[b·s, h]`, held by the recipe until `del outputs`; the masked copy where
/// nothing saves it; the chunk's logits and, eager, their fp32 copy), the largest moment of
/// the chunks' backward (over the full saved baseline, the head weight's gradient buffer
/// included), and as `dlogits` what the `SliceBackward`s and `IndexSelectBackward` hold
/// beside the head input's gradient.
pub fn loss_memory(c: &LinearCe) -> LossMemory {
    let last = c.chunks.last().copied().unwrap_or(0);
    let saved: u64 = c.chunks.iter().map(|&r| c.chunk_saved(r)).sum::<u64>()
        + c.index_tensors()
        + c.saved_hidden();
    let chunk = if c.compile {
        0
    } else if c.logits_width == 4 {
        c.fp32(last)
    } else {
        c.logits(last) + c.fp32(last)
    };
    let masked = if c.head_trains {
        0
    } else {
        c.hidden_rows(c.masked())
    };
    LossMemory {
        saved,
        forward_transient: c.hidden_rows(c.tokens) + masked + chunk,
        backward_transient: backward_top(c),
        dlogits: slices_top(c).saturating_sub(c.hidden_rows(c.tokens)),
    }
}

/// The chunks' backward, last chunk first, as the largest excess over the loss's saved
/// baseline: per chunk the loss gradients (eager: two fp32 chunks beside the saved
/// log-softmax; compiled: the 16-bit gradient beside the saved logits), then the matmul's
/// (the 16-bit gradient, the weight's contribution, the input's), then, at the second chunk,
/// the sum of the weight's first two contributions.
pub fn backward_top(c: &LinearCe) -> u64 {
    let (mut held, mut top) = (0i128, 0i128);
    let vh = c.weight_grad() as i128;
    for (k, &r) in c.chunks.iter().enumerate().rev() {
        let saved = c.chunk_saved(r) as i128;
        let first = k + 1 == c.chunks.len();
        let buffer = if first { 0 } else { vh };
        let (loss, dlogits) = if c.compile {
            (c.logits(r) as i128, c.logits(r) as i128)
        } else if c.logits_width == 4 {
            (2 * c.fp32(r) as i128, c.fp32(r) as i128)
        } else {
            (2 * c.fp32(r) as i128, c.logits(r) as i128)
        };
        top = top.max(held + buffer + loss);
        let input = c.hidden_rows(r) as i128;
        top = top.max(held - saved + buffer + dlogits + vh + input);
        held += input - saved;
        if k + 2 == c.chunks.len() {
            top = top.max(held + 3 * vh);
        }
    }
    // After the last projection the weight's summed gradient stays (the `.grad`).
    top.max(held + vh).max(0) as u64
}

/// The `SliceBackward`s, then `IndexSelectBackward`, after every chunk: the first slice's zero
/// `[N, h]` replaces the last chunk's input gradient, the second's is made beside it (the
/// other chunks' input gradients still waiting) and added in; then the `[b·s, h]` output
/// gradient beside the summed `[N, h]`.
pub fn slices_top(c: &LinearCe) -> u64 {
    let full = c.hidden_rows(c.masked());
    let waiting: u64 = c
        .chunks
        .iter()
        .rev()
        .skip(1)
        .map(|&r| c.hidden_rows(r))
        .sum();
    let second = if c.chunks.len() > 1 {
        2 * full + waiting
    } else {
        full
    };
    second.max(full + c.hidden_rows(c.tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tensor_split` of 510 rows (2 × 255) in 8: 510 = 8·63 + 6, so six chunks of 64 and two
    /// of 63; of 4094 (2 × 2047): 8·511 + 6; of 5: five chunks of 1.
    #[test]
    fn chunks_as_tensor_split() {
        assert_eq!(chunk_rows(510), vec![64, 64, 64, 64, 64, 64, 63, 63]);
        assert_eq!(
            chunk_rows(4094),
            vec![512, 512, 512, 512, 512, 512, 511, 511]
        );
        assert_eq!(chunk_rows(5), vec![1; 5]);
        assert_eq!(rows(2, 2048), 4094);
    }
}
