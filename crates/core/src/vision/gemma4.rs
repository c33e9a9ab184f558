//! Gemma 4's vision side (`gemma4`, transformers 5.24 `models/gemma4/modeling_gemma4.py`:
//! `Gemma4VisionModel`, `Gemma4MultimodalEmbedder`; `image_processing_gemma4.py`,
//! `processing_gemma4.py`): the tower's and the embedder's tensors, and one image's tokens.

use super::blocks::Out;
use super::cost::ImageCost;
use super::{Projector, Vision};
use crate::error::CoreError;
use crate::inventory::Component;
use crate::model::NormKind;

/// The tower under `model.vision_tower` (`Gemma4VisionModel.__init__`): the patch embedder
/// (`input_proj` `[hidden, 3·patch²]` without bias, `position_embedding_table` `[2,
/// position_embedding_size, hidden]`), the encoder layers (`Gemma4VisionEncoderLayer`: q/k/v/o
/// `Gemma4ClippableLinear`s — each an `nn.Linear(bias=False)` named `.linear`, its clipping
/// bounds buffers — `q_norm` and `k_norm` over `head_dim`, the weightless `v_norm`, the gated
/// MLP, four RMS norms); the pooler has no parameters and `std_bias` / `std_scale` are buffers.
/// The kind's `kv_heads`, `head_dim` and `positions` are passed in by the dispatch
/// (`inventory::tower`).
pub(super) fn tower(
    v: &Vision,
    o: &mut Out,
    kv_heads: u64,
    head_dim: u64,
    positions: u64,
) -> Result<(), CoreError> {
    let t = &v.tower;
    let (h, e) = (t.hidden, Component::Embedding);
    let root = "model.vision_tower";
    let px = t.channels * t.patch * t.patch;
    o.linear(
        &format!("{root}.patch_embedder.input_proj"),
        px,
        h,
        false,
        e,
    )?;
    o.push(
        format!("{root}.patch_embedder.position_embedding_table"),
        vec![2, positions, h],
        e,
    )?;
    let (a, m) = (Component::Attention, Component::Mlp);
    for i in 0..t.layers {
        let p = format!("{root}.encoder.layers.{i}");
        let q = t.heads * head_dim;
        let kv = kv_heads * head_dim;
        for (proj, inp, out) in [("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv)] {
            o.linear(&format!("{p}.self_attn.{proj}.linear"), inp, out, false, a)?;
        }
        o.linear(&format!("{p}.self_attn.o_proj.linear"), q, h, false, a)?;
        o.norm(
            &format!("{p}.self_attn.q_norm"),
            NormKind::RmsNorm,
            head_dim,
        )?;
        o.norm(
            &format!("{p}.self_attn.k_norm"),
            NormKind::RmsNorm,
            head_dim,
        )?;
        o.linear(&format!("{p}.mlp.gate_proj.linear"), h, t.ffn, false, m)?;
        o.linear(&format!("{p}.mlp.up_proj.linear"), h, t.ffn, false, m)?;
        o.linear(&format!("{p}.mlp.down_proj.linear"), t.ffn, h, false, m)?;
        for n in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            o.norm(&format!("{p}.{n}"), NormKind::RmsNorm, h)?;
        }
    }
    Ok(())
}

/// `Gemma4MultimodalEmbedder` (`embed_vision`): the weightless
/// `embedding_pre_projection_norm` and `embedding_projection` from the tower's width to the
/// text width, no bias.
pub(super) fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    if let Projector::Gemma4 { out } = v.projector {
        let name = "model.embed_vision.embedding_projection";
        o.linear(name, v.tower.hidden, out, false, Component::Mlp)?;
    }
    Ok(())
}

