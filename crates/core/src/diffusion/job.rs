//! A diffusion inference job: one image-generation call of a diffusers pipeline
//! (`pipe(prompt, width=..., height=..., num_images_per_prompt=...)`) and how the pipeline is
//! placed (`enable_model_cpu_offload`, `enable_sequential_cpu_offload`, `enable_vae_tiling`,
//! `enable_vae_slicing`). Every field optional; `resolve` fills the pipeline's defaults and
//! checks each value, naming the field in its one-line error.

use super::{Arch, Pipeline};
use serde::{Deserialize, Serialize};

/// Where the pipeline's weights live while it runs (diffusers `DiffusionPipeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offload {
    /// `pipe.to("cuda")`: every model resident.
    None,
    /// `enable_model_cpu_offload()`: the running model only (`model_cpu_offload_seq`).
    Model,
    /// `enable_sequential_cpu_offload()`: accelerate's `cpu_offload` moves each leaf module's
    /// weights in for its forward and out after it; one module at a time.
    Sequential,
}

/// The job as written: every field optional (JSON numbers may be floats, as the contract says).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffusionJob {
    pub model: Option<serde_json::Value>,
    pub task: Option<String>,
    pub width: Option<f64>,
    pub height: Option<f64>,
    /// Images generated together: prompts × `num_images_per_prompt`.
    pub batch: Option<f64>,
    /// `torch_dtype`: `bf16`, `fp16`, `fp32`.
    pub precision: Option<String>,
    /// Classifier-free guidance on (`guidance_scale > 1`); off runs the denoiser on the batch.
    pub cfg: Option<bool>,
    pub offload: Option<String>,
    pub vae_tiling: Option<bool>,
    pub vae_slicing: Option<bool>,
    pub attention: Option<String>,
    /// T5's prompt length (`max_sequence_length`): Flux 512, SD3 256.
    pub max_sequence_length: Option<f64>,
    /// SD3: `text_encoder_3=None, tokenizer_3=None` (the T5 encoder not loaded).
    pub drop_t5: Option<bool>,
    pub gpu: Option<String>,
    /// Bytes kept free for other applications.
    pub reserve: Option<f64>,
    /// `task: train`: the square side (`--resolution`), for width and height at once.
    pub resolution: Option<f64>,
    /// `task: train`: the LoRA rank (`--rank`; `lora_alpha` = rank).
    pub lora_rank: Option<f64>,
    /// `task: train`: `--gradient_checkpointing`.
    pub gradient_checkpointing: Option<bool>,
    /// `task: train`: `adamw` (torch) or `adamw-8bit` (`--use_8bit_adam`).
    pub optimizer: Option<String>,
    /// `task: train`: `--cache_latents` (latents encoded once, the VAE deleted).
    pub cache_latents: Option<bool>,
    /// `task: train`: per-image captions (`--caption_column`): the text encoders stay on the GPU
    /// and encode each batch's prompts instead of one precomputed instance prompt.
    pub custom_prompts: Option<bool>,
}

/// The job with every default filled in, as the report echoes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    pub task: &'static str,
    pub width: u64,
    pub height: u64,
    pub batch: u64,
    pub precision: String,
    pub cfg: bool,
    pub offload: Offload,
    pub vae_tiling: bool,
    pub vae_slicing: bool,
    pub attention: String,
    pub max_sequence_length: u64,
    pub drop_t5: bool,
    pub gpu: Option<String>,
    pub reserve: u64,
    /// The training step's settings (`task: train`); absent for inference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train: Option<Train>,
}

/// The training step's settings, as the report echoes them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Train {
    /// `--rank` (`lora_alpha` = rank).
    pub lora_rank: u64,
    /// `LoraConfig.target_modules`.
    pub lora_targets: Vec<&'static str>,
    /// The adapters' dtype: fp32 under fp16 (`cast_training_params`), else the weight dtype.
    pub lora_dtype: &'static str,
    /// `--gradient_checkpointing`.
    pub gradient_checkpointing: bool,
    /// `adamw` or `adamw-8bit` (`--use_8bit_adam`).
    pub optimizer: String,
    /// `--cache_latents`.
    pub cache_latents: bool,
    /// Per-image captions: the text encoders stay resident and encode each batch.
    pub custom_prompts: bool,
}

impl Train {
    /// Bytes per adapter parameter.
    pub fn lora_elem(&self) -> u64 {
        if self.lora_dtype == "fp32" {
            4
        } else {
            2
        }
    }
}

/// Largest side accepted (16k pixels: past every pipeline's training sizes by far).
pub const MAX_SIDE: u64 = 16_384;
/// Most images in one call.
pub const MAX_BATCH: u64 = 4096;

/// The `reserve` field: bytes ≥ 0.
pub(super) fn reserve(r: Option<f64>) -> Result<u64, String> {
    match r {
        None => Ok(0),
        Some(r) if (0.0..1e18).contains(&r) => Ok(r as u64),
        Some(r) => Err(format!("reserve: bytes, a number ≥ 0 (got {r})")),
    }
}

