//! A diffusion training job (`task: train`): one LoRA training step of the pipeline's denoiser
//! as diffusers' DreamBooth LoRA scripts run it (`examples/dreambooth/
//! train_dreambooth_lora_flux.py`, `train_dreambooth_lora_sd3.py`): the denoiser frozen in the
//! weight dtype with PEFT LoRA adapters on `to_k`, `to_q`, `to_v`, `to_out.0`, AdamW on the
//! adapters, the VAE encoding each batch's pixels, the prompt embeddings precomputed once. The
//! fields are named after the scripts' flags.

pub use super::job::Train;
use super::job::{
    is_flux, is_sd3, lower_or, reserve, whole, DiffusionJob, Offload, Resolved, MAX_BATCH, MAX_SIDE,
};
use super::{Arch, Pipeline};

/// The LoRA targets the scripts pass to `LoraConfig(target_modules=...)`.
pub const LORA_TARGETS: [&str; 4] = ["to_k", "to_q", "to_v", "to_out.0"];
/// Largest LoRA rank accepted.
pub const MAX_RANK: u64 = 65_536;

/// The script's `--resolution` default: 512 for the Flux and SD3 scripts.
fn default_side(p: &Pipeline) -> u64 {
    match p.denoiser().map(|c| &c.arch) {
        Some(Arch::Flux(_) | Arch::Sd3(_)) => 512,
        _ => 1024,
    }
}

impl DiffusionJob {
    /// Inference refuses the training fields, naming the first one given.
    pub(super) fn refuse_train_fields(&self) -> Result<(), String> {
        let given = [
            ("resolution", self.resolution.is_some()),
            ("lora_rank", self.lora_rank.is_some()),
            (
                "gradient_checkpointing",
                self.gradient_checkpointing.is_some(),
            ),
            ("optimizer", self.optimizer.is_some()),
            ("cache_latents", self.cache_latents.is_some()),
            ("custom_prompts", self.custom_prompts.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((f, _)) => Err(format!("{f}: a field of task train (the job is infer)")),
            None => Ok(()),
        }
    }

    /// Inference fields a training step has no use for: refused, named.
    fn refuse_infer_fields(&self) -> Result<(), String> {
        let given = [
            ("cfg", self.cfg.is_some()),
            ("vae_tiling", self.vae_tiling == Some(true)),
            ("vae_slicing", self.vae_slicing == Some(true)),
            ("drop_t5", self.drop_t5 == Some(true)),
        ];
        if let Some((f, _)) = given.iter().find(|(_, g)| *g) {
            return Err(format!("{f}: a field of task infer (the job is train)"));
        }
        match self.offload.as_deref().map(str::trim) {
            None | Some("none") => Ok(()),
            Some(o) => Err(format!(
                "offload: the training scripts keep every model on the GPU (got '{o}')"
            )),
        }
    }

    /// The training job with the script's defaults filled in.
    pub(super) fn resolve_train(&self, p: &Pipeline) -> Result<Resolved, String> {
        if !(is_flux(p) || is_sd3(p)) {
            return Err(
                "task: train models LoRA on a Flux or SD3 transformer; a UNet's \
                        training step is not modelled yet"
                    .into(),
            );
        }
        self.refuse_infer_fields()?;
        let side = whole("resolution", self.resolution, default_side(p), MAX_SIDE)?;
        let (width, height) = self.sides(p, side)?;
        let precision = self.precision()?;
        let optimizer = self
            .optimizer
            .as_deref()
            .unwrap_or("adamw")
            .trim()
            .to_ascii_lowercase();
        if !matches!(optimizer.as_str(), "adamw" | "adamw-8bit") {
            return Err(format!(
                "optimizer: adamw or adamw-8bit (got '{optimizer}')"
            ));
        }
        let attention = lower_or(&self.attention, "sdpa");
        if attention != "sdpa" {
            return Err(format!(
                "attention: a training step is modelled with sdpa (got '{attention}')"
            ));
        }
        let msl_default = if is_flux(p) { 512 } else { 77 };
        let train = Train {
            lora_rank: whole("lora_rank", self.lora_rank, 4, MAX_RANK)?,
            lora_targets: LORA_TARGETS.to_vec(),
            lora_dtype: match precision.as_str() {
                "bf16" => "bf16",
                _ => "fp32",
            },
            gradient_checkpointing: self.gradient_checkpointing.unwrap_or(false),
            optimizer,
            cache_latents: self.cache_latents.unwrap_or(false),
            custom_prompts: self.custom_prompts.unwrap_or(false),
        };
        Ok(Resolved {
            task: "train",
            width,
            height,
            batch: whole("batch", self.batch, 4, MAX_BATCH)?,
            precision,
            cfg: false,
            offload: Offload::None,
            vae_tiling: false,
            vae_slicing: false,
            attention,
            max_sequence_length: self.max_sequence_length(msl_default)?,
            drop_t5: false,
            gpu: self.gpu.clone(),
            reserve: reserve(self.reserve)?,
            train: Some(train),
        })
    }
}
