//! Bytes the memory-bound ops of a training micro-batch move, forward and backward, as eager
//! PyTorch runs a Hugging Face decoder (the op list of [`super::eager`]): each elementwise
//! kernel reads its inputs and writes its output once, at the dtype the op runs in. The GPU
//! moves them at the bandwidth's achievable fraction ([`super::hardware::MEMORY_FRACTION`]).
//!
//! Per token per layer, forward (w: the residual stream's bytes, 4 under autocast or fp32, 2
//! in pure 16-bit; m: a matmul output's, 2 unless fp32):
//! - RMSNorm (`LlamaRMSNorm.forward`): pure 16-bit: the upcast (read 2, write 4), `pow` (4, 4),
//!   `mean` (read 4), `x · rsqrt` (4, 4), the downcast (4, 2), `weight ·` (2, 2): 36 bytes an
//!   element; over fp32 input the casts are no-ops: 28. LayerNorm (`F.layer_norm`): read w,
//!   write w.
//! - Rotary (`apply_rotary_pos_emb`) on q and k: `x·cos`, `neg` and `cat` of the halves, `·sin`,
//!   `+`: 20 bytes an element at 2 bytes; under autocast q·cos (fp32 cos) goes to fp32: 30,
//!   and the attention's cast of q and k back to 16 bits 6 more; fp32: 40.
//! - The attention output's `transpose(1, 2).contiguous()`: read m, write m.
//! - Residual adds: read w + m, write w; each autocast cast of a projection's fp32 input: read
//!   4, write 2; the activation (`F.silu`: read m, write m; `gelu_new`'s eight kernels, each
//!   read and write) and the gate's multiply (read 2m, write m) over the MLP's width.
//!
//! Fused (Megatron-LM): one read and one write per norm, activation and rotary.
//!
//! The backward moves twice the forward's bytes (each op's gradient read and the input's
//! written, with what the op saved read again), and the forward again under full
//! recomputation.

use super::shape::LayerOps;
use super::Setup;

/// Forward bytes per token of one layer, as (replicated across tensor-parallel ranks without
/// sequence parallelism: norms, residual adds, input casts; split across them: rotary,
/// attention output, activation).
pub fn layer_forward_bytes(o: &LayerOps, s: &Setup) -> (f64, f64) {
    let fused;
    let o = if s.fused {
        fused = super::eager::fused_view(o);
        &fused
    } else {
        o
    };
    let fp32 = s.width == 4;
    let w = if s.autocast || fp32 { 4.0 } else { 2.0 };
    let m = s.width as f64;
    let rms = if w == 2.0 { 36.0 } else { 28.0 };
    let h = o.hidden;
    let norms = o.rms_norms * rms * h + o.layer_norms * 2.0 * w * h;
    let residual = 2.0 * (2.0 * w + m) * h;
    let casts = if s.autocast {
        6.0 * o.fp32_inputs * h
    } else {
        0.0
    };
    let rotary = o.rotary_width
        * match (s.fused, s.autocast, fp32) {
            (true, _, _) => 2.0 * m,
            (false, true, _) => 36.0,
            (false, false, true) => 40.0,
            (false, false, false) => 20.0,
        };
    let out = 2.0 * m * h;
    let act = o.act_width * (o.act_kernels * 2.0 * m + if o.gated { 3.0 * m } else { 0.0 });
    let dropout = o.hidden_dropouts * (2.0 * w + 1.0) * h;
    (norms + residual + casts + dropout, rotary + out + act)
}

/// Bytes of the loss over `logits` values (HF `ForCausalLMLoss`), forward and backward:
/// 16-bit logits cast to fp32 (read 2, write 4), log-softmax (reads twice, writes: 12); the
/// backward's zeroed NLL gradient (4), log-softmax's backward (12) and the cast back (6).
pub fn loss_bytes(logits: f64, width: u64) -> (f64, f64) {
    let cast = if width == 2 { 6.0 } else { 0.0 };
    (logits * (cast + 12.0), logits * (16.0 + cast))
}

/// Autocast's weight copies (`torch.autocast`'s cast cache, once per forward): each fp32
/// weight read (4) and written in 16 bits (2); in the backward each trained weight's 16-bit
/// gradient cast back to fp32 (read 2, write 4), and the copies made again under full
/// recomputation.
pub fn autocast_copy_bytes(weights: f64, trained: bool, recompute: bool) -> (f64, f64) {
    let t = if trained { 6.0 } else { 0.0 };
    let r = if recompute { 6.0 } else { 0.0 };
    (6.0 * weights, (t + r) * weights)
}
