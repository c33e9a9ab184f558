//! Gemma 4's vision tower in training (`gemma4`, transformers 5.24
//! `models/gemma4/modeling_gemma4.py`): what `Gemma4VisionModel.forward` and
//! `Gemma4MultimodalEmbedder.forward` leave saved for backward, tensor by tensor, by the autograd
//! rules of each op the modelling code runs. The tower always runs over the processor's padded
//! `max_soft_tokens · pooling²` patches (`ImageCost::tower_seq`), whatever the image's size.
//!
//! Widths: the residual stream is in the parameters' dtype (`Numerics::param`; fp32 under
//! autocast, where `hidden + position_embeddings` promotes the 16-bit `input_proj` output);
//! linear outputs in `Numerics::compute`; `Gemma4RMSNorm` computes in fp32
//! (`hidden_states.float()`). The attention is the CPU SDPA path the measured steps run
//! (`validation/cpu-measured-gemma4vis.json`): its output is laid out `[b, n, heads, d]`, so the
//! `transpose(1, 2).contiguous()` before `o_proj` is the same tensor, and the padding mask is
//! turned into a float mask `[b, 1, n, n]` in the attention dtype by every layer's call.

use super::blocks::Numerics;
use super::overhead::round_size;
use super::stages::StageMemory;
use crate::vision::{ImageCost, TowerKind, Vision};

/// One micro-batch of tower images: how many and how long (patches, padding included).
#[derive(Clone, Copy)]
pub(super) struct Run {
    pub images: u64,
    pub cost: ImageCost,
}

/// The tower's shape in the terms the saved set needs.
struct Shape {
    /// Rows: tower images × padded patches.
    n: u64,
    hidden: u64,
    q: u64,
    kv: u64,
    ffn: u64,
    heads: u64,
    kv_heads: u64,
    clipped: bool,
}

fn shape(v: &Vision, run: Run) -> Shape {
    let t = &v.tower;
    let (kv_heads, head_dim, clipped) = match t.kind {
        TowerKind::Gemma4 {
            kv_heads,
            head_dim,
            clipped,
            ..
        } => (kv_heads, head_dim, clipped),
        _ => (t.heads, t.hidden / t.heads.max(1), false),
    };
    Shape {
        n: run.images.saturating_mul(run.cost.tower_seq),
        hidden: t.hidden,
        q: t.heads * head_dim,
        kv: kv_heads * head_dim,
        ffn: t.ffn,
        heads: t.heads,
        kv_heads,
        clipped,
    }
}

/// `Gemma4RMSNorm.forward` over `rows × width` values of `in_width` bytes: `_norm` saves its
/// fp32 input (`hidden_states.float()`: the input itself when it is fp32, else a copy) for
/// `pow(2)`, the fp32 mean square and its `torch.pow(·, -0.5)` per row for the multiply, and,
/// with a scale, the normalised fp32 values for `* self.weight.float()`.
fn rms_norm_saved(rows: u64, width: u64, scale: bool) -> u64 {
    let values = round_size(rows.saturating_mul(width) * 4);
    let stats = 2 * round_size(rows * 4);
    values + stats + if scale { values } else { 0 }
}

/// A norm whose output feeds `consumers` linears (`input_layernorm` → q/k/v,
/// `pre_feedforward_layernorm` → gate/up): the output, `type_as` the stream, is saved once by
/// all of them; under autocast each linear saves its own 16-bit cast of it instead.
fn norm_into_linears(s: &Shape, num: Numerics, consumers: u64) -> u64 {
    let out = if num.autocast {
        consumers * round_size(s.n * s.hidden * 2)
    } else {
        round_size(s.n * s.hidden * num.param)
    };
    rms_norm_saved(s.n, s.hidden, true) + out
}