/// `get_aspect_ratio_preserving_size` (`image_processing_gemma4.py`), exactly (Python floats):
/// the largest `(height, width)` in multiples of `pooling · patch` whose patches fit
/// `max_patches`, the aspect ratio kept; a side that rounds to 0 becomes one multiple and the
/// other the whole ratio's multiples, capped at `(max_patches / pooling²)` multiples.
fn resized(
    (height, width): (u64, u64),
    patch: u64,
    pooling: u64,
    max_patches: u64,
) -> Result<(u64, u64), String> {
    let (h, w) = (height as f64, width as f64);
    let target_px = max_patches.saturating_mul(patch * patch);
    let factor = (target_px as f64 / (h * w)).sqrt();
    let side = pooling * patch;
    let mut th = (factor * h / side as f64).floor() as u64 * side;
    let mut tw = (factor * w / side as f64).floor() as u64 * side;
    if th == 0 && tw == 0 {
        return Err(format!(
            "a {width}×{height} image resizes to 0×0 (Gemma 4's processor refuses it)"
        ));
    }
    let max_side = (max_patches / (pooling * pooling)) * side;
    if th == 0 {
        th = side;
        tw = ((w / h).floor() as u64 * side).min(max_side);
    } else if tw == 0 {
        tw = side;
        th = ((h / w).floor() as u64 * side).min(max_side);
    }
    if th.saturating_mul(tw) > target_px {
        return Err(format!(
            "a {width}×{height} image resizes to {tw}×{th}, beyond {max_patches} patches \
             (Gemma 4's processor refuses it)"
        ));
    }
    Ok((th, tw))
}

/// One image under Gemma 4's processor: `Gemma4ImageProcessor._preprocess` resizes it
/// ([`resized`]) to `ph × pw` patches with `max_patches = max_soft_tokens · pooling²` and pads
/// its patches to `max_patches` rows, so the tower always runs over `max_patches` positions
/// (`Gemma4VisionModel.forward`); the pooler averages each `pooling × pooling` block into one
/// soft token, `ph·pw / pooling²` of them, and `processing_gemma4.py`
/// `replace_image_token` writes `<boi>` + that many image tokens + `<eoi>`.
pub fn cost(
    (height, width): (u64, u64),
    patch: u64,
    pooling: u64,
    max_soft_tokens: u64,
) -> Result<ImageCost, String> {
    let max_patches = max_soft_tokens.saturating_mul(pooling * pooling);
    let (h, w) = resized((height, width), patch, pooling, max_patches)?;
    let soft = (h / patch) * (w / patch) / (pooling * pooling);
    Ok(ImageCost {
        tokens: soft + 2,
        tower_images: 1,
        tower_seq: max_patches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Patch 16, pooling 3, 280 soft tokens: 2,520 patches, `target_px` 2,520·256 = 645,120,
    /// sides in multiples of 48.
    #[test]
    fn published_budget() {
        // 1024×1024: factor √(645120/1048576) = 0.78438; 803.2 / 48 = 16.7 → 16·48 = 768 a
        // side; 48² patches / 9 = 256 soft tokens, + <boi>, <eoi> = 258.
        let c = cost((1024, 1024), 16, 3, 280).unwrap();
        assert_eq!((c.tokens, c.tower_images, c.tower_seq), (258, 1, 2520));
        // 480 high × 640 wide: factor √(645120/307200) = 1.44914; 695.6/48 → 14·48 = 672,
        // 927.4/48 → 19·48 = 912; 42·57 patches = 2394 / 9 = 266 soft tokens → 268.
        let c = cost((480, 640), 16, 3, 280).unwrap();
        assert_eq!(c.tokens, 268);
        // 10 high × 4000 wide: height rounds to 0 → 48; width min(400·48, (280)·48 = 13440)
        // = 13440: 3 × 840 patches = 2520 / 9 = 280 → 282.
        let c = cost((10, 4000), 16, 3, 280).unwrap();
        assert_eq!(c.tokens, 282);
    }

    /// The tiny measured config: patch 8, pooling 3, 70 soft tokens (630 patches), a 192 px
    /// square: factor √(630·64/36864) = 1.04583, 200.8 / 24 → 8·24 = 192; 24² patches / 9 =
    /// 64 soft tokens → 66.
    #[test]
    fn tiny_budget() {
        let c = cost((192, 192), 8, 3, 70).unwrap();
        assert_eq!((c.tokens, c.tower_seq), (66, 630));
    }
}
