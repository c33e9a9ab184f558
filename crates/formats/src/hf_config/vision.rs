//! Vision-language models: the vision tower and projector from `vision_config` and the
//! top-level fields, each family by its transformers configuration class
//! (`configuration_qwen2_vl.py`, `configuration_qwen2_5_vl.py`, `configuration_llava.py`,
//! `configuration_llava_next.py`, `configuration_gemma3.py`, `configuration_clip.py`,
//! `configuration_siglip.py`: an absent key takes the class default), and the image-token rule
//! from the family's processor (`preprocessor_config.json` may override it:
//! [`apply_preprocessor`]).

use super::fields::Cfg;
use super::vision_parts::{pinpoints, vit};
use crate::error::Result;
use serde_json::{Map, Value};
use vramscope_core::model::{ModelSpec, NormKind};
use vramscope_core::vision::{ImageTokens, Projector, Tower, TowerKind, Vision};

/// The top-level `model_type`s read as vision-language models.
pub const VISION_TYPES: &[&str] = &[
    "qwen2_vl",
    "qwen2_5_vl",
    "llava",
    "llava_next",
    "gemma3",
    "mistral3",
    "idefics3",
    "smolvlm",
    "qwen3_vl",
    "internvl",
    "llava_onevision",
    "mllama",
    "qwen3_vl_moe",
    "qwen3_5",
    "qwen3_5_moe",
    "paligemma",
    "lfm2_vl",
    "llama4",
    "gemma4",
];

/// The VLM wrappers whose configuration class builds a default sub-config that is not its
/// family's own defaults (transformers 5.24.0: `Qwen2VLConfig`'s text config is a 72B,
/// `Mistral3Config`'s a 24B, `Gemma3Config`'s vision tower SigLIP-base, ...; the table
/// `tests/fixtures/defaults/transformers-5.24.0.json`): a config that leaves one out is refused
/// rather than counted with the wrong defaults.
const OWN_DEFAULT_SUBCONFIGS: &[&str] = &[
    "gemma3",
    "qwen2_vl",
    "qwen2_5_vl",
    "mistral3",
    "internvl",
    "qwen3_vl_moe",
    "mllama",
    "paligemma",
];

/// Refuses a VLM config of [`OWN_DEFAULT_SUBCONFIGS`] without its `text_config` (Qwen2-VL's
/// 4.x configs keep the text fields at the top level: `hidden_size` there counts) or its
/// `vision_config`.
pub(crate) fn check_subconfigs(
    top: &Map<String, Value>,
    top_type: &str,
    origin: &str,
) -> Result<()> {
    if !OWN_DEFAULT_SUBCONFIGS.contains(&top_type) {
        return Ok(());
    }
    let text_at_top = top_type.starts_with("qwen2") && top.contains_key("hidden_size");
    check_text_keys(top, top_type, origin)?;
    for key in ["text_config", "vision_config"] {
        let given =
            top.get(key).is_some_and(Value::is_object) || (key == "text_config" && text_at_top);
        if !given {
            return Err(crate::error::FormatError::Unsupported {
                path: origin.to_string(),
                reason: format!(
                    "'{top_type}' config has no {key}: transformers would build its \
                     configuration class's default {key}, whose defaults vramscope does not \
                     read; give the model's own config.json"
                ),
            });
        }
    }
    Ok(())
}

/// The keys whose class defaults `Qwen2VLTextConfig` and `Qwen2_5_VLTextConfig` alike do not
/// share with `Qwen2Config` (one list for both rows of [`TEXT_CLASS_DEFAULTS`]).
const QWEN2_VL_TEXT_KEYS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
];

/// VLM wrappers whose text sub-config class has defaults of its own, not those of the family
/// the reader reads the language model as: the keys whose defaults differ (transformers 5.24.0,
/// the class defaults against the inner family's), and the class. A `text_config` given as a
/// dict is built with its class's own defaults (`configuration_utils.py` `SubConfigSpec`), so
/// leaving one of these keys out takes a default vramscope's reading does not share.
const TEXT_CLASS_DEFAULTS: &[(&str, &str, &[&str])] = &[
    ("qwen2_vl", "Qwen2VLTextConfig", QWEN2_VL_TEXT_KEYS),
    ("qwen2_5_vl", "Qwen2_5_VLTextConfig", QWEN2_VL_TEXT_KEYS),
    (
        "qwen3_vl_moe",
        "Qwen3VLMoeTextConfig",
        &[
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "moe_intermediate_size",
            "num_experts",
            "num_experts_per_tok",
        ],
    ),
    (
        "mllama",
        "MllamaTextConfig",
        &[
            "vocab_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_key_value_heads",
        ],
    ),
];

