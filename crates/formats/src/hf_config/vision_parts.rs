//! The readers every vision family shares: a CLIP / SigLIP tower with its family's defaults and
//! LLaVA-NeXT's tiling grid. A leaf: the family readers (`vision`, `vision_families`,
//! `llava_onevision`) import it, it imports none of them.

use super::fields::Cfg;
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::NormKind;
use vramscope_core::vision::{Tower, TowerKind};

/// A CLIP (`clip_vision_model`) or SigLIP tower with the family's defaults.
pub(super) fn vit(
    v: &Cfg,
    kind: TowerKind,
    d: (u64, u64, u64, u64, u64, u64, &str),
) -> Result<Tower> {
    let (hidden, ffn, layers, heads, image, patch, act) = d;
    let hidden = v.size(&["hidden_size"], Some(hidden))?;
    let image = v.size(&["image_size"], Some(image))?;
    let patch = v.size(&["patch_size"], Some(patch))?;
    let side = image / patch;
    let layers = v.layer_count(&["num_hidden_layers"], layers)?;
    Ok(Tower {
        kind,
        hidden,
        layers,
        layers_used: layers,
        heads: v.size(&["num_attention_heads"], Some(heads))?,
        ffn: v.size(&["intermediate_size"], Some(ffn))?,
        gated: false,
        norm: NormKind::LayerNorm { bias: true },
        activation: v.string("hidden_act").unwrap_or(act).to_string(),
        channels: v.size(&["num_channels"], Some(3))?,
        patch,
        temporal_patch: 1,
        position_rows: side * side + u64::from(kind == TowerKind::Clip),
        window_patches: None,
        full_attention_layers: Vec::new(),
    })
}

/// `image_grid_pinpoints` as (height, width) pairs (`LlavaNextConfig`'s default when absent).
pub(super) fn pinpoints(t: &Cfg) -> Result<Vec<(u64, u64)>> {
    let Some(list) = t.obj.get("image_grid_pinpoints").and_then(Value::as_array) else {
        return Ok(vec![
            (336, 672),
            (672, 336),
            (672, 672),
            (1008, 336),
            (336, 1008),
        ]);
    };
    list.iter()
        .map(|p| match p.as_array().map(|a| a.as_slice()) {
            Some([h, w]) => match (h.as_u64(), w.as_u64()) {
                (Some(h), Some(w)) if h > 0 && w > 0 => Ok((h, w)),
                _ => Err(t.err("image_grid_pinpoints", format!("bad entry {p}"))),
            },
            _ => Err(t.err(
                "image_grid_pinpoints",
                format!("entries must be [height, width] (got {p})"),
            )),
        })
        .collect()
}
