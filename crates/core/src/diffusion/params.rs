//! Exact parameter counts of the diffusers pipeline components, each from its config as the
//! framework's module builds it (every count equals `sum(p.numel() for p in
//! model.parameters())` of the class built on the meta device; see the tests).

use super::{ClipText, Flux, Sd3, T5Encoder, Unet, Vae};

/// Counts are summed in u128 (no config the readers accept overflows it) and checked into u64
/// at the end.
type N = u128;

fn w(x: u64) -> N {
    N::from(x)
}

/// The count as u64, `None` past it.
pub fn checked(n: N) -> Option<u64> {
    u64::try_from(n).ok()
}

/// `nn.Linear(i, o, bias)`.
fn lin(i: N, o: N, bias: bool) -> N {
    i * o + if bias { o } else { 0 }
}

/// `nn.Conv2d(i, o, k)` with a bias.
fn conv(i: N, o: N, k: N) -> N {
    i * o * k * k + o
}

/// `nn.GroupNorm(_, c)` / `nn.LayerNorm(c)`: weight and bias.
fn norm(c: N) -> N {
    2 * c
}

/// `TimestepEmbedding(i, d)`: `linear_1` then `linear_2` (`diffusers/models/embeddings.py`).
fn timestep_embedding(i: N, d: N) -> N {
    lin(i, d, true) + lin(d, d, true)
}

/// `FeedForward(dim, mult=4)` with GELU (`attention.py`): `proj` d→4d, out 4d→d.
fn feed_forward(d: N) -> N {
    lin(d, 4 * d, true) + lin(4 * d, d, true)
}

/// `FluxTransformer2DModel` (`diffusers/models/transformers/transformer_flux.py`): the
/// timestep (+ guidance) and pooled-text embeddings, `context_embedder`, `x_embedder`, 19
/// double-stream blocks (two AdaLayerNormZero, joint attention with RMS q/k norms on both
/// streams, two GELU MLPs) and 38 single-stream blocks (AdaLayerNormZeroSingle, q/k/v without
/// an output projection, `proj_mlp`, `proj_out` over attention ‖ MLP), `norm_out`, `proj_out`.
pub fn flux(c: &Flux) -> N {
    let d = w(c.heads) * w(c.head_dim);
    let hd = w(c.head_dim);
    let time = timestep_embedding(256, d);
    let guidance = if c.guidance_embeds { time } else { 0 };
    let text = lin(w(c.pooled_projection_dim), d, true) + lin(d, d, true);
    let p2 = w(c.patch_size) * w(c.patch_size);
    let top = time
        + guidance
        + text
        + lin(w(c.joint_attention_dim), d, true)
        + lin(w(c.in_channels), d, true)
        + lin(d, 2 * d, true)
        + lin(d, p2 * w(c.out_channels), true);
    let double = 2 * lin(d, 6 * d, true) + 4 * hd + 8 * lin(d, d, true) + 2 * feed_forward(d);
    let single = lin(d, 3 * d, true)
        + lin(d, 4 * d, true)
        + lin(5 * d, d, true)
        + 2 * hd
        + 3 * lin(d, d, true);
    top + w(c.layers) * double + w(c.single_layers) * single
}

/// `SD3Transformer2DModel` (`transformer_sd3.py`, `JointTransformerBlock` in `attention.py`):
/// the patch embedding (a conv; its `pos_embed` is a buffer), timestep and pooled-text
/// embeddings, `context_embedder`, joint blocks — the last one `context_pre_only` (an
/// AdaLayerNormContinuous on the context, no context output or MLP), the `dual_attention_layers`
/// with `SD35AdaLayerNormZeroX` (9·d) and a second self-attention — and the output head.
pub fn sd3(c: &Sd3) -> N {
    let d = w(c.heads) * w(c.head_dim);
    let hd = w(c.head_dim);
    let qk = if c.qk_norm { 2 * hd } else { 0 };
    let p2 = w(c.patch_size) * w(c.patch_size);
    let top = w(c.in_channels) * d * p2
        + d
        + timestep_embedding(256, d)
        + lin(w(c.pooled_projection_dim), d, true)
        + lin(d, d, true)
        + lin(w(c.joint_attention_dim), w(c.caption_projection_dim), true)
        + lin(d, 2 * d, true)
        + lin(d, p2 * w(c.out_channels), true);
    let mut total = top;
    for i in 0..c.layers {
        let last = i + 1 == c.layers;
        let dual = c.dual_attention_layers.contains(&i);
        let mut b = lin(d, if dual { 9 } else { 6 } * d, true);
        b += lin(d, if last { 2 } else { 6 } * d, true);
        // attn: to_q/k/v/to_out, add_q/k/v, to_add_out unless pre-only; q/k norms both streams.
        b += 2 * qk + 7 * lin(d, d, true) + if last { 0 } else { lin(d, d, true) };
        if dual {
            b += qk + 4 * lin(d, d, true);
        }
        b += feed_forward(d) + if last { 0 } else { feed_forward(d) };
        total += b;
    }
    total
}

