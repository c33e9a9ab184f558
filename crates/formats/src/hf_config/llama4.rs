//! Llama 4 (`llama4`, `configuration_llama4.py` / `modeling_llama4.py`,
//! `Llama4ForConditionalGeneration`): the vision tower with its pixel-shuffle adapter and the
//! projector from `vision_config` (`Llama4VisionConfig`'s defaults for absent keys), and the
//! image rule of `image_processing_llama4.py` (`max_patches` 16, a global tile). The language
//! model is `llama4_text` (`llama/new_families.rs`).

use super::fields::Cfg;
use crate::error::Result;
use vramscope_core::model::NormKind;
use vramscope_core::vision::{ImageTokens, Projector, Tower, TowerKind, Vision};

/// `Llama4ImageProcessor.max_patches`: the most tiles an image is split into.
const MAX_TILES: u64 = 16;

/// The tower (`Llama4VisionModel`), its adapter, the projector and the image rule.
/// `image_size` is the tile (336 in the published configs; the class default 448).
pub(crate) fn vision(v: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let hidden = v.size(&["hidden_size"], Some(768))?;
    let heads = v.size(&["num_attention_heads"], Some(16))?;
    if !hidden.is_multiple_of(heads) {
        return Err(v.err(
            "num_attention_heads",
            format!("{heads} does not divide hidden_size {hidden}"),
        ));
    }
    let layers = v.layer_count(&["num_hidden_layers"], 34)?;
    let tile = v.size(&["image_size"], Some(448))?;
    let patch = v.patch_within(14, tile)?;
    let shuffle = shuffle_factor(v)?;
    let side = tile / patch;
    if !side.is_multiple_of(shuffle) {
        return Err(v.err(
            "pixel_shuffle_ratio",
            format!("1/{shuffle} does not divide the tile's {side} patches a side"),
        ));
    }
    let ffn = v.size(&["intermediate_size"], Some(5632))?;
    Ok(Vision {
        family: String::new(),
        tower: Tower {
            kind: TowerKind::Llama4 {
                shuffle,
                projector_input: v.size(&["projector_input_dim"], Some(4096))?,
                projector_output: v.size(&["projector_output_dim"], Some(4096))?,
            },
            hidden,
            layers,
            layers_used: layers,
            heads,
            ffn,
            gated: false,
            norm: NormKind::LayerNorm { bias: true },
            // `Llama4VisionMLP` runs `nn.GELU()` whatever `hidden_act` says.
            activation: "gelu".to_string(),
            channels: v.size(&["num_channels"], Some(3))?,
            patch,
            temporal_patch: 1,
            position_rows: side * side + 1,
            window_patches: None,
            full_attention_layers: Vec::new(),
        },
        projector: Projector::Llama4 {
            input: v.size(&["vision_output_dim"], Some(7680))?,
            out: lm_hidden,
        },
        tokens: ImageTokens::Llama4 {
            tile,
            patch,
            shuffle,
            max_tiles: MAX_TILES,
        },
    })
}

/// `1 / pixel_shuffle_ratio` (0.5 → 2): `pixel_shuffle` reshapes by `int(width · ratio)` and
/// `int(channels / ratio)`, so only ratios `1/n` keep every value; others are refused.
fn shuffle_factor(v: &Cfg) -> Result<u64> {
    let ratio = match v.obj.get("pixel_shuffle_ratio") {
        None | Some(serde_json::Value::Null) => 0.5,
        Some(x) => x
            .as_f64()
            .ok_or_else(|| v.err("pixel_shuffle_ratio", format!("must be a number (got {x})")))?,
    };
    let inv = if ratio > 0.0 { 1.0 / ratio } else { 0.0 };
    if !(1.0..=16.0).contains(&inv) || (inv - inv.round()).abs() > 1e-9 {
        return Err(v.err(
            "pixel_shuffle_ratio",
            format!("{ratio} is not 1/n for a whole n from 1 to 16"),
        ));
    }
    Ok(inv.round() as u64)
}
