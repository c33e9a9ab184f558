//! A LoRA training step of a pipeline's denoiser, phase by phase, as diffusers' DreamBooth
//! LoRA scripts run one step (`examples/dreambooth/train_dreambooth_lora_flux.py`,
//! `train_dreambooth_lora_sd3.py`): the batch's prompts encoded (only with per-image captions;
//! else the instance prompt's embeddings were computed once and the text encoders deleted),
//! the pixels encoded by the frozen VAE (unless `--cache_latents`), the transformer's forward
//! and backward, `clip_grad_norm_` and the optimizer step. Resident throughout: the frozen
//! denoiser and VAE in the weight dtype, the adapters, their gradients and the optimizer's
//! states.

use super::job::Resolved;
use super::report::Phase;
use super::text::CLIP_TOKENS;
use super::train_job::Train;
use super::train_saved::{self as saved, Elems};
use super::{text, vae_encode, Arch, Component, Pipeline, Role};
use crate::estimate::overhead;
use crate::gpu::Gpu;

type N = u128;

fn overflow() -> String {
    "the estimate passes 2^64 bytes: no GPU holds this job".into()
}

/// Adapter parameters: each targeted `nn.Linear(i, o)` gains `lora_A` (r × i) and `lora_B`
/// (o × r), PEFT's `LoraLayer.update_layer`. Flux: `to_q`, `to_k`, `to_v`, `to_out.0` of each
/// double-stream block's attention (d → d), `to_q`/`to_k`/`to_v` of each single-stream block
/// (it has no `to_out`); SD3: the four of every joint block's attention, four more in SD3.5's
/// dual-attention blocks (`attn2`). Names matched as `LoraConfig.target_modules` matches
/// (the module name ends with the target): `add_q_proj`, `to_add_out` are not targets.
pub fn lora_params(d: &Arch, rank: u64) -> Option<u64> {
    let r = N::from(rank);
    let n: N = match d {
        Arch::Flux(c) => {
            let dim = N::from(c.heads * c.head_dim);
            (4 * N::from(c.layers) + 3 * N::from(c.single_layers)) * r * 2 * dim
        }
        Arch::Sd3(c) => {
            let dim = N::from(c.heads * c.head_dim);
            let linears = 4 * N::from(c.layers) + 4 * c.dual_attention_layers.len() as N;
            linears * r * 2 * dim
        }
        _ => return None,
    };
    u64::try_from(n).ok()
}

/// Bytes of the adapters' optimizer states: torch `AdamW` keeps `exp_avg` and `exp_avg_sq` in
/// the parameter's dtype; bitsandbytes `AdamW8bit` one byte each (its block-wise absmax,
/// one fp32 per 2048 values, beside them).
fn state_bytes(lora: N, t: &Train) -> N {
    match t.optimizer.as_str() {
        "adamw-8bit" => 2 * lora + 2 * 4 * lora.div_ceil(2048),
        _ => 2 * lora * N::from(t.lora_elem()),
    }
}

/// Weights resident through the step: the frozen denoiser, the VAE unless latents are cached
/// (the script deletes it), the text encoders only with per-image captions.
fn frozen_bytes(p: &Pipeline, j: &Resolved, t: &Train) -> Option<N> {
    let keep = |c: &&Component| match c.arch.role() {
        Role::Denoiser => true,
        Role::Vae => !t.cache_latents,
        Role::TextEncoder => t.custom_prompts,
    };
    p.components.iter().filter(keep).try_fold(0, |a: N, c| {
        Some(a + N::from(c.arch.params()?) * N::from(j.elem()))
    })
}

/// The denoiser's text tokens in training: Flux T5's `max_sequence_length`; SD3 CLIP's 77
/// joined to T5's `max_sequence_length`.
fn text_tokens(d: &Arch, j: &Resolved) -> u64 {
    match d {
        Arch::Sd3(_) => CLIP_TOKENS + j.max_sequence_length,
        _ => j.max_sequence_length,
    }
}