/// Refuses a VLM config whose language model leaves a key of [`TEXT_CLASS_DEFAULTS`] to its
/// text class's defaults (the text fields at the top level, Qwen2-VL's 4.x configs, count as
/// the text config).
fn check_text_keys(top: &Map<String, Value>, top_type: &str, origin: &str) -> Result<()> {
    let Some((_, class, keys)) = TEXT_CLASS_DEFAULTS.iter().find(|(t, _, _)| *t == top_type) else {
        return Ok(());
    };
    let text = match top.get("text_config").and_then(Value::as_object) {
        Some(t) => t,
        None if top.contains_key("hidden_size") => top,
        None => return Ok(()),
    };
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| text.get(*k).is_none_or(Value::is_null))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(crate::error::FormatError::Unsupported {
        path: origin.to_string(),
        reason: format!(
            "'{top_type}' text config leaves {} to {class}'s own defaults (transformers 5.24), \
             which vramscope's reading of its language model does not share; refusing to guess \
             (give the model's own config.json)",
            missing.join(", ")
        ),
    })
}

/// The language model's family inside a VLM of `top_type` (`text_config.model_type`, or the
/// family's default text config).
pub(crate) fn text_type(top_type: &str, text: Option<&Map<String, Value>>) -> String {
    // What the text config names itself; the families below whose text config takes its
    // class from it fall back to their own default when it names none.
    let named = text
        .and_then(|t| t.get("model_type"))
        .and_then(Value::as_str);
    match top_type {
        // The Qwen-VL language model is Qwen2 with multimodal rotary positions (no parameters).
        "qwen2_vl" | "qwen2_5_vl" => "qwen2".into(),
        // Qwen3-VL's `qwen3_vl_text` is Qwen3 with multimodal rotary positions.
        "qwen3_vl" => "qwen3".into(),
        // Qwen3-VL-MoE's `qwen3_vl_moe_text` is Qwen3-MoE (routed experts, no shared expert)
        // with multimodal rotary positions (`modeling_qwen3_vl_moe.py`).
        "qwen3_vl_moe" => "qwen3_moe".into(),
        // Qwen3.5's language models (`Qwen3_5Config.sub_configs_defaults`: the text config is
        // always its own class, whatever `text_config.model_type` says): `qwen3_5.rs`.
        "qwen3_5" => "qwen3_5_text".into(),
        "qwen3_5_moe" => "qwen3_5_moe_text".into(),
        "llava_onevision" => named.unwrap_or("qwen2").into(),
        // `MllamaTextModel` is Llama with cross-attention layers (`mllama.rs` marks them).
        "mllama" => "llama".into(),
        // `PaliGemmaConfig.sub_configs_defaults`: the text config's class by its own
        // `model_type`, `gemma` when it names none (PaliGemma 2: `gemma2`).
        "paligemma" => named.unwrap_or("gemma").into(),
        // `Lfm2VlConfig.sub_configs_defaults`: `lfm2` unless the text config names another.
        "lfm2_vl" => named.unwrap_or("lfm2").into(),
        // `Llama4Config.sub_configs_defaults`: the text config is always `Llama4TextConfig`.
        "llama4" => "llama4_text".into(),
        // `Gemma4Config.sub_configs_defaults`: the text config is always `Gemma4TextConfig`.
        "gemma4" => "gemma4_text".into(),
        "gemma3" => "gemma3_text".into(),
        "internvl" => named.unwrap_or("qwen2").into(),
        "mistral3" => named.unwrap_or("mistral").into(),
        _ => named.unwrap_or("llama").into(),
    }
}

