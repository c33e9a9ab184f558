//! The denoiser's activation peak in one `no_grad` forward: the most bytes alive at once,
//! walked through the framework's forward line by line (which tensors each line keeps
//! referenced). Transformers (Flux, SD3) peak inside one block over the joint sequence of text
//! and image tokens; the UNet at its largest-resolution levels, with the skip connections of
//! the down path held until the up path consumes them.

use super::vae_decode::{resnet_peak, upsample_peak};
use super::{Flux, Sd3, Unet};

type N = u128;

/// What the forward runs on: images in the batch (after CFG doubling), image tokens (Flux /
/// SD3 after patching; the latent grid for a UNet), text tokens, element size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub batch: u64,
    /// Latent grid rows and columns (before patching).
    pub latent_h: u64,
    pub latent_w: u64,
    pub text_tokens: u64,
    pub elem: u64,
    /// `attention: eager`: the S×S scores and their softmax are materialized.
    pub eager: bool,
}

/// `apply_rotary_emb` (`models/embeddings.py`, `use_real_unbind_dim=-1`) on a `[S, d]` query
/// or key: `x_rotated` (element size `e`), then `x.float() * cos`, `x_rotated.float() * sin`
/// and their sum in fp32 live together — `e + 12` bytes per element (in fp32 `.float()` is no
/// copy: 16). Bytes per element of `S × d`.
pub fn rope_bytes_per_elem(e: u64) -> N {
    N::from(e) + 12
}

/// Bytes of the eager scores and softmax of `heads` over `s` tokens, one image.
fn scores(heads: u64, s: N, e: u64, eager: bool) -> N {
    if eager {
        2 * N::from(heads) * s * s * N::from(e)
    } else {
        0
    }
}

/// `FluxTransformerBlock.forward` (`models/transformers/transformer_flux.py`), one image,
/// bytes. Attention (`FluxAttnProcessor`): the block inputs and both AdaLayerNormZero outputs
/// (2S), the text q/k/v kept by their names (3T), the joint q/k/v after `torch.cat` (3S) and
/// the rotary embedding's temporaries. Feed-forward: inputs N + T, `norm_encoder_hidden_states`,
/// `context_attn_output`, the attention's own output (still referenced by the
/// `attention_outputs` tuple) and its gated copy, the new `hidden_states`, its modulated norm
/// (T + T + N + N + N + N) and the GELU MLP's `proj` and activation (8N): 13N + 3T.
pub fn flux_double_peak(c: &Flux, n: N, t: N, e: u64, eager: bool) -> N {
    let d = N::from(c.heads * c.head_dim);
    let s = n + t;
    let attn = d * (N::from(e) * (5 * s + 3 * t) + rope_bytes_per_elem(e) * s)
        + scores(c.heads, s, e, eager);
    let ff = d * N::from(e) * (13 * n + 3 * t);
    attn.max(ff)
}

/// `FluxSingleTransformerBlock.forward`, one image, bytes, S joint tokens: the previous block's
/// output (held by the caller's names), `residual` (the `torch.cat`), the norm, the MLP (4S)
/// stay referenced to the end; attention adds q/k/v and the rotary temporaries; the close
/// `gate * proj_out(cat([attn, mlp]))` has the attention output, the 5S concatenation, the
/// projection and the product alive: 15S.
pub fn flux_single_peak(c: &Flux, s: N, e: u64, eager: bool) -> N {
    let d = N::from(c.heads * c.head_dim);
    let attn =
        d * (N::from(e) * 10 * s + rope_bytes_per_elem(e) * s) + scores(c.heads, s, e, eager);
    attn.max(d * N::from(e) * 15 * s)
}

/// Flux's forward, bytes for the whole batch: the packed latents (`in_channels` a token) and
/// T5's prompt embeddings (`joint_attention_dim`) the pipeline passes in, the position ids
/// (`txt_ids`, `img_ids` and their `torch.cat`: 2 × S × 3), the rotary table (cos and sin,
/// fp32, S × head_dim each, no batch) and the larger block peak.
pub fn flux_peak(c: &Flux, sh: &Shape) -> N {
    let n = N::from(sh.latent_h / 2) * N::from(sh.latent_w / 2);
    let t = N::from(sh.text_tokens);
    let b = N::from(sh.batch);
    let e = sh.elem;
    let inputs = b * N::from(e) * (n * N::from(c.in_channels) + t * N::from(c.joint_attention_dim));
    let ids = 2 * (n + t) * 3 * N::from(e);
    let rope = 2 * 4 * (n + t) * N::from(c.head_dim) + ids;
    let mut block = 0;
    if c.layers > 0 {
        block = flux_double_peak(c, n, t, e, sh.eager);
    }
    if c.single_layers > 0 {
        block = block.max(flux_single_peak(c, n + t, e, sh.eager));
    }
    inputs + rope + b * block
}

