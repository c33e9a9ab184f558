//! The VAE encode's peak in a training step: `AutoencoderKL.encode` (diffusers
//! `models/autoencoders/autoencoder_kl.py`) running `Encoder.forward`
//! (`models/autoencoders/vae.py`) on the batch's pixels, then `latent_dist.sample()`. The
//! training scripts freeze the VAE (`vae.requires_grad_(False)`) and the pixels need no
//! gradient, so autograd saves nothing: the peak is the forward's live tensors, as in the
//! decode, at the encoder's first (full-resolution) level.
//!
//! Figures are elements per image (`u128`), times the batch and the element size by the caller.

use super::vae_decode::{mid_attention_peak, resnet_peak};
use super::Vae;

type N = u128;

/// `Downsample2D.forward` (`models/downsampling.py`, `padding=0` as `DownEncoderBlock2D` builds
/// it) of `c` channels over `area` pixels of `h × w`, with the down block's input (`held`
/// elements) referenced by `Encoder.forward`'s `sample`: the last resnet's output, its
/// `F.pad(…, (0, 1, 0, 1))` copy ((h + 1)(w + 1) pixels) and the stride-2 conv's output.
fn downsample_peak(c: N, h: N, w: N, held: N) -> N {
    held + c * (h * w + (h + 1) * (w + 1) + h.div_ceil(2) * w.div_ceil(2))
}

/// `Encoder.forward` over an image of `h × w` pixels, one image, elements: the pixels
/// (`in_channels`, held by the caller), `conv_in`, each down block's resnets (its input held by
/// `sample` after the first) and downsampler, the mid block (resnet, single-head attention,
/// resnet), `conv_norm_out`, SiLU, `conv_out` to the moments (2 × latent channels) and the
/// `quant_conv` copy; then `DiagonalGaussianDistribution` (`vae.py`): the moments, `mean` and
/// `logvar` views, the clamped `logvar`, `std`, `var`, the noise and the sample (6 latent-sized
/// tensors beside the moments).
pub fn encoder_peak(v: &Vae, h: u64, w: u64, eager: bool) -> N {
    let ch: Vec<N> = v.block_out_channels.iter().map(|&c| N::from(c)).collect();
    let Some(&first) = ch.first() else { return 0 };
    let (mut h, mut w) = (N::from(h), N::from(w));
    let x = N::from(v.in_channels) * h * w;
    let mut peak = x + first * h * w + N::from(v.in_channels) * h * w;
    let mut cin = first;
    for (i, &c) in ch.iter().enumerate() {
        let area = h * w;
        for j in 0..v.layers_per_block {
            let (rin, held) = if j == 0 { (cin, 0) } else { (c, cin * area) };
            peak = peak.max(x + resnet_peak(rin, c, area, held));
        }
        if i + 1 < ch.len() {
            let held = if v.layers_per_block > 0 {
                cin * area
            } else {
                0
            };
            peak = peak.max(x + downsample_peak(c, h, w, held));
            h = h.div_ceil(2);
            w = w.div_ceil(2);
        }
        cin = c;
    }
    let area = h * w;
    let top = cin;
    peak = peak.max(x + resnet_peak(top, top, area, top * area));
    peak = peak.max(x + mid_attention_peak(top, area, eager));
    let lat = N::from(v.latent_channels) * area;
    let quant = if v.use_quant_conv { 2 * lat } else { 0 };
    peak = peak.max(x + 2 * top * area + 2 * lat);
    peak.max(x + 2 * lat + quant + 6 * lat)
}
