//! The SigLIP2 NaFlex tower (LFM2-VL) and the PaliGemma and LFM2-VL projectors, named as
//! transformers 5.x names them (`model.vision_tower.vision_model.…`,
//! `model.multi_modal_projector.…`).

use super::blocks::{block, Out};
use super::{Projector, TowerKind, Vision};
use crate::error::CoreError;
use crate::inventory::Component;
use crate::model::norm::NormKind;

/// `Siglip2VisionModel` (`modeling_siglip2.py`): `Siglip2VisionEmbeddings` (`patch_embedding`,
/// an `nn.Linear(num_channels · patch², hidden)` with bias; `position_embedding`, an
/// `nn.Embedding(num_patches, hidden)`), the SigLIP encoder layers, `post_layernorm` and, when
/// `vision_use_head`, `Siglip2MultiheadAttentionPoolingHead` (SigLIP's head).
pub(super) fn tower(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let h = t.hidden;
    let root = "model.vision_tower.vision_model";
    let e = Component::Embedding;
    let px = t.channels * t.patch * t.patch;
    o.linear(
        &format!("{root}.embeddings.patch_embedding"),
        px,
        h,
        true,
        e,
    )?;
    o.push(
        format!("{root}.embeddings.position_embedding.weight"),
        vec![t.position_rows, h],
        e,
    )?;
    for i in 0..t.layers {
        block(v, &format!("{root}.encoder.layers.{i}"), o)?;
    }
    o.norm(&format!("{root}.post_layernorm"), t.norm, h)?;
    if let TowerKind::Siglip2 { head: true } = t.kind {
        // `Siglip2MultiheadAttentionPoolingHead` is SigLIP's head, tensor for tensor.
        super::blocks::siglip_head(v, &format!("{root}.head"), o)?;
    }
    Ok(())
}

/// `PaliGemmaMultiModalProjector.linear` (`modeling_paligemma.py`: `nn.Linear(vision
/// hidden_size, projection_dim, bias=True)`) and `Lfm2VlMultiModalProjector`
/// (`modeling_lfm2_vl.py`: `layer_norm` over `hidden · factor²` when
/// `projector_use_layernorm`, `linear_1`, `linear_2`).
pub(super) fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    let h = v.tower.hidden;
    let m = Component::Mlp;
    let p = "model.multi_modal_projector";
    match v.projector {
        Projector::PaliGemma { out } => o.linear(&format!("{p}.linear"), h, out, true, m),
        Projector::Lfm2Vl {
            scale,
            inner,
            out,
            norm,
            bias,
        } => {
            let wide = h * scale * scale;
            if norm {
                let ln = NormKind::LayerNorm { bias: true };
                o.norm(&format!("{p}.layer_norm"), ln, wide)?;
            }
            o.linear(&format!("{p}.linear_1"), wide, inner, bias, m)?;
            o.linear(&format!("{p}.linear_2"), inner, out, bias, m)
        }
        _ => Ok(()),
    }
}
