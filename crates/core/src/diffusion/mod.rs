//! Diffusion pipelines (diffusers): a pipeline is several models — a denoiser (UNet or DiT
//! transformer), text encoders and a VAE — each read from its own `config.json` and listed in
//! the repository's `model_index.json`. This module holds their typed shapes, exact parameter
//! counts, the latent geometry of a resolution and which weights sit on the GPU under
//! diffusers' offload modes. Pure: no I/O.

pub mod denoise;
pub mod estimate;
pub mod fit;
pub mod job;
pub mod params;
pub mod report;
pub mod residency;
pub mod text;
pub mod train;
pub mod train_job;
pub mod train_saved;
pub mod vae_decode;
pub mod vae_encode;

/// `FluxTransformer2DModel`'s config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flux {
    pub patch_size: u64,
    pub in_channels: u64,
    pub out_channels: u64,
    pub layers: u64,
    pub single_layers: u64,
    pub head_dim: u64,
    pub heads: u64,
    pub joint_attention_dim: u64,
    pub pooled_projection_dim: u64,
    pub guidance_embeds: bool,
}

/// `SD3Transformer2DModel`'s config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sd3 {
    pub patch_size: u64,
    pub in_channels: u64,
    pub out_channels: u64,
    pub layers: u64,
    pub head_dim: u64,
    pub heads: u64,
    pub joint_attention_dim: u64,
    pub caption_projection_dim: u64,
    pub pooled_projection_dim: u64,
    pub dual_attention_layers: Vec<u64>,
    pub qk_norm: bool,
}

/// `UNet2DConditionModel`'s config (the shapes that decide its parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unet {
    pub in_channels: u64,
    pub out_channels: u64,
    pub block_out_channels: Vec<u64>,
    /// Per down block: a cross-attention block (`CrossAttnDownBlock2D`); up blocks mirror it.
    pub down_cross: Vec<bool>,
    pub layers_per_block: u64,
    pub transformer_layers_per_block: Vec<u64>,
    pub cross_attention_dim: u64,
    pub use_linear_projection: bool,
    /// `projection_class_embeddings_input_dim` when `addition_embed_type` is `text_time` (SDXL).
    pub addition_embed_input_dim: Option<u64>,
}

/// `AutoencoderKL`'s config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vae {
    pub in_channels: u64,
    pub out_channels: u64,
    pub latent_channels: u64,
    pub block_out_channels: Vec<u64>,
    pub layers_per_block: u64,
    pub use_quant_conv: bool,
    pub use_post_quant_conv: bool,
    /// `sample_size`: the pixel tile `enable_vae_tiling` decodes at once (`tile_sample_min_size`).
    pub sample_size: u64,
    /// `force_upcast`: SDXL's pipeline decodes in fp32 when the VAE is fp16 and this is set.
    pub force_upcast: bool,
}

/// `AutoencoderKL.__init__`'s defaults (diffusers `autoencoder_kl.py`): what a config that
/// leaves a key out gets.
impl Default for Vae {
    fn default() -> Self {
        Vae {
            in_channels: 3,
            out_channels: 3,
            latent_channels: 4,
            block_out_channels: vec![64],
            layers_per_block: 1,
            use_quant_conv: true,
            use_post_quant_conv: true,
            sample_size: 32,
            force_upcast: true,
        }
    }
}

impl Vae {
    /// Pixels per latent along each side: `2 ** (len(block_out_channels) - 1)` (the pipelines'
    /// `vae_scale_factor`, e.g. `pipeline_flux.py`).
    pub fn scale_factor(&self) -> u64 {
        1 << self.block_out_channels.len().saturating_sub(1).min(16)
    }
}

/// transformers `CLIPTextConfig` (with `projection` for `CLIPTextModelWithProjection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClipText {
    pub vocab: u64,
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub max_positions: u64,
    pub projection: Option<u64>,
}

/// transformers `T5Config` read as `T5EncoderModel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct T5Encoder {
    pub vocab: u64,
    pub d_model: u64,
    pub d_kv: u64,
    pub d_ff: u64,
    pub heads: u64,
    pub layers: u64,
    pub buckets: u64,
    pub gated: bool,
}

