//! The vision tower's and projector's parameter tensors, named as transformers 5.x names the
//! modules (`model.visual.…`, `model.vision_tower.…`, `model.multi_modal_projector.…`).

use super::blocks::{block, Out};
use super::{Part, Projector, TowerKind, Vision};
use crate::dtype::DType;
use crate::error::CoreError;
use crate::inventory::{Component, Tensor};
use crate::model::norm::NormKind;

impl Part {
    /// The component a tensor belongs to, read from its name: `visual.` (Qwen-VL),
    /// `vision_tower.` / `vision_model.` (LLaVA, Gemma 3, Idefics) are the tower; Qwen's
    /// `visual.merger.`, `multi_modal_projector.`, `image_newline`, `connector.` and Gemma 3n's
    /// `embed_vision.` / `embed_audio.` the projector; `audio_tower.` the audio tower; the rest
    /// the language model.
    /// The part of a tensor the model loads but never runs
    /// ([`crate::model::ModelSpec::idle_tensors`]): an audio tower's or an audio embedder's
    /// (`audio` in its name: Gemma 4's `embed_audio`, which runs only with audio input, where
    /// Gemma 3n's runs on every forward and is the projector) is the audio part; the rest as
    /// [`Part::of_name`] reads it.
    pub fn of_idle_name(name: &str) -> Part {
        if name.contains("audio") {
            Part::Audio
        } else {
            Part::of_name(name)
        }
    }

    pub fn of_name(name: &str) -> Part {
        let has = |s: &str| name.starts_with(s) || name.contains(&format!(".{s}"));
        if has("visual.merger.")
            || has("visual.deepstack_merger_list.")
            || has("multi_modal_projector.")
            || has("image_newline")
            || has("connector.")
            || has("embed_vision.")
            || has("embed_audio.")
        {
            Part::Projector
        } else if has("audio_tower.") {
            Part::Audio
        } else if has("visual.") || has("vision_tower.") || has("vision_model.") {
            Part::Vision
        } else {
            Part::Language
        }
    }
}

/// Appends the tower's and the projector's tensors of `v` to `out` (outside the language
/// model's layer stack: `layer` is `None`).
pub fn vision_tensors(v: &Vision, dtype: DType, out: &mut Vec<Tensor>) -> Result<(), CoreError> {
    let mut o = Out { dtype, out };
    tower(v, &mut o)?;
    projector(v, &mut o)
}

/// The tower's root, its embeddings, its blocks and its final norm (`modeling_qwen2_vl.py`
/// `Qwen2VisionTransformerPretrainedModel`, `modeling_clip.py` `CLIPVisionTransformer`,
/// `modeling_siglip.py` `SiglipVisionTransformer`).
fn tower(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let h = t.hidden;
    let (root, layers) = match t.kind {
        TowerKind::Pixtral | TowerKind::Qwen3 | TowerKind::InternVit { .. } => {
            return super::families::tower(v, o)
        }
        TowerKind::Mllama {
            global_layers,
            tiles,
            aspect_ratios,
            ..
        } => return super::mllama::tower(v, o, global_layers, tiles, aspect_ratios),
        TowerKind::Siglip2 { .. } => return super::siglip2::tower(v, o),
        TowerKind::Llama4 {
            projector_input,
            projector_output,
            ..
        } => return super::llama4::tower(v, o, projector_input, projector_output),
        TowerKind::Gemma4 {
            kv_heads,
            head_dim,
            positions,
            ..
        } => return super::gemma4::tower(v, o, kv_heads, head_dim, positions),
        TowerKind::Qwen => ("model.visual", "model.visual.blocks"),
        TowerKind::Idefics3 => ("model.vision_model", "model.vision_model.encoder.layers"),
        TowerKind::Clip | TowerKind::Siglip | TowerKind::SiglipHead => {
            ("model.vision_tower", "model.vision_tower.encoder.layers")
        }
    };
    let e = Component::Embedding;
    match t.kind {
        TowerKind::Qwen => {
            let shape = vec![h, t.channels, t.temporal_patch, t.patch, t.patch];
            o.push(format!("{root}.patch_embed.proj.weight"), shape, e)?;
        }
        _ => {
            if t.kind == TowerKind::Clip {
                o.push(format!("{root}.embeddings.class_embedding"), vec![h], e)?;
            }
            let shape = vec![h, t.channels, t.patch, t.patch];
            o.push(
                format!("{root}.embeddings.patch_embedding.weight"),
                shape,
                e,
            )?;
            if t.kind != TowerKind::Clip {
                o.push(
                    format!("{root}.embeddings.patch_embedding.bias"),
                    vec![h],
                    e,
                )?;
            }
            let rows = vec![t.position_rows, h];
            o.push(
                format!("{root}.embeddings.position_embedding.weight"),
                rows,
                e,
            )?;
            if t.kind == TowerKind::Clip {
                o.norm(&format!("{root}.pre_layrnorm"), t.norm, h)?;
            }
        }
    }
    for i in 0..t.layers {
        block(v, &format!("{layers}.{i}"), o)?;
    }
    if t.kind != TowerKind::Qwen {
        o.norm(&format!("{root}.post_layernorm"), t.norm, h)?;
    }
    if t.kind == TowerKind::SiglipHead {
        super::blocks::siglip_head(v, &format!("{root}.head"), o)?;
    }
    Ok(())
}

/// The projector's tensors (`PatchMerger`, `LlavaMultiModalProjector`,
/// `Gemma3MultiModalProjector`).
fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let h = v.tower.hidden;
    let m = Component::Mlp;
    match v.projector {
        Projector::QwenMerger { merge, norm, out } => {
            let wide = h * merge * merge;
            o.norm("model.visual.merger.ln_q", norm, h)?;
            o.linear("model.visual.merger.mlp.0", wide, wide, true, m)?;
            o.linear("model.visual.merger.mlp.2", wide, out, true, m)
        }
        Projector::LlavaMlp { out, image_newline } => {
            o.linear("model.multi_modal_projector.linear_1", h, out, true, m)?;
            o.linear("model.multi_modal_projector.linear_2", out, out, true, m)?;
            if image_newline {
                o.push(
                    "model.image_newline".into(),
                    vec![out],
                    Component::Embedding,
                )?;
            }
            Ok(())
        }
        Projector::Mistral3 { .. }
        | Projector::PixelShuffle { .. }
        | Projector::Qwen3Merger { .. }
        | Projector::InternVl { .. } => super::families::projector(v, o),
        Projector::Mllama { .. } => super::mllama::projector(v, o),
        Projector::PaliGemma { .. } | Projector::Lfm2Vl { .. } => super::siglip2::projector(v, o),
        Projector::Llama4 { .. } => super::llama4::projector(v, o),
        Projector::Gemma4 { .. } => super::gemma4::projector(v, o),
        Projector::Gemma3 { out } => {
            let name = "model.multi_modal_projector.mm_input_projection_weight";
            o.push(name.into(), vec![h, out], m)?;
            o.norm(
                "model.multi_modal_projector.mm_soft_emb_norm",
                NormKind::RmsNorm,
                h,
            )
        }
    }
}
