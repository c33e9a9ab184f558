//! The text encoders' activation peak in one `no_grad` forward over the prompt tokens.

use super::job::Resolved;
use super::{Arch, ClipText, Component, T5Encoder};

type N = u128;

/// CLIP's prompt length (`tokenizer.model_max_length`, every CLIP tokenizer of these pipelines).
pub const CLIP_TOKENS: u64 = 77;

/// transformers `CLIPEncoderLayer` (`models/clip/modeling_clip.py`), bytes for `batch` prompts
/// of `s` tokens: at the MLP the residual, the LayerNorm output, `fc1` and the quick-GELU
/// output (2h + 2I a token); attention (SDPA) keeps the residual, the norm, q/k/v and the
/// output (6h). The pipelines keep `hidden_states` of every layer (`output_hidden_states=True`,
/// the penultimate layer is used): L + 1 tensors of h a token.
pub fn clip_peak(c: &ClipText, batch: u64, s: u64, e: u64) -> N {
    let (h, i) = (N::from(c.hidden), N::from(c.intermediate));
    let layer = (2 * h + 2 * i).max(6 * h);
    let kept = (N::from(c.layers) + 1) * h;
    N::from(batch) * N::from(s) * N::from(e) * (layer + kept)
}

/// transformers `T5Block` in an encoder (`models/t5/modeling_t5.py`), bytes: T5's attention is
/// eager (the relative position bias is added to the scores): the position bias (heads × s²,
/// computed once, passed to every layer), the scores, their fp32 copy and its softmax
/// (`softmax(scores.float())`); the gated feed-forward keeps `wi_0`'s GELU, `wi_1` and their
/// product (3 × d_ff) beside the residual and the norm.
pub fn t5_peak(c: &T5Encoder, batch: u64, s: u64, e: u64) -> N {
    let (b, s, e) = (N::from(batch), N::from(s), N::from(e));
    let bias = N::from(c.heads) * s * s * e;
    let attn = b * N::from(c.heads) * s * s * (e + 4 + 4) + b * s * e * 5 * N::from(c.d_model);
    let ff_width = if c.gated { 3 } else { 2 } * N::from(c.d_ff);
    let ff = b * s * e * (2 * N::from(c.d_model) + ff_width);
    bias + attn.max(ff)
}

/// A text encoder's peak for the job's prompts (`batch` of them, in the pipeline's dtype):
/// CLIP over its 77 tokens (capped at `max_position_embeddings`), T5 over the job's
/// `max_sequence_length`; 0 for a component that is no text encoder. Inference and the
/// training step with per-image captions encode the prompts alike (diffusers
/// `encode_prompt`).
pub fn encoder_peak(c: &Component, j: &Resolved) -> N {
    match &c.arch {
        Arch::ClipText(t) => clip_peak(t, j.batch, CLIP_TOKENS.min(t.max_positions), j.elem()),
        Arch::T5Encoder(t) => t5_peak(t, j.batch, j.max_sequence_length, j.elem()),
        _ => 0,
    }
}