/// `Gemma4VisionAttention.forward`: `q_norm`/`k_norm` (with scale) and the weightless `v_norm`
/// over `head_dim` per head; the 2-D rotary multiplies save only the shared `cos`/`sin`; SDPA
/// saves its query, key and value in the attention dtype (under autocast, 16-bit casts of the
/// rotated fp32 query and key — `q · cos` promotes — and the `v_norm` output, `type_as` the
/// 16-bit projection), its output (which `o_proj` reads as it is), the fp32 log-sum-exp
/// `[b, heads, n]` and the float padding mask `[b, 1, n, n]`.
fn attention_saved(s: &Shape, num: Numerics, per_image: u64) -> u64 {
    let a = if num.autocast { 2 } else { num.compute };
    let qn = rms_norm_saved(s.n * s.heads, s.q / s.heads.max(1), true);
    let kn = rms_norm_saved(s.n * s.kv_heads, s.kv / s.kv_heads.max(1), true);
    let vn = rms_norm_saved(s.n * s.kv_heads, s.kv / s.kv_heads.max(1), false);
    let sdpa = 2 * round_size(s.n * s.q * a)
        + 2 * round_size(s.n * s.kv * a)
        + round_size(s.n * s.heads * 4);
    let images = s.n / per_image.max(1);
    let mask = round_size(images.saturating_mul(per_image).saturating_mul(per_image) * a);
    qn + kn + vn + sdpa + mask
}

/// `Gemma4VisionMLP.forward`: `gate_proj`'s output (saved by the GELU), the GELU's output and
/// `up_proj`'s (saved by the product), the product (saved by `down_proj`), each `ffn` wide in
/// the compute dtype.
fn mlp_saved(s: &Shape, num: Numerics) -> u64 {
    4 * round_size(s.n * s.ffn * num.compute)
}

/// `Gemma4ClippableLinear` with `use_clipped_linears`: `torch.clamp` with tensor bounds saves
/// its input, so each of the layer's seven linears keeps its clamped input and its unclamped
/// output beside what the layer keeps without clipping.
fn clipping_saved(s: &Shape, num: Numerics) -> u64 {
    if !s.clipped {
        return 0;
    }
    let c = num.compute;
    let w = |x: u64| round_size(s.n * x * c);
    // q/k/v: input hidden, outputs q/kv/kv; o: q → hidden; gate/up: hidden → ffn; down.
    3 * w(s.hidden)
        + w(s.q)
        + 2 * w(s.kv)
        + w(s.q)
        + w(s.hidden)
        + 2 * (w(s.hidden) + w(s.ffn))
        + w(s.ffn)
        + w(s.hidden)
}

/// One `Gemma4VisionEncoderLayer`'s saved bytes in training (its input stream included: the
/// input norm saves it, as fp32 — the stream itself in fp32 and under autocast, a copy in pure
/// 16 bit): `input_layernorm` into q/k/v, the attention, `post_attention_layernorm` over
/// `o_proj`'s output (its output only feeds the residual add), `pre_feedforward_layernorm`
/// into gate/up, the MLP, `post_feedforward_layernorm` over `down_proj`'s output.
fn layer_saved(s: &Shape, num: Numerics, per_image: u64) -> u64 {
    norm_into_linears(s, num, 3)
        + attention_saved(s, num, per_image)
        + rms_norm_saved(s.n, s.hidden, true)
        + norm_into_linears(s, num, 2)
        + mlp_saved(s, num)
        + rms_norm_saved(s.n, s.hidden, true)
        + clipping_saved(s, num)
}

/// Autocast's 16-bit copies of the layer's seven weights, saved by their linears when the fp32
/// weights train.
fn layer_weight_copies(s: &Shape, num: Numerics) -> u64 {
    if !(num.autocast && num.param == 4) {
        return 0;
    }
    let h = s.hidden;
    [
        h * s.q,
        h * s.kv,
        h * s.kv,
        s.q * h,
        h * s.ffn,
        h * s.ffn,
        s.ffn * h,
    ]
    .iter()
    .map(|e| round_size(e * 2))
    .sum()
}

/// Before the layers (`Gemma4VisionPatchEmbedder.forward`, `Gemma4VisionEncoder.forward`): the
/// rescaled pixels `2 · (pixel_values − 0.5)` that `input_proj` saves for its weight's gradient
/// (its 16-bit cast under autocast or pure 16 bit; the pixels need no gradient, so its weight is
/// not saved), the clamped int64 `(x, y)` positions
/// the two embedding lookups save, the padding mask `torch.where` saves, and the rotary `cos`
/// and `sin` `[b, n, head_dim]` in the stream's dtype (`Gemma4VisionRotaryEmbedding.forward`:
/// `.to(x.dtype)`), saved by every layer's rotary multiplies.
fn inputs_saved(v: &Vision, s: &Shape, num: Numerics) -> u64 {
    let px = v.tower.channels * v.tower.patch * v.tower.patch;
    let sixteen = num.autocast || num.param == 2;
    let pixels = round_size(s.n * px * if sixteen { 2 } else { 4 });
    let head_dim = s.q / s.heads.max(1);
    let positions = round_size(s.n * 2 * 8) + round_size(s.n);
    pixels + positions + 2 * round_size(s.n * head_dim * num.param)
}

