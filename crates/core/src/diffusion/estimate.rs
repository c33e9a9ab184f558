//! A diffusion pipeline's inference memory: the pipeline's three phases as diffusers runs them
//! (`encode_prompt` over each text encoder, the denoising loop, `vae.decode`), each with the
//! weights resident under the job's offload mode and the phase's activation peak; the report's
//! peak is the largest phase, in the Report's categories.

use super::job::{Offload, Resolved};
pub use super::report::{ComponentSummary, DiffusionReport, ModelSummary, Phase};
use super::residency::largest_leaf;
pub use super::text::CLIP_TOKENS;
use super::{denoise, text, vae_decode, Arch, Component, Pipeline, Role};
use crate::estimate::overhead;
use crate::gpu::Gpu;
use crate::report::{
    Category, CategoryBytes, Components, Fit, ModelStates, PeakFigures, PerGpu, TargetGpu,
    TimelinePoint,
};
use crate::summary::ReadFrom;
use std::borrow::Cow;

fn overflow() -> String {
    "the estimate passes 2^64 bytes: no GPU holds this job".into()
}

fn to_u64(n: u128) -> Result<u64, String> {
    u64::try_from(n).map_err(|_| overflow())
}

/// Whether the pipeline upcasts its VAE to fp32 for the decode: `StableDiffusionXLPipeline`
/// (`pipeline_stable_diffusion_xl.py`: `needs_upcasting = self.vae.dtype == torch.float16 and
/// self.vae.config.force_upcast`, then `upcast_vae()`); Flux and SD3 decode in their dtype.
pub fn vae_upcast(p: &Pipeline, j: &Resolved) -> bool {
    p.class.starts_with("StableDiffusionXL")
        && j.precision == "fp16"
        && p.vae().is_some_and(|v| v.force_upcast)
}

/// The components the call runs (SD3 without T5 when `drop_t5`).
fn used<'a>(p: &'a Pipeline, j: &Resolved) -> Vec<&'a Component> {
    p.components
        .iter()
        .filter(|c| !(j.drop_t5 && matches!(c.arch, Arch::T5Encoder(_))))
        .collect()
}

/// Bytes of a component's weights as the phase `running` holds them.
fn weight_bytes(c: &Component, j: &Resolved, upcast_vae: bool) -> Option<u64> {
    let e = if upcast_vae && c.arch.role() == Role::Vae {
        4
    } else {
        j.elem()
    };
    c.arch.params()?.checked_mul(e)
}

/// Weights on the GPU while `running` runs: every used component (none), the running one
/// (model offload), its largest leaf module (sequential).
fn resident(p: &Pipeline, j: &Resolved, running: &Component, upcast: bool) -> Option<u64> {
    match j.offload {
        Offload::None => used(p, j)
            .iter()
            .try_fold(0u64, |a, c| a.checked_add(weight_bytes(c, j, upcast)?)),
        Offload::Model => weight_bytes(running, j, upcast),
        Offload::Sequential => largest_leaf(&running.arch)?.checked_mul(j.elem()),
    }
}

/// The denoiser's text tokens: Flux T5's `max_sequence_length`; SD3 CLIP's 77 joined to T5's
/// (77 zeros when T5 is dropped: `_get_t5_prompt_embeds` returns `tokenizer_max_length`);
/// a UNet's 77 (cross-attention keys only).
fn denoiser_text_tokens(d: &Arch, j: &Resolved) -> u64 {
    match d {
        Arch::Flux(_) => j.max_sequence_length,
        Arch::Sd3(_) if j.drop_t5 => 2 * CLIP_TOKENS,
        Arch::Sd3(_) => CLIP_TOKENS + j.max_sequence_length,
        _ => CLIP_TOKENS,
    }
}