/// `JointTransformerBlock.forward` (`models/attention.py`) with `JointAttnProcessor2_0`, one
/// image, bytes: attention holds the inputs and norms (2S), the text projections by name (3T),
/// the joint q/k/v and the output (4S); the feed-forward moment is Flux's less the tuple-held output (the block unpacks
/// `self.attn(...)` at once): 12N + 3T. SD3.5's
/// dual-attention layers keep `norm_hidden_states2` and `attn_output2` as well (+2N).
pub fn sd3_block_peak(c: &Sd3, n: N, t: N, e: u64, eager: bool, dual: bool) -> N {
    let d = N::from(c.heads * c.head_dim);
    let s = n + t;
    let extra = if dual { 2 * n } else { 0 };
    let attn = d * N::from(e) * (6 * s + 3 * t + extra) + scores(c.heads, s, e, eager);
    attn.max(d * N::from(e) * (12 * n + 3 * t + extra))
}

/// SD3's forward, bytes for the batch: the latent and the joint prompt embeddings passed in,
/// and the block peak (a dual-attention block where the config lists one).
pub fn sd3_peak(c: &Sd3, sh: &Shape) -> N {
    let p = N::from(c.patch_size.max(1));
    let n = N::from(sh.latent_h) * N::from(sh.latent_w) / (p * p);
    let t = N::from(sh.text_tokens);
    let b = N::from(sh.batch);
    let e = sh.elem;
    let inputs = b
        * N::from(e)
        * (N::from(sh.latent_h) * N::from(sh.latent_w) * N::from(c.in_channels)
            + t * N::from(c.joint_attention_dim));
    let dual = !c.dual_attention_layers.is_empty();
    let block = sd3_block_peak(c, n, t, e, sh.eager, dual);
    inputs + b * block
}

/// `Transformer2DModel` with `BasicTransformerBlock`s (`models/attention.py`) on `c` channels
/// over `a` tokens, elements: at the GEGLU feed-forward's product the residual, the block
/// input, the new hidden state, `attn_output`, `norm_hidden_states` (5c), GEGLU's projection
/// (8c), `gelu(gate)` and the product (4c + 4c): 21c. Eager self-attention: six of those and
/// the scores of `c / 64` heads.
pub fn unet_transformer_peak(c: N, a: N, eager: bool) -> N {
    let s = if eager {
        2 * (c / 64).max(1) * a * a
    } else {
        0
    };
    (21 * c * a).max(6 * c * a + s)
}

/// The skip connections the down path of `UNet2DConditionModel.forward` pushes
/// (`down_block_res_samples`): `conv_in`'s output, each down resnet's (or its transformer's)
/// output, each downsampler's; `(channels, area)` in push order, one image.
fn unet_skips(u: &Unet, a0: N) -> Vec<(N, N)> {
    let ch: Vec<N> = u.block_out_channels.iter().map(|&c| N::from(c)).collect();
    let mut out = vec![(ch[0], a0)];
    let mut a = a0;
    for (l, &c) in ch.iter().enumerate() {
        for _ in 0..u.layers_per_block {
            out.push((c, a));
        }
        if l + 1 < ch.len() {
            a /= 4;
            out.push((c, a));
        }
    }
    out
}

/// UNet's forward, bytes for the batch: the mid block and the up path, where every up block
/// holds the skips not yet consumed (its own until it returns), its input (`sample`), and runs
/// resnets on `torch.cat([hidden, skip])`, transformers where its level has cross-attention,
/// and an upsampler but at the top. The down path holds fewer skips over the same tensors.
pub fn unet_peak(u: &Unet, sh: &Shape) -> N {
    let ch: Vec<N> = u.block_out_channels.iter().map(|&c| N::from(c)).collect();
    let n = ch.len();
    if n == 0 {
        return 0;
    }
    let a0 = N::from(sh.latent_h) * N::from(sh.latent_w);
    let mut skips = unet_skips(u, a0);
    let bank = |s: &[(N, N)]| s.iter().map(|(c, a)| c * a).sum::<N>();
    let mut a = a0 >> (2 * (n as u32 - 1)).min(120);
    let last = ch[n - 1];
    let cross = |l: usize| u.down_cross.get(l).copied().unwrap_or(false);
    let mut peak = bank(&skips) + resnet_peak(last, last, a, last * a);
    if cross(n - 1) {
        peak = peak.max(bank(&skips) + last * a + unet_transformer_peak(last, a, sh.eager));
    }
    let mut prev = last;
    for i in 0..n {
        let l = n - 1 - i;
        let c = ch[l];
        let take = (u.layers_per_block as usize + 1).min(skips.len());
        let mine: Vec<(N, N)> = skips.split_off(skips.len() - take);
        let held = bank(&skips) + bank(&mine) + prev * a;
        for (j, &(sc, _)) in mine.iter().rev().enumerate() {
            let cin = if j == 0 { prev } else { c };
            peak = peak.max(held + resnet_peak(cin + sc, c, a, 0));
            if cross(l) {
                peak = peak.max(held + unet_transformer_peak(c, a, sh.eager));
            }
        }
        if i + 1 < n {
            peak = peak.max(held - prev * a + upsample_peak(prev, c, a));
            a *= 4;
        }
        prev = c;
    }
    let inputs = N::from(u.in_channels) * a0 * N::from(sh.elem) * N::from(sh.batch);
    inputs + N::from(sh.batch) * N::from(sh.elem) * peak
}