pub(super) fn whole(field: &str, v: Option<f64>, default: u64, max: u64) -> Result<u64, String> {
    let Some(x) = v else { return Ok(default) };
    if !(x.is_finite() && x >= 1.0 && x.fract() == 0.0 && x <= max as f64) {
        return Err(format!(
            "{field}: must be a whole number from 1 to {max} (got {x})"
        ));
    }
    Ok(x as u64)
}

/// The pixel step a side must be a multiple of: VAE scale × the denoiser's patch (Flux packs
/// 2×2 latents; SD3 patchifies by `patch_size`; a UNet by 1).
pub fn side_step(p: &Pipeline) -> Option<u64> {
    let patch = match &p.denoiser()?.arch {
        Arch::Flux(_) => 2,
        Arch::Sd3(c) => c.patch_size.max(1),
        _ => 1,
    };
    Some(p.vae()?.scale_factor() * patch)
}

/// Whether the pipeline's denoiser is Flux / SD3.
pub(super) fn is_flux(p: &Pipeline) -> bool {
    matches!(p.denoiser().map(|c| &c.arch), Some(Arch::Flux(_)))
}
pub(super) fn is_sd3(p: &Pipeline) -> bool {
    matches!(p.denoiser().map(|c| &c.arch), Some(Arch::Sd3(_)))
}

impl DiffusionJob {
    /// Fills the defaults for `p` and checks every value.
    pub fn resolve(&self, p: &Pipeline) -> Result<Resolved, String> {
        match self.task.as_deref() {
            None | Some("infer") => self.refuse_train_fields()?,
            Some("train") => return self.resolve_train(p),
            Some(t) => {
                return Err(format!(
                    "task: a diffusion pipeline runs as infer or train (got '{t}')"
                ))
            }
        }
        let (width, height) = self.sides(p, 1024)?;
        let precision = self.precision()?;
        let offload = match self.offload.as_deref().map(str::trim) {
            None | Some("none") => Offload::None,
            Some("model") => Offload::Model,
            Some("sequential") => Offload::Sequential,
            Some(o) => return Err(format!("offload: none, model or sequential (got '{o}')")),
        };
        let attention = lower_or(&self.attention, "sdpa");
        if !matches!(attention.as_str(), "sdpa" | "eager") {
            return Err(format!("attention: sdpa or eager (got '{attention}')"));
        }
        let drop_t5 = self.drop_t5.unwrap_or(false);
        if drop_t5 && !is_sd3(p) {
            return Err("drop_t5: only SD3 pipelines run without their T5 encoder".into());
        }
        let msl_default = if is_flux(p) { 512 } else { 256 };
        Ok(Resolved {
            task: "infer",
            width,
            height,
            batch: whole("batch", self.batch, 1, MAX_BATCH)?,
            precision,
            cfg: self.cfg.unwrap_or(!is_flux(p)),
            offload,
            vae_tiling: self.vae_tiling.unwrap_or(false),
            vae_slicing: self.vae_slicing.unwrap_or(false),
            attention,
            max_sequence_length: self.max_sequence_length(msl_default)?,
            drop_t5,
            gpu: self.gpu.clone(),
            reserve: reserve(self.reserve)?,
            train: None,
        })
    }
}

impl DiffusionJob {
    /// `width` and `height` (`default` each), checked to be multiples of the pipeline's
    /// [`side_step`]: both tasks run the pipeline's VAE and patchify on the same grid
    /// (diffusers `VaeImageProcessor`'s `vae_scale_factor`).
    pub(super) fn sides(&self, p: &Pipeline, default: u64) -> Result<(u64, u64), String> {
        let step = side_step(p).ok_or("model: the pipeline has no denoiser or no VAE")?;
        let width = whole("width", self.width, default, MAX_SIDE)?;
        let height = whole("height", self.height, default, MAX_SIDE)?;
        for (f, v) in [("width", width), ("height", height)] {
            if !v.is_multiple_of(step) {
                return Err(format!(
                    "{f}: {v} is not a multiple of {step} (VAE scale × patch)"
                ));
            }
        }
        Ok((width, height))
    }

    /// `precision` (`torch_dtype`, default bf16): bf16, fp16 or fp32, lower-cased.
    pub(super) fn precision(&self) -> Result<String, String> {
        let precision = lower_or(&self.precision, "bf16");
        if !matches!(precision.as_str(), "bf16" | "fp16" | "fp32") {
            return Err(format!("precision: bf16, fp16 or fp32 (got '{precision}')"));
        }
        Ok(precision)
    }

    /// `max_sequence_length` (the T5 prompt length), 1 to 4096, `default` when absent.
    pub(super) fn max_sequence_length(&self, default: u64) -> Result<u64, String> {
        whole(
            "max_sequence_length",
            self.max_sequence_length,
            default,
            4096,
        )
    }
}

/// A text field lower-cased, or `default` when absent.
pub(super) fn lower_or(v: &Option<String>, default: &str) -> String {
    v.as_deref().unwrap_or(default).to_ascii_lowercase()
}

impl Resolved {
    /// Bytes per element of the pipeline's `torch_dtype`.
    pub fn elem(&self) -> u64 {
        if self.precision == "fp32" {
            4
        } else {
            2
        }
    }
}