/// The vision side of a `top_type` config, `None` for a text-only family.
pub(crate) fn read_vision(
    top: &Map<String, Value>,
    top_type: &str,
    lm_hidden: u64,
    origin: &str,
) -> Result<Option<Vision>> {
    if !VISION_TYPES.contains(&top_type) {
        return Ok(None);
    }
    if top_type == "gemma4" && !top.get("vision_config").is_some_and(Value::is_object) {
        // `SubConfigSpec(optional=True)`: no vision_config, no tower (`Gemma4Model.__init__`).
        return Ok(None);
    }
    let empty = Map::new();
    let vobj = top
        .get("vision_config")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let vorigin = format!("{origin} vision_config");
    let v = Cfg {
        obj: vobj,
        origin: &vorigin,
    };
    let t = Cfg { obj: top, origin };
    let vision = match top_type {
        "qwen2_vl" => qwen2_vl(&v)?,
        "qwen2_5_vl" => qwen2_5_vl(&v)?,
        "llava" if v.string("model_type") == Some("pixtral") => {
            super::llava_onevision::pixtral(&v, &t, lm_hidden)?
        }
        "llava" | "llava_next" => llava(&v, &t, top_type == "llava_next", lm_hidden)?,
        "llava_onevision" => super::llava_onevision::onevision(&v, &t, lm_hidden)?,
        "mistral3" => super::vision_families::mistral3(&v, &t, lm_hidden)?,
        "idefics3" | "smolvlm" => super::vision_families::idefics3(&v, &t, lm_hidden)?,
        "qwen3_vl" | "qwen3_vl_moe" => super::vision_families::qwen3_vl(&v)?,
        "qwen3_5" | "qwen3_5_moe" => super::vision_families::qwen3_5(&v)?,
        "internvl" => super::vision_families::internvl(&v, &t, lm_hidden)?,
        "mllama" => super::mllama::vision(&v, lm_hidden)?,
        "paligemma" => super::vision_season::paligemma(&v, &t, lm_hidden)?,
        "lfm2_vl" => super::vision_season::lfm2_vl(&v, &t, lm_hidden)?,
        "llama4" => super::llama4::vision(&v, lm_hidden)?,
        "gemma4" => super::gemma4_vision::vision(&v, &t, lm_hidden)?,
        _ => gemma3(&v, &t, lm_hidden)?,
    };
    Ok(Some(Vision {
        family: top_type.to_string(),
        ..vision
    }))
}

/// Qwen2-VL's defaults (`Qwen2VLImageProcessor`: `min_pixels = 56·56`, `max_pixels =
/// 28·28·1280`).
fn qwen_tokens(v: &Cfg) -> Result<ImageTokens> {
    Ok(ImageTokens::QwenDynamic {
        patch: v.size(&["patch_size", "spatial_patch_size"], Some(14))?,
        merge: v.size(&["spatial_merge_size"], Some(2))?,
        min_pixels: 56 * 56,
        max_pixels: 28 * 28 * 1280,
    })
}

/// `Qwen2VLVisionConfig`: `embed_dim` wide, `mlp_ratio·embed_dim` MLP with QuickGELU,
/// LayerNorms, the merger's output `hidden_size`.
fn qwen2_vl(v: &Cfg) -> Result<Vision> {
    let hidden = v.size(&["embed_dim"], Some(1280))?;
    let ratio = v.size(&["mlp_ratio"], Some(4))?;
    let layers = v.layer_count(&["depth"], 32)?;
    let tower = qwen_tower(v, hidden, layers, hidden * ratio)?;
    qwen_vision(v, tower, "hidden_size")
}

/// `Qwen2_5_VLVisionConfig`: RMSNorms, a SwiGLU MLP with biases, window attention except in
/// `fullatt_block_indexes`, the merger's output `out_hidden_size`.
fn qwen2_5_vl(v: &Cfg) -> Result<Vision> {
    let hidden = v.size(&["hidden_size"], Some(1280))?;
    let layers = v.layer_count(&["depth"], 32)?;
    let patch = v.size(&["patch_size", "spatial_patch_size"], Some(14))?;
    let window = v.size(&["window_size"], Some(112))?;
    let full = if v.obj.contains_key("fullatt_block_indexes") {
        v.uint_list("fullatt_block_indexes")?
    } else {
        vec![7, 15, 23, 31]
    };
    let side = (window / patch).max(1);
    let ffn = v.size(&["intermediate_size"], Some(3420))?;
    let tower = Tower {
        gated: true,
        norm: NormKind::RmsNorm,
        activation: v.string("hidden_act").unwrap_or("silu").to_string(),
        window_patches: Some(side * side),
        full_attention_layers: full,
        ..qwen_tower(v, hidden, layers, ffn)?
    };
    qwen_vision(v, tower, "out_hidden_size")
}

