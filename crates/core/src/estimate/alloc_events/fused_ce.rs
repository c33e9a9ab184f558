//! Liger-Kernel's fused linear cross-entropy as the allocator sees it (`loss: "chunked"`):
//! `LigerFusedLinearCrossEntropyFunction` (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! `fused_linear_cross_entropy_forward`) never makes the whole logits. Its forward allocates
//! `grad_input = torch.zeros_like(_input)`, `grad_weight = torch.zeros_like(weight)` when the
//! head trains, `loss_1d = torch.zeros(BT, float32)` and `target_mask = target !=
//! ignore_index`; then, per chunk of `next_power_of_2(⌈BT / ⌈V/H⌉⌉)` rows, `logits_chunk =
//! _input_chunk @ weight.t()` (the previous chunk's still bound while it is made), the
//! cross-entropy kernel writing the logits' gradient in place, `grad_input[rows] =
//! grad_logits_chunk @ weight` (a chunk-sized product copied in and freed) and, when the head
//! trains, the weight gradient's step: in the current release (0.8.2; 0.6.2 on) without
//! autocast `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()` — the V·H
//! product, its fp32 copy (none when already fp32), the product dropped as `.float()` returns,
//! the copy after the add (`stages::liger_grad_weight_scratch`, with the release boundaries;
//! ≤ 0.6.1 ran `torch.addmm` into `grad_weight` in place, with no scratch);
//! `ctx.save_for_backward(grad_input, grad_weight)`. Its
//! backward (`fused_linear_cross_entropy_backward`) compares `grad_output` with
//! `torch.tensor(1.0)` and returns the saved tensors as they are (the loss is the last op):
//! the head input's gradient and the head weight's, which `AccumulateGrad` steals as `.grad`.
//! The labels: Liger's `LigerForCausalLMLoss` pads (`labels = pad(labels, (0, 1))`, the
//! local rebound, so the padded tensor lives to the function's end) and shifts
//! (`labels[..., 1:].contiguous()`).

use super::Sink;

/// The fused loss's sizes (the walk's, `stages::loss_chunked`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FusedCe {
    /// Rows (batch × sequence) and the chunk's rows.
    pub rows: u64,
    pub chunk: u64,
    pub vocab: u64,
    /// Bytes of one row of the head's input (and of its gradient).
    pub hidden_row: u64,
    /// Bytes per logit (the input's dtype; no autocast).
    pub logits_width: u64,
    /// `grad_weight` (0: a frozen head, `weight.requires_grad` false).
    pub head_grad: u64,
    /// `pad(labels, (0, 1))` and `shift_labels[..., 1:].contiguous()` (int64).
    pub labels_padded: u64,
    pub labels_shifted: u64,
    /// Per chunk, the head weight's gradient scratch: `torch.mm`'s V·H product and its
    /// `.float()` copy (`[0, 0]`: a frozen head, or the in-place `addmm`; `[p, 0]`: fp32
    /// logits).
    pub grad_weight_scratch: [u64; 2],
    /// Under autocast (`liger::autocast_transient`): bytes of one row of the 16-bit input
    /// cast, and the 16-bit copy of an fp32 head weight; 0 without.
    pub cast_row: u64,
    pub weight_copy: u64,
    /// Under autocast, the release's in-place `addmm` (`liger::autocast_addmm`).
    pub addmm: bool,
}

impl FusedCe {
    /// Liger's chunking (`liger::chunk_rows`).
    pub fn chunk_rows(rows: u64, hidden: u64, vocab: u64) -> u64 {
        crate::estimate::liger::chunk_rows(rows, hidden, vocab)
    }
}

/// An allocation of `bytes` when there are any (`u32::MAX`: none made, nothing to free).
fn alloc_some<S: Sink>(s: &mut S, bytes: u64) -> u32 {
    if bytes == 0 {
        u32::MAX
    } else {
        s.alloc(bytes)
    }
}

/// What the forward leaves: the two saved gradients (`u32::MAX`: none).
#[derive(Debug, Clone, Copy)]
pub struct Saved {
    pub grad_input: u32,
    pub grad_weight: u32,
}

