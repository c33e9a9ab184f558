//! What autograd saves for backward in a LoRA training step of a Flux or SD3 transformer, as
//! diffusers' DreamBooth LoRA scripts run it: the base weights frozen (`requires_grad_(False)`),
//! PEFT LoRA on `to_q`, `to_k`, `to_v`, `to_out.0`, the forward under autocast (accelerate's
//! `mixed_precision`, CUDA's op lists: `layer_norm` and the RMS norms' `.float()` run in
//! fp32, linears and SDPA in the low dtype). Walked op by op through
//! `models/transformers/transformer_flux.py` and checked tensor by tensor with
//! `torch.autograd.graph.saved_tensors_hooks` on a tiny Flux (scripts/measure_diffusion_train.patch):
//!
//! - a frozen `nn.Linear` saves its weight only (the input's gradient needs no input), so the
//!   frozen projections save nothing beside the weights;
//! - a LoRA layer's `lora_A` saves its input — under autocast a low-dtype cast of the fp32
//!   norm output, one per adapter (autocast caches casts of leaf weights only) — and `lora_B`
//!   saves `lora_A`'s r-wide output;
//! - `nn.LayerNorm` (fp32 under autocast) saves its fp32 input, mean and rstd; the modulation
//!   `norm(x) * (1 + scale) + shift` saves `1 + scale` (d a row);
//! - the q/k `RMSNorm` saves `hidden_states.to(float32)` and the rsqrt (one a head);
//! - the rotary embedding saves its fp32 cos and sin (one table for all blocks);
//! - SDPA saves q, k, v, the output and the fp32 logsumexp (heads a token);
//! - the GELU (tanh) saves its input (4d); the gates save the AdaLayerNorm's `emb` (6d / 3d).
//!
//! Every tensor that needs no gradient upstream saves nothing: the first double-stream block's
//! inputs come from frozen embedders, so its norms and the text stream's q/k norms save nothing
//! until the joint attention mixes the LoRA outputs into both streams.
//!
//! Figures are bytes for one image (`u128`); the rotary table is apart (no batch).

use super::{Flux, Sd3};

type N = u128;

/// Element sizes of a training forward: `e` the low dtype (linears, SDPA), `f` what the norms
/// compute in (4 under autocast and in fp32), `casts` the LoRA-A input copies per adapter set
/// (autocast casts the fp32 norm output once per adapter; in fp32 they share the norm output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elems {
    pub e: N,
    pub f: N,
    pub autocast: bool,
}

impl Elems {
    /// The training forward in the pipeline's dtype: bf16/fp16 under autocast, fp32 without.
    pub fn of(elem: u64) -> Elems {
        Elems {
            e: N::from(elem),
            f: 4,
            autocast: elem < 4,
        }
    }
}

/// `nn.LayerNorm` on `rows` rows of `d` and the modulation: fp32 input, mean, rstd, `1 + scale`.
fn ln(rows: N, d: N, x: Elems) -> N {
    rows * d * x.f + 2 * rows * x.f + d * x.e
}

/// `RMSNorm` on q and k of `rows` tokens: their fp32 copies and the rsqrt of each head.
fn rms_qk(rows: N, d: N, heads: N, x: Elems) -> N {
    2 * (rows * d * x.f + rows * heads * x.f)
}

/// LoRA on q, k, v over `rows` tokens: the inputs `lora_A` saves (a copy each under autocast,
/// the shared norm output in fp32) and the three r-wide `lora_A` outputs.
fn lora_qkv(rows: N, d: N, r: N, x: Elems) -> N {
    let copies = if x.autocast { 3 } else { 1 };
    copies * rows * d * x.e + 3 * rows * r * x.e
}

/// SDPA over `s` tokens: q, k, v, the output and the fp32 logsumexp.
fn sdpa(s: N, d: N, heads: N, x: Elems) -> N {
    4 * s * d * x.e + heads * s * 4
}

/// The GELU MLP with modulation over `rows`: the LayerNorm and the GELU's 4d-wide input.
fn mlp(rows: N, d: N, x: Elems) -> N {
    ln(rows, d, x) + rows * 4 * d * x.e
}

