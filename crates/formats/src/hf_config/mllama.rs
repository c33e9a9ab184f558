//! Llama-3.2-Vision (`mllama`, `configuration_mllama.py`): the vision tower and projector from
//! `vision_config` (`MllamaVisionConfig`'s defaults for absent keys) and the language model's
//! cross-attention layers from `text_config.cross_attention_layers` (`MllamaTextConfig`).

use super::fields::Cfg;
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::{Head, ModelSpec, Norm, NormKind};
use vramscope_core::vision::{ImageTokens, Projector, Tower, TowerKind, Vision};

/// `MllamaVisionConfig`'s default `supported_aspect_ratios` for 4 tiles (8 arrangements).
const DEFAULT_ASPECT_RATIOS: u64 = 8;
/// `MllamaTextConfig`'s default `cross_attention_layers`.
const DEFAULT_CROSS_LAYERS: [u64; 8] = [3, 8, 13, 18, 23, 28, 33, 38];

/// The tower (`MllamaVisionModel`), its projector and the image rule. `image_size` is the
/// tile (560 in the published configs; the class default 448).
pub(crate) fn vision(v: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let hidden = v.size(&["hidden_size"], Some(1280))?;
    let layers = v.layer_count(&["num_hidden_layers"], 32)?;
    let global_layers = v.layer_count(&["num_global_layers"], 8)?;
    let heads = v.size(&["attention_heads", "num_attention_heads"], Some(16))?;
    let tile = v.size(&["image_size"], Some(448))?;
    let patch = v.patch_within(14, tile)?;
    let tiles = v.size(&["max_num_tiles"], Some(4))?;
    if tiles > 64 {
        return Err(v.err(
            "max_num_tiles",
            format!("{tiles} is more than vramscope accepts (64)"),
        ));
    }
    let aspect_ratios = match v.obj.get("supported_aspect_ratios") {
        None | Some(Value::Null) => DEFAULT_ASPECT_RATIOS,
        Some(Value::Array(a)) if !a.is_empty() => a.len() as u64,
        Some(other) => {
            return Err(v.err(
                "supported_aspect_ratios",
                format!("must be a non-empty list of [w, h] pairs (got {other})"),
            ))
        }
    };
    let indices = match v.obj.get("intermediate_layers_indices") {
        None | Some(Value::Null) => vec![3, 7, 15, 23, 30],
        Some(_) => v.uint_list("intermediate_layers_indices")?,
    };
    if let Some(i) = indices.iter().find(|i| **i >= layers) {
        return Err(v.err(
            "intermediate_layers_indices",
            format!("index {i} is beyond num_hidden_layers {layers}"),
        ));
    }
    let intermediate = indices.len() as u64;
    let concat = hidden.saturating_mul(intermediate + 1);
    let input = v.size(&["vision_output_dim"], Some(concat))?;
    Ok(Vision {
        family: String::new(),
        tower: Tower {
            kind: TowerKind::Mllama {
                global_layers,
                tiles,
                aspect_ratios,
                intermediate,
            },
            hidden,
            layers,
            layers_used: layers,
            heads,
            ffn: v.size(&["intermediate_size"], Some(5120))?,
            gated: false,
            norm: NormKind::LayerNorm { bias: true },
            activation: v.string("hidden_act").unwrap_or("gelu").to_string(),
            channels: v.size(&["num_channels"], Some(3))?,
            patch,
            temporal_patch: 1,
            position_rows: vramscope_core::vision::mllama::tile_positions(tile, patch),
            window_patches: None,
            full_attention_layers: Vec::new(),
        },
        projector: Projector::Mllama {
            input,
            out: lm_hidden,
        },
        tokens: ImageTokens::Mllama {
            tile,
            patch,
            max_tiles: tiles,
        },
    })
}

/// Marks the language model's `cross_attention_layers` as `MllamaCrossAttentionDecoderLayer`s
/// (cross-attention with per-head `q_norm`/`k_norm` RMSNorms, gates) and unties the head:
/// `MllamaForConditionalGeneration` declares no tied weights, whatever `tie_word_embeddings`
/// says.
pub(crate) fn cross_layers(spec: &mut ModelSpec, text: &Cfg) -> Result<()> {
    let list = match text.obj.get("cross_attention_layers") {
        None | Some(Value::Null) => DEFAULT_CROSS_LAYERS.to_vec(),
        Some(_) => text.uint_list("cross_attention_layers")?,
    };
    let layers = spec.decoder.layers.len() as u64;
    if let Some(i) = list.iter().find(|i| **i >= layers) {
        return Err(text.err(
            "cross_attention_layers",
            format!("index {i} is beyond num_hidden_layers {layers}"),
        ));
    }
    for i in list {
        let layer = &mut spec.decoder.layers[i as usize];
        let head_dim = layer.attention.kind.qk_head_dim();
        layer.attention.vision_cross = true;
        layer.attention.qk_norm = Some(Norm::rms(head_dim));
        layer.attention.sliding_window = None;
    }
    spec.head = Head::LanguageModel {
        tied: false,
        bias: false,
    };
    Ok(())
}
