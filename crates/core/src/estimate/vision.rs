//! A vision-language model's step: the images' tokens lengthen each sequence, and the vision
//! tower runs before the language model's embeddings are complete — its blocks are the same
//! block programs as the language model's (`blocks`), at the tower's width over its own
//! sequence (patches per image, or per window), non-causal. In transformers the tower runs
//! inside the model's forward before the decoder (`get_image_features` in
//! `modeling_qwen2_vl.py`, `modeling_llava.py`, `modeling_gemma3.py`), so what it saves is
//! kept from the start of the forward to the end of the backward, with the embeddings'.

use super::blocks::{block_memory, BlockCtx, Numerics};
use super::round_size;
use super::stages::StageMemory;
use crate::error::CoreError;
use crate::job::{Checkpointing, ResolvedJob, Task};
use crate::model::*;
use crate::vision::{ImageCost, Part, Projector, Vision};
use std::borrow::Cow;

/// The job as the language model sees it: each sequence longer by its images' tokens
/// (`image_tokens` records how many). A job without images, or a model without a vision side,
/// is unchanged; images given to a text-only model are an error.
pub fn with_images<'a>(
    spec: Option<&ModelSpec>,
    job: &'a ResolvedJob,
) -> Result<Cow<'a, ResolvedJob>, CoreError> {
    let Some(images) = job.images else {
        return Ok(Cow::Borrowed(job));
    };
    if job.image_tokens > 0 {
        return Ok(Cow::Borrowed(job));
    }
    let Some(v) = spec.and_then(|s| s.vision.as_ref()) else {
        return Err(CoreError::field(
            "images",
            "the model has no vision tower (images need a vision-language model)",
        ));
    };
    let per_image = image_cost(v, job)?.tokens;
    let tokens = per_image.saturating_mul(images.count);
    let mut j = job.clone();
    j.seq = j.seq.saturating_add(tokens);
    j.image_tokens = tokens;
    Ok(Cow::Owned(j))
}

/// The cost of one of the job's images under the model's rule.
pub fn image_cost(v: &Vision, job: &ResolvedJob) -> Result<ImageCost, CoreError> {
    let Some(i) = job.images else {
        return Ok(ImageCost {
            tokens: 0,
            tower_images: 0,
            tower_seq: 0,
        });
    };
    v.tokens
        .cost(i.width, i.height)
        .map_err(|e| CoreError::field("images", e))
}

/// Whether any of the tower's weights train: not frozen, and in a PEFT job only when a LoRA
/// target reaches into the tower.
fn tower_trains(v: &Vision, job: &ResolvedJob) -> bool {
    if job.task != Task::Train || job.freeze.contains(&Part::Vision) {
        return false;
    }
    match &job.peft {
        None => true,
        Some(p) => p.targets.iter().any(|t| {
            let (part, m) = crate::vision::split_target(t);
            part.is_none_or(|p| p == Part::Vision) && tower_modules(v).contains(&m)
        }),
    }
}

