//! Which weights sit on the GPU while a pipeline runs, under diffusers' offload modes.

pub use super::job::Offload;
use super::{Arch, Pipeline};

impl Offload {
    /// Parses `none` / `model` / `sequential`.
    pub fn parse(s: &str) -> Option<Offload> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Some(Offload::None),
            "model" => Some(Offload::Model),
            "sequential" => Some(Offload::Sequential),
            _ => None,
        }
    }
}

/// Bytes of weights resident on the GPU at the worst moment: all components, under model
/// offload the largest one, under sequential offload the largest leaf module; each parameter
/// `bytes_per_param` bytes (the pipeline's dtype).
pub fn resident_weight_bytes(p: &Pipeline, offload: Offload, bytes_per_param: u64) -> Option<u64> {
    let params = match offload {
        Offload::None => p.params_total()?,
        Offload::Model => p
            .components
            .iter()
            .map(|c| c.arch.params())
            .try_fold(0u64, |a, x| Some(a.max(x?)))?,
        Offload::Sequential => p
            .components
            .iter()
            .map(|c| largest_leaf(&c.arch))
            .try_fold(0u64, |a, x| Some(a.max(x?)))?,
    };
    params.checked_mul(bytes_per_param)
}

/// Parameters of the component's largest leaf module (a module holding parameters itself),
/// what `enable_sequential_cpu_offload` (accelerate `cpu_offload`, one `AlignDevicesHook` per
/// such module) has on the GPU at once: Flux's and SD3's `AdaLayerNormZero` linear d → 6d
/// (SD3.5's dual-attention `SD35AdaLayerNormZeroX` d → 9d) or the single block's `proj_out`
/// 5d → d; a UNet's widest up-block `conv1` over the skip concatenation (2c → c, 3×3); the
/// VAE's widest 3×3 conv; the text encoders' token embedding (or T5's feed-forward `wi`).
pub fn largest_leaf(a: &Arch) -> Option<u64> {
    let n: u128 = match a {
        Arch::Flux(c) => {
            let d = u128::from(c.heads * c.head_dim);
            (6 * d * d + 6 * d).max(5 * d * d + d)
        }
        Arch::Sd3(c) => {
            let d = u128::from(c.heads * c.head_dim);
            let k = if c.dual_attention_layers.is_empty() {
                6
            } else {
                9
            };
            k * d * d + k * d
        }
        Arch::Unet(u) => {
            let c = u128::from(u.block_out_channels.iter().copied().max().unwrap_or(0));
            2 * c * c * 9 + c
        }
        Arch::Vae(v) => {
            let c = u128::from(v.block_out_channels.iter().copied().max().unwrap_or(0));
            c * c * 9 + c
        }
        Arch::ClipText(c) => u128::from(c.vocab) * u128::from(c.hidden),
        Arch::T5Encoder(c) => {
            let wi = u128::from(c.d_model) * u128::from(c.d_ff);
            (u128::from(c.vocab) * u128::from(c.d_model)).max(wi)
        }
    };
    u64::try_from(n).ok()
}