/// After the layers: `Gemma4VisionPooler._avg_pool_by_positions`' one-hot weights
/// `[b, soft, n]` in fp32 (16-bit under autocast, the matmul's cast), saved by the matmul for
/// the hidden states' gradient; the valid-token mask; `std_scale` saved by the standardising
/// multiply; and `embed_vision`: the weightless RMS norm over the `tokens` real soft tokens
/// (fp32 under autocast and fp32 training: `.to(inputs_embeds.dtype)`) and the projection's
/// input.
fn pooler_and_embedder(v: &Vision, s: &Shape, num: Numerics, run: Run, out: u64) -> u64 {
    let TowerKind::Gemma4 {
        pooling,
        standardize,
        ..
    } = v.tower.kind
    else {
        return 0;
    };
    let soft = run.cost.tower_seq / (pooling * pooling).max(1);
    let a = if num.autocast { 2 } else { 4 };
    let one_hot = round_size(s.n.saturating_mul(soft) * a);
    let tokens = run.images * run.cost.tokens.saturating_sub(2);
    let std = if standardize {
        round_size(s.hidden * 4)
    } else {
        0
    };
    // The norm's output: saved by the projection as it is, or as its 16-bit cast (with the
    // weight's) under autocast.
    let output = if num.autocast {
        round_size(tokens * s.hidden * 2) + round_size(s.hidden * out * 2)
    } else {
        round_size(tokens * s.hidden * num.param)
    };
    let norm = rms_norm_saved(tokens, s.hidden, false) + output;
    one_hot + round_size(run.images * soft) + std + norm
}