/// `FluxTransformerBlock`, bytes for one image of `n` image and `t` text tokens, LoRA rank
/// `r`; `first`: the block whose inputs need no gradient. Image stream: norm1, LoRA q/k/v,
/// q/k norms, the `to_out.0` LoRA (its input is SDPA's output: only `lora_A`'s output is new),
/// norm2 and the MLP; text stream: norm1_context, its q/k norms, its MLP; the joint SDPA; the
/// two AdaLayerNormZero `emb` (6d each) the gates keep.
pub fn flux_double(c: &Flux, n: N, t: N, r: N, first: bool, x: Elems) -> N {
    let d = N::from(c.heads * c.head_dim);
    let h = N::from(c.heads);
    let inputs = if first {
        0
    } else {
        ln(n, d, x) + ln(t, d, x) + rms_qk(t, d, h, x)
    };
    inputs
        + lora_qkv(n, d, r, x)
        + rms_qk(n, d, h, x)
        + sdpa(n + t, d, h, x)
        + n * r * x.e
        + 2 * 6 * d * x.e
        + mlp(n, d, x)
        + mlp(t, d, x)
}

/// `FluxSingleTransformerBlock` over `s` joint tokens: the norm, the MLP's GELU input, LoRA
/// q/k/v, q/k norms, SDPA, the `emb` (3d) the gate keeps (`proj_out` is frozen and not a
/// target: it saves nothing).
pub fn flux_single(c: &Flux, s: N, r: N, x: Elems) -> N {
    let d = N::from(c.heads * c.head_dim);
    let h = N::from(c.heads);
    ln(s, d, x)
        + s * 4 * d * x.e
        + lora_qkv(s, d, r, x)
        + rms_qk(s, d, h, x)
        + sdpa(s, d, h, x)
        + 3 * d * x.e
}

/// The rotary table Flux's blocks share: cos and sin, fp32, `s × head_dim`.
pub fn flux_rope(c: &Flux, s: N) -> N {
    2 * s * N::from(c.head_dim) * 4
}

/// Flux's whole forward, bytes for one image (the rotary table apart): every block and
/// `norm_out` (`AdaLayerNormContinuous`: a LayerNorm and `1 + scale`).
pub fn flux_saved(c: &Flux, n: N, t: N, r: N, x: Elems) -> N {
    let d = N::from(c.heads * c.head_dim);
    let double: N = (0..c.layers)
        .map(|i| flux_double(c, n, t, r, i == 0, x))
        .sum();
    double + N::from(c.single_layers) * flux_single(c, n + t, r, x) + ln(n, d, x)
}

/// `JointTransformerBlock` (`models/attention.py`) of SD3, one image: Flux's double block less
/// the q/k norms where the config has none, with SD3.5's dual attention (a second LoRA'd
/// self-attention over the image tokens with its own norm and `emb` 9d) and the last block's
/// `context_pre_only` (no text MLP).
pub fn sd3_block(c: &Sd3, n: N, t: N, r: N, i: u64, x: Elems) -> N {
    let d = N::from(c.heads * c.head_dim);
    let h = N::from(c.heads);
    let (first, last) = (i == 0, i + 1 == c.layers);
    let dual = c.dual_attention_layers.contains(&i);
    let qk = |rows: N| if c.qk_norm { rms_qk(rows, d, h, x) } else { 0 };
    let inputs = if first {
        0
    } else {
        ln(n, d, x) + ln(t, d, x) + qk(t)
    };
    let text_mlp = if last { 0 } else { mlp(t, d, x) };
    let second = if dual {
        lora_qkv(n, d, r, x) + qk(n) + sdpa(n, d, h, x) + n * r * x.e + 3 * d * x.e
    } else {
        0
    };
    inputs
        + lora_qkv(n, d, r, x)
        + qk(n)
        + sdpa(n + t, d, h, x)
        + n * r * x.e
        + 2 * 6 * d * x.e
        + mlp(n, d, x)
        + text_mlp
        + second
}

/// SD3's whole forward, bytes for one image: the blocks and `norm_out`.
pub fn sd3_saved(c: &Sd3, n: N, t: N, r: N, x: Elems) -> N {
    let d = N::from(c.heads * c.head_dim);
    (0..c.layers)
        .map(|i| sd3_block(c, n, t, r, i, x))
        .sum::<N>()
        + ln(n, d, x)
}