/// The tower's module names LoRA can target.
fn tower_modules(v: &Vision) -> &'static [&'static str] {
    match (v.tower.kind, v.tower.gated) {
        (crate::vision::TowerKind::Qwen, true) => {
            &["qkv", "proj", "gate_proj", "up_proj", "down_proj"]
        }
        (crate::vision::TowerKind::Qwen, false) => &["qkv", "proj", "fc1", "fc2"],
        (crate::vision::TowerKind::Qwen3, _) => &["qkv", "proj", "linear_fc1", "linear_fc2"],
        (crate::vision::TowerKind::InternVit { .. }, _) => &[
            "q_proj",
            "k_proj",
            "v_proj",
            "projection_layer",
            "fc1",
            "fc2",
        ],
        (crate::vision::TowerKind::Pixtral, _) => &[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        _ => &["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
    }
}

/// The tower as a stack of pre-norm blocks the block programs can run: its width, one layer
/// of its shape (`plain` attention with biases; the MLP as the config names it).
fn tower_spec(spec: &ModelSpec, v: &Vision) -> ModelSpec {
    let t = &v.tower;
    let norm = Norm {
        kind: t.norm,
        dim: t.hidden,
    };
    let layer = Layer {
        attention: Attention {
            kind: AttentionKind::Standard {
                heads: t.heads,
                kv_heads: t.heads,
                head_dim: t.hidden / t.heads.max(1),
            },
            bias: ProjBias::all(t.kind.biased()),
            qk_norm: None,
            sliding_window: None,
            relative_bias_buckets: None,
            sinks: false,
            qk_norm_whole: false,
            qk_l2_norm: false,
            attention_chunk: None,
            nope: false,
        },
        cross_attention: None,
        mlp: Mlp::Dense(DenseMlp {
            ffn: t.ffn,
            gated: t.gated,
            bias: t.kind.biased(),
            activation: t.activation.clone(),
        }),
        norms: vec![(NormSlot::PreAttention, norm), (NormSlot::PreMlp, norm)],
        parallel_residual: false,
    };
    let positions = if t.position_rows == 0 {
        Positions::Rotary { theta: None }
    } else {
        Positions::Learned {
            rows: t.position_rows,
        }
    };
    ModelSpec {
        model_type: format!("{}_vision", v.family),
        naming: Naming::Llama,
        hidden_size: t.hidden,
        embedding: Embedding {
            dim: t.hidden,
            positions,
            token_types: 0,
            norm: None,
            projection: false,
        },
        encoder: None,
        decoder: Stack {
            layers: vec![layer],
            final_norm: None,
        },
        head: Head::None { pooler: false },
        dropout: Dropout::default(),
        quantization: None,
        softcapping: Default::default(),
        vision: None,
        ..spec.clone()
    }
}

/// What the tower and projector keep and their top, for the job's images of one micro-batch.
pub fn tower_forward(
    spec: &ModelSpec,
    job: &ResolvedJob,
    num: Numerics,
) -> Result<StageMemory, CoreError> {
    let (Some(v), Some(images)) = (spec.vision.as_ref(), job.images) else {
        return Ok(StageMemory::default());
    };
    let cost = image_cost(v, job)?;
    let n = job
        .batch
        .saturating_mul(images.count)
        .saturating_mul(cost.tower_images);
    let trains = tower_trains(v, job);
    let tspec = tower_spec(spec, v);
    let layer = &tspec.decoder.layers[0];
    let lora = job
        .peft
        .as_ref()
        .filter(|_| trains)
        .map(|p| (p.targets.as_slice(), p.rank, 0.05));
    let ctx = BlockCtx {
        spec: &tspec,
        batch: n,
        seq: cost.tower_seq,
        kv_seq: cost.tower_seq,
        num,
        kernel: job.attention,
        attn_dropout: 0.0,
        hidden_dropout: 0.0,
        causal: false,
        no_grad: !trains,
        lora,
        part: Part::Vision,
    };
    let full = block_memory(ctx, layer);
    let windowed = v.tower.window_patches.map(|w| {
        let windows = cost.tower_seq.div_ceil(w.max(1));
        block_memory(
            BlockCtx {
                batch: n.saturating_mul(windows),
                seq: w.min(cost.tower_seq),
                kv_seq: w.min(cost.tower_seq),
                ..ctx
            },
            layer,
        )
    });
    let tokens = n.saturating_mul(cost.tower_seq);
    let input = round_size(tokens * v.tower.hidden * num.param);
    let ckpt = trains && job.checkpointing != Checkpointing::None;
    let (mut kept, mut top) = (0u64, 0u64);
    for i in 0..v.tower.layers {
        let m = match windowed {
            Some(w) if !v.tower.full_attention_layers.contains(&i) => w,
            _ => full,
        };
        top = top.max(kept + m.peak);
        if trains && i < v.tower.layers_used {
            kept += if ckpt {
                input
            } else {
                (m.kept + m.weight_copies).saturating_sub(m.input_freed)
            };
        }
    }
    let proj_trains = trains || projector_trains(job);
    let proj = projector_kept(v, n, cost, num, proj_trains);
    // The pixels (`pixel_values`, one row per patch): the patch embedding saves them when the
    // tower trains.
    let t = &v.tower;
    let patch_px = t.channels * t.temporal_patch * t.patch * t.patch;
    let pixels = round_size(tokens.saturating_mul(patch_px) * num.param);
    if trains {
        kept += pixels;
    }
    Ok(StageMemory {
        kept: kept + proj,
        peak: top.max(kept + proj) + input + if trains { 0 } else { pixels },
        weight_copies: 0,
    })
}

fn projector_trains(job: &ResolvedJob) -> bool {
    job.task == Task::Train && job.peft.is_none() && !job.freeze.contains(&Part::Projector)
}

/// What the projector saves for backward when it (or the tower below it) trains: each linear
/// its input, the GELU its input, the norm its input and statistics
/// (`Qwen2_5_VLPatchMerger` / `PatchMerger`, `LlavaMultiModalProjector`,
/// `Gemma3MultiModalProjector`).
fn projector_kept(v: &Vision, images: u64, cost: ImageCost, num: Numerics, trains: bool) -> u64 {
    let seq = cost.tower_seq;
    if !trains {
        return 0;
    }
    let h = v.tower.hidden;
    let w = if num.autocast { 2 } else { num.compute };
    match v.projector {
        Projector::QwenMerger { merge, .. } => {
            let rows = images * seq / (merge * merge).max(1);
            let wide = h * merge * merge;
            // ln_q's input, then mlp.0's input, GELU's input and mlp.2's input.
            round_size(images * seq * h * num.param) + 3 * round_size(rows * wide * w)
        }
        Projector::LlavaMlp { out, .. } => {
            let rows = images * seq;
            round_size(rows * h * w) + 2 * round_size(rows * out * w)
        }
        Projector::Gemma3 { .. } => {
            let rows = images * cost.tokens;
            2 * round_size(rows * h * num.param)
        }
        _ => super::vision_projectors::projector_kept(v, images, cost, num),
    }
}