/// The tower fields `Qwen2VLVisionConfig` and `Qwen2_5_VLVisionConfig` read alike
/// (`num_heads` 16, `in_channels` 3, `patch_size` 14, `temporal_patch_size` 2, rotary
/// positions), with Qwen2-VL's own blocks (LayerNorm, QuickGELU, full attention everywhere)
/// for Qwen2.5-VL to override.
fn qwen_tower(v: &Cfg, hidden: u64, layers: u64, ffn: u64) -> Result<Tower> {
    Ok(Tower {
        kind: TowerKind::Qwen,
        hidden,
        layers,
        layers_used: layers,
        heads: v.size(&["num_heads"], Some(16))?,
        ffn,
        gated: false,
        norm: NormKind::LayerNorm { bias: true },
        activation: v.string("hidden_act").unwrap_or("quick_gelu").to_string(),
        channels: v.size(&["in_channels", "in_chans"], Some(3))?,
        patch: v.size(&["patch_size", "spatial_patch_size"], Some(14))?,
        temporal_patch: v.size(&["temporal_patch_size"], Some(2))?,
        position_rows: 0,
        window_patches: None,
        full_attention_layers: Vec::new(),
    })
}

/// A Qwen-VL tower with its `PatchMerger` (`spatial_merge_size` 2, normed as the tower, out
/// to the language model's width `out_key`, default 3584) and Qwen's dynamic image tokens.
fn qwen_vision(v: &Cfg, tower: Tower, out_key: &str) -> Result<Vision> {
    Ok(Vision {
        family: String::new(),
        projector: Projector::QwenMerger {
            merge: v.size(&["spatial_merge_size"], Some(2))?,
            norm: tower.norm,
            out: v.size(&[out_key], Some(3584))?,
        },
        tower,
        tokens: qwen_tokens(v)?,
    })
}

/// LLaVA-1.5 / LLaVA-NeXT: `LlavaConfig`'s default tower is CLIP ViT-L/14 at 336 px; the
/// projector is two linears; `vision_feature_layer` picks the hidden state the projector reads
/// (-2: the last layer's output is not used). LLaVA-NeXT tiles by `image_grid_pinpoints`.
fn llava(v: &Cfg, t: &Cfg, next: bool, lm_hidden: u64) -> Result<Vision> {
    let mut tower = vit(
        v,
        TowerKind::Clip,
        (1024, 4096, 24, 16, 336, 14, "quick_gelu"),
    )?;
    let feature = t
        .obj
        .get("vision_feature_layer")
        .and_then(Value::as_i64)
        .unwrap_or(-2);
    tower.layers_used = if feature < 0 {
        (tower.layers as i64 + 1 + feature).clamp(0, tower.layers as i64) as u64
    } else {
        (feature as u64).min(tower.layers)
    };
    let class_token = t.string("vision_feature_select_strategy") == Some("full");
    let image = v.size(&["image_size"], Some(336))?;
    let patch = tower.patch;
    let side = image / patch;
    let tokens = if next {
        ImageTokens::AnyRes {
            image_size: image,
            patch,
            pinpoints: pinpoints(t)?,
            class_token: true,
        }
    } else {
        ImageTokens::Fixed {
            image_size: image,
            patch,
            tokens: side * side + u64::from(class_token),
            class_token: true,
        }
    };
    Ok(Vision {
        family: String::new(),
        tower,
        projector: Projector::LlavaMlp {
            out: lm_hidden,
            image_newline: next,
        },
        tokens,
    })
}

/// Gemma 3: a SigLIP tower (`vision_use_head: false` in the published configs) at 896 px,
/// pooled to `mm_tokens_per_image` soft tokens.
fn gemma3(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let tower = vit(
        v,
        TowerKind::Siglip,
        (1152, 4304, 27, 16, 896, 14, "gelu_pytorch_tanh"),
    )?;
    let image = v.size(&["image_size"], Some(896))?;
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Fixed {
            image_size: image,
            patch: tower.patch,
            tokens: t.size(&["mm_tokens_per_image"], Some(256))?,
            class_token: false,
        },
        tower,
        projector: Projector::Gemma3 { out: lm_hidden },
    })
}