/// What a denoiser's forward keeps and its widest moment, bytes for one image.
struct Forward {
    /// Every block's saved tensors and `norm_out`'s.
    saved: N,
    /// The largest one block saves (what a recomputed block holds under checkpointing).
    block: N,
    /// The image and text tokens a block takes in (hidden states, d each): what a
    /// checkpointed block keeps.
    block_inputs: N,
    /// Blocks.
    blocks: N,
    /// The widest moment's tensors that are not saved (see `denoiser_activations`).
    transient: N,
    /// The prompt embeddings passed in (`joint_attention_dim` a token) and the position ids.
    inputs: N,
    /// The rotary table (no batch).
    rope: N,
}

/// Under autocast the modulated norm output (`norm_hidden_states`) is fp32 and not saved (the
/// adapters save their low-dtype casts of it), yet the block's local keeps it to the block's
/// end: one fp32 tensor of d a token beside the close's temporaries. In fp32 it is the tensor
/// the adapters save, counted there.
fn autocast_norm(s: N, d: N, x: Elems) -> N {
    if x.autocast {
        s * d * x.f
    } else {
        0
    }
}

fn flux_forward(c: &super::Flux, n: N, t: N, r: N, x: Elems) -> Forward {
    let d = N::from(c.heads * c.head_dim);
    let s = n + t;
    let single = c.single_layers > 0;
    Forward {
        saved: saved::flux_saved(c, n, t, r, x),
        block: saved::flux_double(c, n, t, r, false, x).max(if single {
            saved::flux_single(c, s, r, x)
        } else {
            0
        }),
        block_inputs: s * d * x.e,
        blocks: N::from(c.layers + c.single_layers),
        transient: if single { 11 } else { 6 } * s * d * x.e + autocast_norm(s, d, x),
        inputs: t * N::from(c.joint_attention_dim) * x.e + 3 * s * x.e,
        rope: saved::flux_rope(c, s),
    }
}

fn sd3_forward(c: &super::Sd3, n: N, t: N, r: N, x: Elems) -> Forward {
    let d = N::from(c.heads * c.head_dim);
    let s = n + t;
    Forward {
        saved: saved::sd3_saved(c, n, t, r, x),
        block: (0..c.layers)
            .map(|i| saved::sd3_block(c, n, t, r, i, x))
            .max()
            .unwrap_or(0),
        block_inputs: s * d * x.e,
        blocks: N::from(c.layers),
        transient: 6 * s * d * x.e + autocast_norm(s, d, x),
        inputs: t * N::from(c.joint_attention_dim) * x.e,
        rope: 0,
    }
}

/// The batch's pixels through the step: the dataloader's fp32 tensor and the script's
/// `pixel_values = batch["pixel_values"].to(dtype=vae.dtype)` copy (the same tensor in fp32),
/// both referenced until the step ends; none when latents are cached.
fn pixel_bytes(p: &Pipeline, j: &Resolved, t: &Train) -> N {
    if t.cache_latents {
        return 0;
    }
    let c = p.vae().map_or(3, |v| v.in_channels);
    let px = N::from(j.batch) * N::from(c) * N::from(j.width) * N::from(j.height);
    px * if j.elem() < 4 {
        4 + N::from(j.elem())
    } else {
        4
    }
}