/// `ResnetBlock2D` (`diffusers/models/resnet.py`): two GroupNorm + 3×3 convs, a 1×1 shortcut
/// when the channels change, and `time_emb_proj` when a timestep embedding of `temb` enters.
fn resnet(i: N, o: N, temb: Option<N>) -> N {
    let shortcut = if i == o { 0 } else { conv(i, o, 1) };
    norm(i)
        + conv(i, o, 3)
        + norm(o)
        + conv(o, o, 3)
        + shortcut
        + temb.map_or(0, |t| lin(t, o, true))
}

/// The VAE's mid block (`UNetMidBlock2D`): two resnets around one single-head attention with a
/// GroupNorm and biased q/k/v/out.
fn vae_mid(c: N) -> N {
    2 * resnet(c, c, None) + norm(c) + 4 * lin(c, c, true)
}

/// `AutoencoderKL` (`autoencoders/autoencoder_kl.py`, `vae.py` `Encoder`/`Decoder`): encoder
/// down blocks of `layers_per_block` resnets and a 3×3 downsampling conv (not after the last),
/// mid block, `conv_out` to 2·latent channels; `quant_conv` / `post_quant_conv` (1×1) when
/// enabled; decoder up blocks of `layers_per_block + 1` resnets and an upsampling conv.
pub fn vae(c: &Vae) -> N {
    let ch: Vec<N> = c.block_out_channels.iter().map(|&x| w(x)).collect();
    let (Some(&first), Some(&last)) = (ch.first(), ch.last()) else {
        return 0;
    };
    let n = ch.len();
    let mut enc = conv(w(c.in_channels), first, 3);
    let mut prev = first;
    for (i, &o) in ch.iter().enumerate() {
        for l in 0..c.layers_per_block {
            enc += resnet(if l == 0 { prev } else { o }, o, None);
        }
        prev = o;
        if i + 1 < n {
            enc += conv(o, o, 3);
        }
    }
    let lat = w(c.latent_channels);
    enc += vae_mid(last) + norm(last) + conv(last, 2 * lat, 3);
    let mut dec = conv(lat, last, 3) + vae_mid(last);
    let mut prev = last;
    for (i, &o) in ch.iter().rev().enumerate() {
        for l in 0..=c.layers_per_block {
            dec += resnet(if l == 0 { prev } else { o }, o, None);
        }
        prev = o;
        if i + 1 < n {
            dec += conv(o, o, 3);
        }
    }
    dec += norm(first) + conv(first, w(c.out_channels), 3);
    let quant = if c.use_quant_conv {
        conv(2 * lat, 2 * lat, 1)
    } else {
        0
    } + if c.use_post_quant_conv {
        conv(lat, lat, 1)
    } else {
        0
    };
    enc + dec + quant
}

/// `BasicTransformerBlock` as `Transformer2DModel` builds it in a cross-attention UNet block
/// (`attention.py`): three LayerNorms, self-attention (q/k/v without bias), cross-attention
/// (k/v from `cross` channels), a GEGLU feed-forward (d→8d, 4d→d).
fn unet_transformer_block(d: N, cross: N) -> N {
    3 * norm(d)
        + 3 * lin(d, d, false)
        + lin(d, d, true)
        + lin(d, d, false)
        + 2 * lin(cross, d, false)
        + lin(d, d, true)
        + lin(d, 8 * d, true)
        + lin(4 * d, d, true)
}