/// What the tower and embedder keep and their top, for one micro-batch of images. Training
/// keeps every layer's saved set (under checkpointing, each layer's input stream only, and one
/// layer's set again while it is recomputed); a frozen tower under a training embedder keeps
/// only the embedder's; inference keeps nothing past the forward. The top adds one layer's
/// widest transient, the fp32 GELU of `gate_proj`'s output.
pub(super) fn tower_forward(
    v: &Vision,
    num: Numerics,
    run: Run,
    (trains, proj_trains, ckpt): (bool, bool, bool),
    lm_hidden: u64,
) -> StageMemory {
    let s = shape(v, run);
    let per_layer = layer_saved(&s, num, run.cost.tower_seq) + layer_weight_copies(&s, num);
    let stream = round_size(s.n * s.hidden * num.param);
    let layers = v.tower.layers;
    let tail = pooler_and_embedder(v, &s, num, run, lm_hidden);
    let transient = 2 * round_size(s.n * s.ffn * 4);
    if !trains {
        let kept = if proj_trains { tail } else { 0 };
        let live = inputs_saved(v, &s, num) + 2 * stream + per_layer;
        return StageMemory {
            kept,
            peak: kept.max(live + transient),
            weight_copies: 0,
        };
    }
    let inputs = inputs_saved(v, &s, num);
    let body = if ckpt {
        layers * stream
    } else {
        layers * per_layer
    };
    let kept = inputs + body + tail;
    let recompute = if ckpt { per_layer } else { 0 };
    StageMemory {
        kept,
        peak: kept + recompute + transient,
        weight_copies: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::activations::plain as num;
    use crate::vision::{ImageTokens, Projector, Tower};

    /// The measured tiny tower (`validation/specs/cpu-tiny-gemma4vis-*.json`): 128 wide, 2
    /// heads and 2 KV heads of 64, MLP 256, patch 8, pooling 3, 70 soft tokens → 630 padded
    /// patches; two images (batch 2), each 64 soft tokens (+ `<boi>`, `<eoi>`).
    fn tiny() -> (Vision, Run) {
        let tower = Tower {
            kind: TowerKind::Gemma4 {
                kv_heads: 2,
                head_dim: 64,
                positions: 64,
                pooling: 3,
                clipped: false,
                standardize: true,
            },
            hidden: 128,
            layers: 2,
            layers_used: 2,
            heads: 2,
            ffn: 256,
            gated: true,
            norm: crate::model::NormKind::RmsNorm,
            activation: "gelu_pytorch_tanh".into(),
            channels: 3,
            patch: 8,
            temporal_patch: 1,
            position_rows: 0,
            window_patches: None,
            full_attention_layers: Vec::new(),
        };
        let v = Vision {
            family: "gemma4".into(),
            tower,
            projector: Projector::Gemma4 { out: 256 },
            tokens: ImageTokens::Gemma4 {
                patch: 8,
                pooling: 3,
                max_soft_tokens: 70,
            },
        };
        let cost = ImageCost {
            tokens: 66,
            tower_images: 1,
            tower_seq: 630,
        };
        (v, Run { images: 2, cost })
    }

    /// One layer by hand, n = 2 · 630 = 1,260 rows; allocations rounded up to 512 B.
    /// fp32: E = 1,260 · 128 · 4 = 645,120 (q, k and v are as wide). Saved: the stream, the
    /// input norm's normalised values and output (3E); q and its normalised values, k and its
    /// (4E), v (E); SDPA's rotated q and k, the `v_norm` output, its output (4E); the post-
    /// attention norm's input and values (2E); the stream before the MLP, its norm's values and
    /// output (3E); the post-MLP norm's input and values (2E): 19E = 12,257,280. The MLP 4 ·
    /// 1,260 · 256 · 4 = 5,160,960; the float mask 2 · 630² · 4 = 3,175,200 → 3,175,424; row
    /// statistics: four norms 2 · 5,040 → 8 · 5,120 = 40,960; q/k/v norms 2 · 10,080 each and
    /// the log-sum-exp 10,080 → 7 · 10,240 = 71,680. Sum 20,706,304 (the saved-tensor hooks of
    /// transformers 5.24's layer, unrounded: 20,704,320).
    ///
    /// bf16 autocast: thirteen fp32 E (the stream twice, the four norms' fp32 inputs and values,
    /// q/k/v's fp32 copies and q/k's values: 2 + 2 + 2 + 2 + 2 + 2 + 1 = 13) = 8,386,560; nine
    /// 16-bit half-E (three casts of the input norm's output, SDPA's q, k, v and output, two
    /// casts of the MLP norm's output) = 2,903,040; the MLP 4 · 645,120 = 2,580,480; the mask
    /// in bf16 1,587,600 → 1,587,712; statistics 40,960 + 71,680. Sum 15,570,432; plus the
    /// seven 16-bit weight copies 4 · 32,768 + 3 · 65,536 = 327,680 (hooks, unrounded:
    /// 15,896,240 with the copies).
    #[test]
    fn one_layer_by_hand() {
        let (v, run) = tiny();
        let s = shape(&v, run);
        assert_eq!(layer_saved(&s, num(4, 4, false), 630), 20_706_304);
        let mixed = num(4, 2, true);
        assert_eq!(layer_saved(&s, mixed, 630), 15_570_432);
        assert_eq!(layer_weight_copies(&s, mixed), 327_680);
    }

    /// The rest of the tower in fp32 by hand: the rescaled pixels 1,260 · 192 · 4 = 967,680,
    /// the int64 positions 1,260 · 2 · 8 = 20,160 → 20,480, the padding mask 1,260 B → 1,536,
    /// cos and sin 2 · 1,260 · 64 · 4 = 645,120: 1,634,816. After the layers: the one-hot
    /// weights 2 · 70 · 630 · 4 = 352,800 → 353,280; the valid mask 140 → 512; `std_scale`
    /// 512; the embedder's norm over 128 soft tokens: its input 65,536, statistics 2 · 512,
    /// its output 65,536: 486,400 in all. With both layers: 1,634,816 + 2 · 20,706,304 +
    /// 486,400 = 43,533,824 (hooks, unrounded: 43,528,408).
    #[test]
    fn whole_tower_by_hand() {
        let (v, run) = tiny();
        let m = tower_forward(&v, num(4, 4, false), run, (true, true, false), 256);
        assert_eq!(m.kept, 43_533_824);
    }
}