/// The denoiser's forward and backward, bytes for the batch. Without checkpointing the peak
/// is the forward's last moment inside the last block: every block's saved tensors (see
/// `train_saved`) beside that block's unsaved temporaries — Flux's single-stream close
/// `gate * proj_out(torch.cat([attn_output, mlp_hidden_states], dim=2))` holds the GELU output
/// (4d a token), the concatenation (5d), the projection and the product (d each): 11d over
/// the joint sequence; a double-stream or SD3 block's feed-forward close holds the GELU output,
/// the projection and the gated product (6d). With `--gradient_checkpointing` (non-reentrant
/// `torch.utils.checkpoint` per block) each block keeps its inputs and the recomputed block
/// holds its saved set and the same temporaries. Beside them: the latents the script keeps
/// (`model_input`, `noise`, `noisy_model_input`, the packed copy: 4 latent-sized tensors),
/// the prompt embeddings and position ids, the pixels.
pub fn denoiser_activations(p: &Pipeline, j: &Resolved, t: &Train) -> Option<N> {
    let d = &p.denoiser()?.arch;
    let v = p.vae()?;
    let scale = v.scale_factor();
    let (lh, lw) = (N::from(j.height / scale), N::from(j.width / scale));
    let tt = N::from(text_tokens(d, j));
    let r = N::from(t.lora_rank);
    let x = Elems::of(j.elem());
    let f = match d {
        Arch::Flux(c) => flux_forward(c, (lh / 2) * (lw / 2), tt, r, x),
        Arch::Sd3(c) => {
            let pch = N::from(c.patch_size.max(1));
            sd3_forward(c, lh * lw / (pch * pch), tt, r, x)
        }
        _ => return None,
    };
    let kept = if t.gradient_checkpointing {
        f.blocks * f.block_inputs + f.block
    } else {
        f.saved
    };
    let latents = 4 * N::from(v.latent_channels) * lh * lw * x.e;
    let per_image = kept + f.transient + f.inputs + latents;
    Some(N::from(j.batch) * per_image + f.rope + pixel_bytes(p, j, t))
}

/// The VAE encode's peak for the batch, bytes (in the weight dtype: the scripts cast the VAE).
fn encode_activations(p: &Pipeline, j: &Resolved, t: &Train) -> Option<N> {
    let v = p.vae()?;
    let per = vae_encode::encoder_peak(v, j.height, j.width, false);
    let own = N::from(j.batch) * N::from(v.in_channels) * N::from(j.width) * N::from(j.height);
    // `encoder_peak` counts the VAE-dtype pixels; the dataloader's fp32 ones beside them.
    Some(
        per * N::from(j.batch) * N::from(j.elem()) + pixel_bytes(p, j, t) - own * N::from(j.elem()),
    )
}

/// The step's phases in the order it runs them.
pub fn phases(
    p: &Pipeline,
    j: &Resolved,
    t: &Train,
    gpu: Option<&Gpu>,
) -> Result<Vec<Phase>, String> {
    let den = p.denoiser().ok_or("model: the pipeline has no denoiser")?;
    let lora = N::from(lora_params(&den.arch, t.lora_rank).ok_or_else(overflow)?);
    let lora_bytes = lora * N::from(t.lora_elem());
    let states = state_bytes(lora, t);
    let frozen = frozen_bytes(p, j, t).ok_or_else(overflow)?;
    let weights = frozen + lora_bytes;
    let ws = overhead::blas_workspaces_bytes(gpu, true);
    let mut out = Vec::new();
    let mut push = |name: String, act: N, grads: N| -> Result<(), String> {
        let to = |n: N| u64::try_from(n).map_err(|_| overflow());
        let (parameters, activations) = (to(weights)?, to(act)?);
        let (gradients, optimizer_states) = (to(grads)?, to(states)?);
        let train = Some((gradients, optimizer_states));
        let phase = Phase::summed(name, parameters, activations, ws, train);
        out.push(phase.ok_or_else(overflow)?);
        Ok(())
    };
    if t.custom_prompts {
        for c in p
            .components
            .iter()
            .filter(|c| c.arch.role() == Role::TextEncoder)
        {
            push(
                format!("text_encode:{}", c.name),
                text::encoder_peak(c, j),
                0,
            )?;
        }
    }
    if !t.cache_latents {
        push(
            "vae_encode".into(),
            encode_activations(p, j, t).ok_or_else(overflow)?,
            0,
        )?;
    }
    let act = denoiser_activations(p, j, t).ok_or_else(overflow)?;
    push("forward_backward".into(), act, lora_bytes)?;
    // AdamW (foreach) on the adapters: the gradients and a `sqrt(exp_avg_sq)` scratch.
    push("optimizer_step".into(), lora_bytes, lora_bytes)?;
    Ok(out)
}