/// The denoiser's activation peak in one forward of the (CFG-doubled) batch.
pub fn denoise_activations(p: &Pipeline, j: &Resolved) -> Option<u128> {
    let d = &p.denoiser()?.arch;
    let scale = p.vae()?.scale_factor();
    let doubled = j.cfg && p.cfg_doubles_batch();
    let sh = denoise::Shape {
        batch: j.batch * if doubled { 2 } else { 1 },
        latent_h: j.height / scale,
        latent_w: j.width / scale,
        text_tokens: denoiser_text_tokens(d, j),
        elem: j.elem(),
        eager: j.attention == "eager",
    };
    Some(match d {
        Arch::Flux(c) => denoise::flux_peak(c, &sh),
        Arch::Sd3(c) => denoise::sd3_peak(c, &sh),
        Arch::Unet(u) => denoise::unet_peak(u, &sh),
        _ => 0,
    })
}

/// The VAE decode's activation peak (bytes) in the decode's dtype.
pub fn decode_activations(p: &Pipeline, j: &Resolved) -> Option<u128> {
    let v = p.vae()?;
    let s = v.scale_factor();
    let mode = vae_decode::DecodeMode {
        tiling: j.vae_tiling,
        slicing: j.vae_slicing,
        eager: j.attention == "eager",
    };
    let e = if vae_upcast(p, j) { 4 } else { j.elem() };
    Some(vae_decode::decode_peak(v, j.batch, j.height / s, j.width / s, mode) * u128::from(e))
}

/// The phases in the order the call runs them.
pub fn phases(p: &Pipeline, j: &Resolved, gpu: Option<&Gpu>) -> Result<Vec<Phase>, String> {
    if let Some(t) = &j.train {
        return super::train::phases(p, j, t, gpu);
    }
    let ws = overhead::blas_workspaces_bytes(gpu, false);
    let mut out = Vec::new();
    let mut push = |name: String, c: &Component, act: u128, upcast: bool| -> Result<(), String> {
        let parameters = resident(p, j, c, upcast).ok_or_else(overflow)?;
        let phase = Phase::summed(name, parameters, to_u64(act)?, ws, None);
        out.push(phase.ok_or_else(overflow)?);
        Ok(())
    };
    for c in used(p, j)
        .into_iter()
        .filter(|c| c.arch.role() == Role::TextEncoder)
    {
        push(
            format!("text_encode:{}", c.name),
            c,
            text::encoder_peak(c, j),
            false,
        )?;
    }
    let d = p.denoiser().ok_or("model: the pipeline has no denoiser")?;
    push(
        "denoise".into(),
        d,
        denoise_activations(p, j).unwrap_or(0),
        false,
    )?;
    let vae = p
        .components
        .iter()
        .find(|c| c.arch.role() == Role::Vae)
        .ok_or("model: the pipeline has no VAE")?;
    let upcast = vae_upcast(p, j);
    push(
        "vae_decode".into(),
        vae,
        decode_activations(p, j).unwrap_or(0),
        upcast,
    )?;
    Ok(out)
}

