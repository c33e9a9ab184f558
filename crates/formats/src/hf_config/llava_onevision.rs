//! LLaVA-OneVision (`configuration_llava_onevision.py`) and LLaVA with a Pixtral tower
//! (Pixtral-12B: `configuration_llava.py` whose `vision_config` is a `PixtralVisionConfig`),
//! each by its transformers configuration class (an absent key takes the class default).

use super::fields::Cfg;
use super::vision_parts::{pinpoints, vit};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::vision::{ImageTokens, Projector, TowerKind, Vision};

/// `LlavaOnevisionConfig`'s default `image_grid_pinpoints`: every (height, width) of 1 to 6
/// tiles of 384 px down and across.
fn default_pinpoints() -> Vec<(u64, u64)> {
    let sides = [384, 768, 1152, 1536, 1920, 2304];
    sides
        .iter()
        .flat_map(|&h| sides.iter().map(move |&w| (h, w)))
        .collect()
}

/// LLaVA-OneVision: a SigLIP tower (`LlavaOnevisionConfig`'s default: SO400M, 26 layers × 1152,
/// 384 px, 14 px patches, no pooling head), the LLaVA projector with the learned
/// `image_newline`, and "anyres_max_N" image tokens (`vision_aspect_ratio`, default
/// `anyres_max_9`). A `vision_config` that leaves out `vision_use_head` gets
/// `SiglipVisionConfig`'s default (true): the pooling head is built and counted.
pub(super) fn onevision(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let head = !v.obj.is_empty() && v.boolean("vision_use_head", true)?;
    let kind = if head {
        TowerKind::SiglipHead
    } else {
        TowerKind::Siglip
    };
    let mut tower = vit(v, kind, (1152, 4304, 26, 16, 384, 14, "gelu_pytorch_tanh"))?;
    tower.layers_used = feature_layers(t, tower.layers, -1)?;
    let image = v.size(&["image_size"], Some(384))?;
    let aspect = t.string("vision_aspect_ratio").unwrap_or("anyres_max_9");
    let max_tiles = aspect
        .strip_prefix("anyres_max_")
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            t.err(
                "vision_aspect_ratio",
                format!("'{aspect}' is not modelled (anyres_max_N is)"),
            )
        })?;
    let pinpoints = if t.obj.contains_key("image_grid_pinpoints") {
        pinpoints(t)?
    } else {
        default_pinpoints()
    };
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::AnyResMax {
            image_size: image,
            patch: tower.patch,
            pinpoints,
            max_tiles,
        },
        tower,
        projector: Projector::LlavaMlp {
            out: lm_hidden,
            image_newline: true,
        },
    })
}

/// The layers whose activations reach the projector for `vision_feature_layer` (negative:
/// counted from the end of `hidden_states`, whose first entry is the embeddings); a list of
/// layers (the projector widened per layer) is refused.
pub(super) fn feature_layers(t: &Cfg, layers: u64, default: i64) -> Result<u64> {
    let feature = match t.obj.get("vision_feature_layer") {
        None | Some(Value::Null) => default,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| t.err("vision_feature_layer", "must be an integer layer index"))?,
        Some(_) => {
            return Err(t.err(
                "vision_feature_layer",
                "a list of feature layers (the projector's input widened per layer) is not \
                 modelled",
            ))
        }
    };
    Ok(if feature < 0 {
        (layers as i64 + 1 + feature).clamp(0, layers as i64) as u64
    } else {
        (feature as u64).min(layers)
    })
}

/// Pixtral-12B: `LlavaForConditionalGeneration` over a `PixtralVisionModel`
/// (`vision_config.model_type: pixtral`). The LLaVA projector reads the tower's features
/// without a patch merger, so each 16 px patch is one token; the processor
/// (`processing_pixtral.py`, `spatial_merge_size` 1) ends each row of patches with
/// `[IMG_BREAK]` (the last with `[IMG_END]`): `rows · (cols + 1)` tokens.
pub(super) fn pixtral(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let mut tower = super::vision_families::pixtral_tower(v, 16)?;
    // `LlavaConfig`'s default feature layer is -2; Pixtral-12B's config says -1.
    tower.layers_used = feature_layers(t, tower.layers, -2)?;
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Pixtral {
            patch: tower.patch,
            merge: 1,
            longest_edge: v.size(&["image_size"], Some(1024))?,
        },
        tower,
        projector: Projector::LlavaMlp {
            out: lm_hidden,
            image_newline: false,
        },
    })
}