/// One component's architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arch {
    Flux(Flux),
    Sd3(Sd3),
    Unet(Unet),
    Vae(Vae),
    ClipText(ClipText),
    T5Encoder(T5Encoder),
}

impl Arch {
    /// The framework's parameter count (`None` past u64: no real model).
    pub fn params(&self) -> Option<u64> {
        params::checked(match self {
            Arch::Flux(c) => params::flux(c),
            Arch::Sd3(c) => params::sd3(c),
            Arch::Unet(c) => params::unet(c),
            Arch::Vae(c) => params::vae(c),
            Arch::ClipText(c) => params::clip_text(c),
            Arch::T5Encoder(c) => params::t5_encoder(c),
        })
    }

    /// What the component does in the pipeline.
    pub fn role(&self) -> Role {
        match self {
            Arch::Flux(_) | Arch::Sd3(_) | Arch::Unet(_) => Role::Denoiser,
            Arch::Vae(_) => Role::Vae,
            Arch::ClipText(_) | Arch::T5Encoder(_) => Role::TextEncoder,
        }
    }
}

/// A component's part in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Denoiser,
    TextEncoder,
    Vae,
}

/// One model of a pipeline: its `model_index.json` key, library and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub library: String,
    pub class: String,
    pub arch: Arch,
}

/// A diffusers pipeline: its class (`FluxPipeline`, ...) and its models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub class: String,
    pub components: Vec<Component>,
}

impl Pipeline {
    /// A pipeline put together from its models' architectures alone (tests and hand-built
    /// examples, no `model_index.json`): each model under its `model_index.json` key, with the
    /// library `diffusers` and no class name (the estimator reads neither).
    pub fn from_archs<'a>(class: &str, models: impl IntoIterator<Item = (&'a str, Arch)>) -> Self {
        let components = models
            .into_iter()
            .map(|(name, arch)| Component {
                name: name.into(),
                library: "diffusers".into(),
                class: String::new(),
                arch,
            })
            .collect();
        Pipeline {
            class: class.into(),
            components,
        }
    }

    /// The denoiser (UNet or transformer), if the pipeline has one.
    pub fn denoiser(&self) -> Option<&Component> {
        self.components
            .iter()
            .find(|c| c.arch.role() == Role::Denoiser)
    }

    /// The VAE, if any.
    pub fn vae(&self) -> Option<&Vae> {
        self.components.iter().find_map(|c| match &c.arch {
            Arch::Vae(v) => Some(v),
            _ => None,
        })
    }

    /// All components' parameters.
    pub fn params_total(&self) -> Option<u64> {
        self.components
            .iter()
            .try_fold(0u64, |a, c| a.checked_add(c.arch.params()?))
    }

    /// Whether classifier-free guidance runs the denoiser on a doubled batch (negative and
    /// positive prompts concatenated) when `guidance_scale > 1`: SDXL
    /// (`pipeline_stable_diffusion_xl.py`, `do_classifier_free_guidance`) and SD3
    /// (`pipeline_stable_diffusion_3.py`) do; Flux (`pipeline_flux.py`) feeds the guidance
    /// scale to the distilled model's `guidance_embeds` instead and runs one batch (true CFG
    /// only with a `negative_prompt` and `true_cfg_scale > 1`, as a second forward pass).
    pub fn cfg_doubles_batch(&self) -> bool {
        !matches!(self.denoiser().map(|c| &c.arch), Some(Arch::Flux(_)))
    }

    /// The denoiser's sequence for one image of `width`×`height` pixels: latent pixels are
    /// `vae_scale_factor` apart; Flux packs 2×2 latent patches into one token
    /// (`_pack_latents`), SD3 patchifies by `patch_size`; a UNet works on the latent grid.
    /// `None` when the size is not a multiple of what the pipeline requires.
    pub fn latent_tokens(&self, width: u64, height: u64) -> Option<u64> {
        let scale = self.vae()?.scale_factor();
        let patch = match &self.denoiser()?.arch {
            Arch::Flux(_) => 2,
            Arch::Sd3(c) => c.patch_size,
            _ => 1,
        };
        let step = scale * patch;
        if width == 0 || height == 0 || !width.is_multiple_of(step) || !height.is_multiple_of(step)
        {
            return None;
        }
        Some((width / step) * (height / step))
    }
}

#[cfg(test)]
mod tests;