/// The report of job `j` on pipeline `p` named `name`.
pub fn estimate(p: &Pipeline, name: &str, j: &Resolved) -> Result<DiffusionReport, String> {
    let gpu = match &j.gpu {
        Some(id) => Some(crate::gpu::find(id).map_err(|e| format!("gpu: {e}"))?),
        None => None,
    };
    let phases = phases(p, j, gpu)?;
    let top = phases
        .iter()
        .max_by_key(|ph| ph.allocated)
        .ok_or("model: the pipeline runs nothing")?;
    let peak = top.allocated;
    let reserved = overhead::reserved_estimate(peak, &[]).max(peak);
    let context = overhead::cuda_context_bytes(gpu);
    let device_total = overhead::device_total_bytes(reserved, gpu, 1);
    let components = Components {
        parameters: top.parameters,
        gradients: top.gradients.unwrap_or(0),
        optimizer_states: top.optimizer_states.unwrap_or(0),
        activations: top.activations,
        temporaries: top.temporaries,
        cuda_context: context,
        allocator_reserve: reserved - peak,
        ..Components::default()
    };
    let max_params = phases.iter().map(|ph| ph.parameters).max().unwrap_or(0);
    let timeline = phases.iter().map(timeline_point).collect();
    Ok(DiffusionReport {
        model: summary(p, name)?,
        job: j.clone(),
        per_gpu: PerGpu {
            components,
            model_states: ModelStates {
                parameters: max_params,
                gradients: phases
                    .iter()
                    .filter_map(|ph| ph.gradients)
                    .max()
                    .unwrap_or(0),
                optimizer_states: phases
                    .iter()
                    .filter_map(|ph| ph.optimizer_states)
                    .max()
                    .unwrap_or(0),
                ..ModelStates::default()
            },
            peaks: PeakFigures {
                activation_bytes_per_layer: None,
                peak_allocated: Some(peak),
                peak_reserved: Some(reserved),
                device_total: Some(device_total),
                peak_phase: Some(top.phase.clone()),
            },
            kv_pool: None,
            rank: None,
            host_bytes: host_bytes(p, j, max_params),
            paged_states: None,
            allocator: None,
        },
        fit: gpu.map(|g| fit_of(g, device_total, j.reserve)),
        warnings: warnings(p, j),
        phases,
        timeline,
    })
}

fn timeline_point(ph: &Phase) -> TimelinePoint {
    let mut by = CategoryBytes::default();
    by.set(Category::Parameters, ph.parameters);
    by.set(Category::Activations, ph.activations);
    by.set(Category::Temporaries, ph.temporaries);
    by.set(Category::Gradients, ph.gradients.unwrap_or(0));
    by.set(Category::OptimizerStates, ph.optimizer_states.unwrap_or(0));
    TimelinePoint {
        phase: Cow::Owned(ph.phase.clone()),
        label: Cow::Owned(ph.phase.clone()),
        allocated: ph.allocated,
        by_category: by,
    }
}

/// Host RAM holding the offloaded weights (all weights) under an offload mode.
fn host_bytes(p: &Pipeline, j: &Resolved, _on_gpu: u64) -> Option<u64> {
    if j.offload == Offload::None {
        return None;
    }
    used(p, j)
        .iter()
        .try_fold(0u64, |a, c| a.checked_add(weight_bytes(c, j, false)?))
}

fn fit_of(g: &Gpu, device_total: u64, reserve: u64) -> Fit {
    let headroom = g.memory_bytes as i128 - reserve as i128 - device_total as i128;
    Fit {
        target: TargetGpu::from(g),
        fits: headroom >= 0,
        headroom: headroom.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        reserve,
    }
}

fn summary(p: &Pipeline, name: &str) -> Result<ModelSummary, String> {
    let mut components = Vec::new();
    for c in &p.components {
        components.push(ComponentSummary {
            name: c.name.clone(),
            class: c.class.clone(),
            role: c.arch.role(),
            params: c.arch.params().ok_or_else(overflow)?,
        });
    }
    Ok(ModelSummary {
        name: name.to_string(),
        pipeline: p.class.clone(),
        params_total: p.params_total().ok_or_else(overflow)?,
        components,
        read_from: ReadFrom::default(),
    })
}

/// What the estimate does not model, said where it applies.
fn warnings(p: &Pipeline, j: &Resolved) -> Vec<String> {
    let mut w = Vec::new();
    if vae_upcast(p, j) {
        w.push(
            "the SDXL pipeline upcasts its fp16 VAE to fp32 for the decode (force_upcast); a \
             fixed fp16 VAE (madebyollin/sdxl-vae-fp16-fix) halves the decode"
                .to_string(),
        );
    }
    if j.offload != Offload::None {
        w.push(
            "offloaded weights move through the caching allocator: blocks freed by one model \
             stay reserved for the next (peak_reserved may exceed this estimate)"
                .to_string(),
        );
    }
    w
}
