//! The tensors of the towers and projectors whose layout differs from the ViT blocks of
//! `inventory.rs`: Pixtral (Mistral 3), Qwen3-VL's tower and DeepStack mergers, the pixel
//! shuffle connector of Idefics3 / SmolVLM and Mistral 3's patch-merging projector — named as
//! transformers 5.x names them.

use super::blocks::{block, Out};
use super::{Projector, TowerKind, Vision};
use crate::error::CoreError;
use crate::inventory::Component;
use crate::model::norm::NormKind;

/// Pixtral's and Qwen3-VL's towers (`modeling_pixtral.py` `PixtralVisionModel`:
/// `patch_conv` without bias, `ln_pre`, `transformer.layers.N.{attention_norm,
/// attention.{q,k,v,o}_proj, ffn_norm, feed_forward.{gate,up,down}_proj}`;
/// `modeling_qwen3_vl.py` `Qwen3VLVisionModel`: `patch_embed.proj` (3-D, biased), `pos_embed`,
/// `blocks.N`).
pub(super) fn tower(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let h = t.hidden;
    let e = Component::Embedding;
    if let TowerKind::InternVit { .. } = t.kind {
        return intern_vit(v, o);
    }
    if t.kind == TowerKind::Qwen3 {
        let root = "model.visual";
        let shape = vec![h, t.channels, t.temporal_patch, t.patch, t.patch];
        o.push(format!("{root}.patch_embed.proj.weight"), shape, e)?;
        o.push(format!("{root}.patch_embed.proj.bias"), vec![h], e)?;
        o.push(
            format!("{root}.pos_embed.weight"),
            vec![t.position_rows, h],
            e,
        )?;
        for i in 0..t.layers {
            block(v, &format!("{root}.blocks.{i}"), o)?;
        }
        return Ok(());
    }
    let root = "model.vision_tower";
    let shape = vec![h, t.channels, t.patch, t.patch];
    o.push(format!("{root}.patch_conv.weight"), shape, e)?;
    o.norm(&format!("{root}.ln_pre"), NormKind::RmsNorm, h)?;
    let (a, m) = (Component::Attention, Component::Mlp);
    for i in 0..t.layers {
        let p = format!("{root}.transformer.layers.{i}");
        o.norm(&format!("{p}.attention_norm"), NormKind::RmsNorm, h)?;
        for proj in ["k_proj", "v_proj", "q_proj", "o_proj"] {
            o.linear(&format!("{p}.attention.{proj}"), h, h, false, a)?;
        }
        o.norm(&format!("{p}.ffn_norm"), NormKind::RmsNorm, h)?;
        o.linear(&format!("{p}.feed_forward.gate_proj"), h, t.ffn, false, m)?;
        o.linear(&format!("{p}.feed_forward.up_proj"), h, t.ffn, false, m)?;
        o.linear(&format!("{p}.feed_forward.down_proj"), t.ffn, h, false, m)?;
    }
    Ok(())
}