/// `Transformer2DModel` with `use_linear_projection` (`transformers/transformer_2d.py`):
/// GroupNorm, `proj_in`, `layers` blocks, `proj_out` (the inner width equals the channels:
/// heads × head dim = channels in these UNets).
fn unet_transformer(c: N, layers: N, cross: N, linear: bool) -> N {
    let proj = if linear {
        lin(c, c, true)
    } else {
        conv(c, c, 1)
    };
    norm(c) + 2 * proj + layers * unet_transformer_block(c, cross)
}

/// `UNet2DConditionModel` (`unets/unet_2d_condition.py`, blocks in `unet_2d_blocks.py`):
/// `conv_in`, the time embedding (4 × the first width), the `text_time` added embedding when
/// configured, down blocks (resnets with `time_emb_proj`, transformers in the cross-attention
/// ones, a downsampling conv but after the last), the cross-attention mid block, up blocks
/// of `layers_per_block + 1` resnets over the skip concatenations, and the output head.
pub fn unet(c: &Unet) -> N {
    let ch: Vec<N> = c.block_out_channels.iter().map(|&x| w(x)).collect();
    let n = ch.len();
    let (Some(&first), Some(&last)) = (ch.first(), ch.last()) else {
        return 0;
    };
    let t = 4 * first;
    let temb = Some(t);
    let mut total = conv(w(c.in_channels), first, 3) + timestep_embedding(first, t);
    if let Some(add) = c.addition_embed_input_dim {
        total += timestep_embedding(w(add), t);
    }
    let cross = w(c.cross_attention_dim);
    let xf = |i: usize, ch: N| {
        let layers = c.transformer_layers_per_block.get(i).copied().unwrap_or(1);
        unet_transformer(ch, w(layers), cross, c.use_linear_projection)
    };
    let down_cross = |i: usize| c.down_cross.get(i).copied().unwrap_or(false);
    let mut prev = first;
    for (i, &o) in ch.iter().enumerate() {
        for l in 0..c.layers_per_block {
            total += resnet(if l == 0 { prev } else { o }, o, temb);
            if down_cross(i) {
                total += xf(i, o);
            }
        }
        prev = o;
        if i + 1 < n {
            total += conv(o, o, 3);
        }
    }
    total += 2 * resnet(last, last, temb) + xf(n - 1, last);
    let mut prev_out = last;
    for (i, &o) in ch.iter().rev().enumerate() {
        let skip_in = ch[n - 1 - (i + 1).min(n - 1)];
        let down_index = n - 1 - i;
        for j in 0..=c.layers_per_block {
            let skip = if j == c.layers_per_block { skip_in } else { o };
            let input = if j == 0 { prev_out } else { o };
            total += resnet(input + skip, o, temb);
            if down_cross(down_index) {
                total += xf(down_index, o);
            }
        }
        prev_out = o;
        if i + 1 < n {
            total += conv(o, o, 3);
        }
    }
    total + norm(first) + conv(first, w(c.out_channels), 3)
}

/// transformers `CLIPTextModel` (`models/clip/modeling_clip.py`): token and position
/// embeddings, pre-LN encoder layers (biased q/k/v/out, fc1/fc2), final LayerNorm;
/// `CLIPTextModelWithProjection` adds `text_projection` (no bias).
pub fn clip_text(c: &ClipText) -> N {
    let d = w(c.hidden);
    let i = w(c.intermediate);
    let layer = 2 * norm(d) + 4 * lin(d, d, true) + lin(d, i, true) + lin(i, d, true);
    w(c.vocab) * d
        + w(c.max_positions) * d
        + w(c.layers) * layer
        + norm(d)
        + c.projection.map_or(0, |p| d * w(p))
}

/// transformers `T5EncoderModel` (`models/t5/modeling_t5.py`): the shared embedding (the
/// encoder's `embed_tokens` is the same tensor), per layer bias-free q/k/v/o and RMS norms,
/// the relative-position table in the first layer, a gated or plain feed-forward, final norm.
pub fn t5_encoder(c: &T5Encoder) -> N {
    let d = w(c.d_model);
    let inner = w(c.heads) * w(c.d_kv);
    let ff = if c.gated { 3 } else { 2 } * d * w(c.d_ff);
    let layer = 4 * d * inner + d + ff + d;
    w(c.vocab) * d + w(c.layers) * layer + w(c.buckets) * w(c.heads) + d
}