/// Applies a `preprocessor_config.json` beside the config: Qwen-VL's `min_pixels` /
/// `max_pixels` (or `size.shortest_edge` / `size.longest_edge`, transformers 5's spelling),
/// LLaVA-NeXT's `image_grid_pinpoints`, Pixtral's `size.longest_edge`, Idefics3 / SmolVLM's
/// `size.longest_edge`, `max_image_size.longest_edge` and `do_image_splitting`. A model
/// without a vision side is left as it is.
pub fn apply_preprocessor(spec: &mut ModelSpec, text: &str, origin: &str) -> Result<()> {
    let value: Value = serde_json::from_str(&crate::python_json::to_strict(text)).map_err(|e| {
        crate::error::FormatError::malformed(origin, format!("not valid JSON: {e}"))
    })?;
    let obj = value.as_object().ok_or_else(|| {
        crate::error::FormatError::malformed(origin, "preprocessor_config.json must be an object")
    })?;
    let p = Cfg { obj, origin };
    let size = obj.get("size").and_then(Value::as_object);
    let from_size = |k: &str| size.and_then(|s| s.get(k)).and_then(Value::as_u64);
    let Some(vision) = spec.vision.as_mut() else {
        return Ok(());
    };
    match &mut vision.tokens {
        ImageTokens::QwenDynamic {
            min_pixels,
            max_pixels,
            ..
        } => {
            if let Some(m) = p.uint("min_pixels")?.or_else(|| from_size("shortest_edge")) {
                *min_pixels = m;
            }
            if let Some(m) = p.uint("max_pixels")?.or_else(|| from_size("longest_edge")) {
                *max_pixels = m;
            }
            if *min_pixels > *max_pixels {
                return Err(p.err("min_pixels", "is larger than max_pixels"));
            }
        }
        ImageTokens::AnyRes { pinpoints: pp, .. }
        | ImageTokens::AnyResMax { pinpoints: pp, .. } => {
            if obj.contains_key("image_grid_pinpoints") {
                *pp = pinpoints(&p)?;
            }
        }
        ImageTokens::Pixtral { longest_edge, .. } => {
            if let Some(m) = from_size("longest_edge").filter(|&m| m > 0) {
                *longest_edge = m;
            }
        }
        ImageTokens::Idefics3 {
            tile,
            longest_edge,
            split,
            ..
        } => {
            if let Some(m) = from_size("longest_edge").filter(|&m| m > 0) {
                *longest_edge = m;
            }
            let max = obj
                .get("max_image_size")
                .and_then(|m| m.get("longest_edge"));
            if let Some(m) = max.and_then(Value::as_u64).filter(|&m| m > 0) {
                *tile = m;
            }
            *split = p.boolean("do_image_splitting", *split)?;
        }
        ImageTokens::Tiles {
            tile,
            min_tiles,
            max_tiles,
            crop,
            ..
        } => {
            let square = size.and_then(|s| s.get("height")).and_then(Value::as_u64);
            if let Some(m) = square.filter(|&m| m > 0) {
                *tile = m;
            }
            *min_tiles = p.uint("min_patches")?.unwrap_or(*min_tiles).max(1);
            *max_tiles = p.uint("max_patches")?.unwrap_or(*max_tiles);
            *crop = p.boolean("crop_to_patches", *crop)?;
        }
        // Mllama's processor must agree with the model (`max_image_tiles` = `max_num_tiles`,
        // `size` = `image_size`: the tile embeddings are sized by them), so the config rules.
        ImageTokens::Mllama { .. } => {}
        ImageTokens::Lfm2Vl(tokens) => super::vision_season::lfm2_vl_preprocessor(&p, tokens)?,
        // `Llama4ImageProcessor.max_patches` (16): the most tiles of one image.
        ImageTokens::Llama4 { max_tiles, .. } => {
            *max_tiles = p.uint("max_patches")?.unwrap_or(*max_tiles).clamp(1, 64);
        }
        // `Gemma4ImageProcessor.max_soft_tokens` (one of 70, 140, 280, 560, 1120; the
        // processor refuses others, so a value outside them is left as the config says).
        ImageTokens::Gemma4 {
            max_soft_tokens, ..
        } => {
            if let Some(m) = p
                .uint("max_soft_tokens")?
                .filter(|m| [70, 140, 280, 560, 1120].contains(m))
            {
                *max_soft_tokens = m;
            }
        }
        ImageTokens::Fixed { .. } => {}
    }
    Ok(())
}