/// InternViT (`modeling_internvl.py` `InternVLVisionEmbeddings`, `InternVLVisionLayer`,
/// `InternVLVisionModel`), under `model.vision_tower`.
fn intern_vit(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let TowerKind::InternVit {
        qkv_bias,
        qk_norm,
        final_norm,
        mask_token,
    } = t.kind
    else {
        return Ok(());
    };
    let (h, e) = (t.hidden, Component::Embedding);
    let root = "model.vision_tower";
    o.push(format!("{root}.embeddings.cls_token"), vec![1, 1, h], e)?;
    if mask_token {
        o.push(format!("{root}.embeddings.mask_token"), vec![1, 1, h], e)?;
    }
    let conv = format!("{root}.embeddings.patch_embeddings.projection");
    o.push(
        format!("{conv}.weight"),
        vec![h, t.channels, t.patch, t.patch],
        e,
    )?;
    o.push(format!("{conv}.bias"), vec![h], e)?;
    if t.position_rows > 0 {
        let rows = vec![1, t.position_rows, h];
        o.push(format!("{root}.embeddings.position_embeddings"), rows, e)?;
    }
    let (a, m) = (Component::Attention, Component::Mlp);
    for i in 0..t.layers {
        let p = format!("{root}.encoder.layer.{i}");
        o.push(format!("{p}.lambda_1"), vec![h], Component::Norm)?;
        o.push(format!("{p}.lambda_2"), vec![h], Component::Norm)?;
        for proj in ["q_proj", "k_proj", "v_proj"] {
            o.linear(&format!("{p}.attention.{proj}"), h, h, qkv_bias, a)?;
        }
        o.linear(&format!("{p}.attention.projection_layer"), h, h, true, a)?;
        if qk_norm {
            o.norm(&format!("{p}.attention.q_norm"), NormKind::RmsNorm, h)?;
            o.norm(&format!("{p}.attention.k_norm"), NormKind::RmsNorm, h)?;
        }
        o.linear(&format!("{p}.mlp.fc1"), h, t.ffn, true, m)?;
        o.linear(&format!("{p}.mlp.fc2"), t.ffn, h, true, m)?;
        o.norm(&format!("{p}.layernorm_before"), t.norm, h)?;
        o.norm(&format!("{p}.layernorm_after"), t.norm, h)?;
    }
    if final_norm {
        o.norm(
            &format!("{root}.layernorm"),
            NormKind::LayerNorm { bias: true },
            h,
        )?;
    }
    Ok(())
}

/// The projectors of `Mistral3MultiModalProjector` (`modeling_mistral3.py`),
/// `Idefics3Connector` (`modeling_idefics3.py`) and `Qwen3VLVisionPatchMerger`
/// (`modeling_qwen3_vl.py`, the main merger and `deepstack_merger_list`).
pub(super) fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let h = v.tower.hidden;
    let m = Component::Mlp;
    match v.projector {
        Projector::Mistral3 { merge, out, bias } => {
            let p = "model.multi_modal_projector";
            o.norm(&format!("{p}.norm"), NormKind::RmsNorm, h)?;
            let wide = h * merge * merge;
            o.linear(
                &format!("{p}.patch_merger.merging_layer"),
                wide,
                h,
                false,
                m,
            )?;
            o.linear(&format!("{p}.linear_1"), h, out, bias, m)?;
            o.linear(&format!("{p}.linear_2"), out, out, bias, m)
        }
        Projector::PixelShuffle { scale, out } => {
            let wide = h * scale * scale;
            o.linear(
                "model.connector.modality_projection.proj",
                wide,
                out,
                false,
                m,
            )
        }
        Projector::Qwen3Merger {
            merge,
            out,
            deepstack,
        } => {
            let wide = h * merge * merge;
            let ln = NormKind::LayerNorm { bias: true };
            let merger = |o: &mut Out, p: &str, norm_dim: u64| -> Result<(), CoreError> {
                o.norm(&format!("{p}.norm"), ln, norm_dim)?;
                o.linear(&format!("{p}.linear_fc1"), wide, wide, true, m)?;
                o.linear(&format!("{p}.linear_fc2"), wide, out, true, m)
            };
            merger(o, "model.visual.merger", h)?;
            for i in 0..deepstack {
                merger(o, &format!("model.visual.deepstack_merger_list.{i}"), wide)?;
            }
            Ok(())
        }
        Projector::InternVl { scale, out } => {
            let wide = h * scale * scale;
            let p = "model.multi_modal_projector";
            o.norm(
                &format!("{p}.layer_norm"),
                NormKind::LayerNorm { bias: true },
                wide,
            )?;
            o.linear(&format!("{p}.linear_1"), wide, out, true, m)?;
            o.linear(&format!("{p}.linear_2"), out, out, true, m)
        }
        _ => Ok(()),
    }
}
