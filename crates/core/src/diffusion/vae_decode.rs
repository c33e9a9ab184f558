//! The VAE decode's peak: `AutoencoderKL.decode` (diffusers
//! `models/autoencoders/autoencoder_kl.py`) running `Decoder.forward`
//! (`models/autoencoders/vae.py`) under `no_grad`, walked block by block with the tensors each
//! line of the framework keeps referenced. The decoder's last up block works at full
//! resolution, so at 1024² this is usually the whole pipeline's activation peak; VAE slicing
//! (`enable_vae_slicing`) decodes one image at a time and tiling (`enable_vae_tiling`) one
//! `sample_size` tile at a time.
//!
//! Figures are elements per image (`u128`), times the batch and the element size at the end.

use super::Vae;

type N = u128;

/// `ResnetBlock2D.forward` (`models/resnet.py`) of `cin → cout` channels over `area` pixels,
/// with `held` elements its callers keep referenced: the most alive at once. Moments: `norm1`
/// then `nonlinearity` (input, norm output, SiLU output: 3·cin); `conv1` (2·cin + cout, never
/// the most); the closing `(input_tensor + hidden_states) / output_scale_factor` with the
/// `conv_shortcut` output when `cin ≠ cout` (input, h, shortcut, sum, quotient: cin + 4·cout;
/// without a shortcut the input is `input_tensor`: cin + 3·cout).
pub fn resnet_peak(cin: N, cout: N, area: N, held: N) -> N {
    let close = if cin == cout {
        cin + 3 * cout
    } else {
        cin + 4 * cout
    };
    held + area * (3 * cin).max(close)
}

/// `Upsample2D.forward` (`models/upsampling.py`, `interpolate=True`, `use_conv=True`) of `c`
/// channels from `area` to 4·`area` pixels, the block's input (`cin` channels at `area`) held
/// by `Decoder.forward`'s `sample`: the block's last resnet output (c·area), the nearest
/// interpolation (4·c·area) and the conv output (4·c·area) live at once.
pub fn upsample_peak(cin: N, c: N, area: N) -> N {
    area * (cin + c + 8 * c)
}

/// The mid block's `Attention` with `AttnProcessor2_0` (`models/attention_processor.py`) on
/// one head of `c` channels over `area` tokens: the decoder's `sample` and the residual, the
/// group norm (kept by `encoder_hidden_states`), q, k, v, the output's two reshape copies
/// (`transpose(1, 2).reshape`, then back to 4-D), the residual sum and its rescale: 9·c at
/// the close. `eager` (`AttnProcessor`) has the `area × area` scores and their softmax live
/// beside the first six.
pub fn mid_attention_peak(c: N, area: N, eager: bool) -> N {
    let scores = if eager { 2 * area * area } else { 0 };
    (9 * c * area).max(6 * c * area + scores)
}

/// `Decoder.forward` over a latent of `lh × lw`, one image: `conv_in`, the mid block (resnet,
/// attention, resnet), the up blocks (channels reversed, `layers_per_block + 1` resnets, an
/// upsampler but after the last), `conv_norm_out`, SiLU, `conv_out`; the latent `z` (and the
/// `post_quant_conv` output) held by `AutoencoderKL._decode` throughout.
pub fn decoder_peak(v: &Vae, lh: u64, lw: u64, eager: bool) -> N {
    let ch: Vec<N> = v
        .block_out_channels
        .iter()
        .rev()
        .map(|&c| N::from(c))
        .collect();
    let Some(&top) = ch.first() else { return 0 };
    let mut area = N::from(lh) * N::from(lw);
    let z = N::from(v.latent_channels) * area * if v.use_post_quant_conv { 2 } else { 1 };
    // conv_in: z to `top` channels; the mid block's resnets hold its input as `sample`.
    let mut peak = z + resnet_peak(top, top, area, top * area);
    peak = peak.max(z + mid_attention_peak(top, area, eager));
    let mut cin = top;
    for (i, &c) in ch.iter().enumerate() {
        // The block's input stays referenced by `Decoder.forward`'s `sample` for the whole block.
        for j in 0..=v.layers_per_block {
            let (rin, held) = if j == 0 { (cin, 0) } else { (c, cin * area) };
            peak = peak.max(z + resnet_peak(rin, c, area, held));
        }
        if i + 1 < ch.len() {
            peak = peak.max(z + upsample_peak(cin, c, area));
            area *= 4;
        }
        cin = c;
    }
    // conv_norm_out, conv_act, conv_out: old and new `sample` at each rebinding.
    peak.max(z + 2 * cin * area + N::from(v.out_channels) * area)
}

/// Bytes of one image decoded at `lh × lw` latents (the output, `out_channels` at full size).
fn image_elems(v: &Vae, lh: u64, lw: u64) -> N {
    let s = N::from(v.scale_factor());
    N::from(v.out_channels) * N::from(lh) * s * N::from(lw) * s
}

/// How the decode is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeMode {
    pub tiling: bool,
    pub slicing: bool,
    pub eager: bool,
}

/// `AutoencoderKL.tiled_decode`: latent tiles of `tile_latent_min_size = sample_size / scale`
/// every `int(tile · 0.75)` latents, each decoded over the whole batch and kept in `rows`; then
/// blended in place and concatenated (the rows and the result: two images' worth). Elements for
/// a batch of `b`.
fn tiled_peak(v: &Vae, b: N, lh: u64, lw: u64, eager: bool) -> N {
    let tile = (v.sample_size / v.scale_factor()).max(1);
    let step = (tile * 3 / 4).max(1);
    let mut kept: N = 0;
    let mut peak: N = 0;
    let mut i = 0;
    while i < lh {
        let mut j = 0;
        while j < lw {
            let (th, tw) = (tile.min(lh - i), tile.min(lw - j));
            peak = peak.max(kept + b * decoder_peak(v, th, tw, eager));
            kept += b * image_elems(v, th, tw);
            j += step;
        }
        i += step;
    }
    peak.max(kept + 2 * b * image_elems(v, lh, lw))
}

/// Elements alive at the decode's worst moment for `batch` images of `lh × lw` latents:
/// `AutoencoderKL.decode` slices the batch into single images when slicing is on (decoded
/// images accumulate, then `torch.cat`), and `_decode` tiles when tiling is on and the latent
/// exceeds one tile.
pub fn decode_peak(v: &Vae, batch: u64, lh: u64, lw: u64, mode: DecodeMode) -> N {
    let tile = (v.sample_size / v.scale_factor()).max(1);
    let tiled = mode.tiling && (lh > tile || lw > tile);
    let one = |b: N| {
        if tiled {
            tiled_peak(v, b, lh, lw, mode.eager)
        } else {
            b * decoder_peak(v, lh, lw, mode.eager)
        }
    };
    let b = N::from(batch);
    if mode.slicing && batch > 1 {
        let img = image_elems(v, lh, lw);
        (one(1) + (b - 1) * img).max(2 * b * img)
    } else {
        one(b)
    }
}