/// The loss's forward on the head's input: labels, the function's buffers, the chunks, and
/// what the function frees on return.
pub fn forward<S: Sink>(s: &mut S, c: &FusedCe) -> Saved {
    let padded = s.alloc(c.labels_padded);
    let shifted = s.alloc(c.labels_shifted);
    let grad_input = s.alloc(c.rows.saturating_mul(c.hidden_row));
    let grad_weight = if c.head_grad > 0 {
        s.alloc(c.head_grad)
    } else {
        u32::MAX
    };
    let loss_1d = s.alloc(c.rows.saturating_mul(4));
    let mask = s.alloc(c.rows);
    // `target_mask.sum().item()`: an int64 scalar, read and dropped.
    let n = s.alloc(8);
    s.free(n);
    let mut held = Held {
        logits: u32::MAX,
        cached: u32::MAX,
        cast: u32::MAX,
    };
    let mut start = 0;
    while start < c.rows {
        let r = c.chunk.min(c.rows - start).max(1);
        chunk(s, c, r, &mut held);
        start += r;
    }
    // `loss = torch.sum(loss_1d)`, then the function returns: its locals go; the model's
    // forward returns next, leaving autocast (its cached weight copy released).
    s.alloc(4);
    s.free(held.logits);
    s.free(held.cast);
    s.free(held.cached);
    s.free(loss_1d);
    s.free(mask);
    s.free(shifted);
    s.free(padded);
    Saved {
        grad_input,
        grad_weight,
    }
}

/// What lives from one chunk to the next: the logits (`grad_logits_chunk`), autocast's cached
/// 16-bit weight, the `addmm` path's input cast (`input_chunk`).
struct Held {
    logits: u32,
    cached: u32,
    cast: u32,
}

/// One chunk of `r` rows: `_input_chunk @ weight.t()` (under autocast the input rows' and
/// the transposed weight's 16-bit casts, freed as the matmul returns; the previous logits
/// dropped once the new exist), `grad_input[rows] = grad_logits_chunk @ weight` (under
/// autocast the weight's copy, cached at the first chunk where the head trains, else made
/// and freed), then the weight gradient's step.
fn chunk<S: Sink>(s: &mut S, c: &FusedCe, r: u64, held: &mut Held) {
    let cast = alloc_some(s, r.saturating_mul(c.cast_row));
    let copy = alloc_some(s, c.weight_copy);
    let next = s.alloc(r.saturating_mul(c.vocab).saturating_mul(c.logits_width));
    s.free(cast);
    s.free(copy);
    // The previous chunk's logits: dropped as `grad_logits_chunk` is rebound, or, where the
    // head trains under autocast, as `grad_logits_t` is (after the next matmul).
    let prev = std::mem::replace(&mut held.logits, next);
    let late = c.cast_row > 0 && c.head_grad > 0;
    if !late {
        s.free(prev);
    }
    let copy = if c.head_grad > 0 && held.cached == u32::MAX {
        held.cached = alloc_some(s, c.weight_copy);
        u32::MAX
    } else if c.head_grad == 0 {
        alloc_some(s, c.weight_copy)
    } else {
        u32::MAX
    };
    let row = if c.cast_row > 0 {
        c.cast_row
    } else {
        c.hidden_row
    };
    let product = s.alloc(r.saturating_mul(row));
    s.free(copy);
    s.free(product);
    if late {
        s.free(prev);
    }
    if c.head_grad == 0 {
        return;
    }
    if c.cast_row > 0 && c.addmm {
        // `input_chunk = _input_chunk` drops the last cast; `.to(bf16)`; `addmm` in place.
        s.free(held.cast);
        held.cast = s.alloc(r.saturating_mul(c.cast_row));
    } else {
        // Under autocast `torch.mm` casts the input rows first.
        let cast = alloc_some(s, r.saturating_mul(c.cast_row));
        weight_grad_step(s, c.grad_weight_scratch, cast);
    }
}

/// `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`: the product, its
/// fp32 copy while the product is still referenced, the product dropped as `.float()`
/// returns, the copy after the in-place add.
fn weight_grad_step<S: Sink>(s: &mut S, [product, upcast]: [u64; 2], cast: u32) {
    if product == 0 {
        s.free(cast);
        return;
    }
    let mm = s.alloc(product);
    s.free(cast);
    let copy = s.alloc(upcast);
    s.free(mm);
    s.free(copy);
}

/// The backward: `torch.tensor(1.0)` made for the comparison and dropped; nothing else made.
pub fn backward<S: Sink>(s: &mut S) {
    let one = s.alloc(4);
    s.free(one);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B at b2 × 2048 (BT 4096, H 4096, V 128,256): ⌈V/H⌉ = 32, ⌈4096/32⌉ = 128
    /// rows, already a power of two. GPT-2 (V 50,257, H 768) at BT 1024: ⌈V/H⌉ = 66,
    /// ⌈1024/66⌉ = 16. A tiny batch: 10 rows, ⌈V/H⌉ = 3 → ⌈10/3⌉ = 4.
    #[test]
    fn liger_chunk_sizes() {
        assert_eq!(FusedCe::chunk_rows(4096, 4096, 128_256), 128);
        assert_eq!(FusedCe::chunk_rows(1024, 768, 50_257), 16);
        assert_eq!(FusedCe::chunk_rows(10, 100, 300), 4);
    }
}
