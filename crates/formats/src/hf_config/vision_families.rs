//! The newer vision-language families' towers, projectors and image-token rules, each by its
//! transformers configuration class (an absent key takes the class default):
//! Mistral 3 (`configuration_mistral3.py` with `configuration_pixtral.py`), Idefics3 / SmolVLM
//! (`configuration_idefics3.py`, `configuration_smolvlm.py`) and Qwen3-VL
//! (`configuration_qwen3_vl.py`).

use super::fields::Cfg;
use super::vision_parts::vit;
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::NormKind;
use vramscope_core::vision::{ImageTokens, Projector, Tower, TowerKind, Vision};

/// Mistral 3 (Mistral-Small-3.1): a Pixtral tower (`PixtralVisionConfig`; without a
/// `vision_config` at all, `Mistral3Config`'s own default: patch 14, 1540 px), the
/// `Mistral3MultiModalProjector` (`spatial_merge_size`, `multimodal_projector_bias`) and
/// Pixtral's native-resolution token rule with the tower's `image_size` as the longest edge.
pub(super) fn mistral3(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let (patch, image) = if v.obj.is_empty() {
        (14, 1540)
    } else {
        (16, 1024)
    };
    if t.obj
        .get("vision_feature_layer")
        .is_some_and(Value::is_array)
    {
        return Err(t.err(
            "vision_feature_layer",
            "a list of feature layers (the projector's input widened per layer) is not modelled",
        ));
    }
    let tower = pixtral_tower(v, patch)?;
    let merge = t.size(&["spatial_merge_size"], Some(2))?;
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Pixtral {
            patch: tower.patch,
            merge,
            longest_edge: v.size(&["image_size"], Some(image))?,
        },
        tower,
        projector: Projector::Mistral3 {
            merge,
            out: lm_hidden,
            bias: t.boolean("multimodal_projector_bias", false)?,
        },
    })
}

/// `PixtralVisionConfig`: hidden 1024, SwiGLU MLP 4096, 24 layers, 16 heads, `gelu`.
pub(super) fn pixtral_tower(v: &Cfg, patch: u64) -> Result<Tower> {
    let layers = v.layer_count(&["num_hidden_layers"], 24)?;
    Ok(Tower {
        kind: TowerKind::Pixtral,
        hidden: v.size(&["hidden_size"], Some(1024))?,
        layers,
        layers_used: layers,
        heads: v.size(&["num_attention_heads"], Some(16))?,
        ffn: v.size(&["intermediate_size"], Some(4096))?,
        gated: true,
        norm: NormKind::RmsNorm,
        activation: v.string("hidden_act").unwrap_or("gelu").to_string(),
        channels: v.size(&["num_channels"], Some(3))?,
        patch: v.size(&["patch_size"], Some(patch))?,
        temporal_patch: 1,
        position_rows: 0,
        window_patches: None,
        full_attention_layers: Vec::new(),
    })
}

/// Idefics3 / SmolVLM: a SigLIP tower under `model.vision_model` (`Idefics3VisionConfig` /
/// `SmolVLMVisionConfig` defaults), the pixel-shuffle connector (`scale_factor`, default 2)
/// and image splitting into `image_size` tiles after resizing the longest side to
/// `4 · image_size` (the image processors' defaults: Idefics3 364 → 1456, SmolVLM 512 → 2048;
/// a `vision_config.size` / `max_image_size` written into the config, as SmolVLM's are, or a
/// `preprocessor_config.json` overrides them).
pub(super) fn idefics3(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let tower = vit(
        v,
        TowerKind::Idefics3,
        (1152, 3072, 12, 16, 224, 32, "gelu_pytorch_tanh"),
    )?;
    let image = v.size(&["image_size"], Some(224))?;
    let edge = |key: &str| {
        v.obj
            .get(key)
            .and_then(|s| s.get("longest_edge"))
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
    };
    let tile = edge("max_image_size").unwrap_or(image);
    let scale = t.size(&["scale_factor"], Some(2))?;
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Idefics3 {
            tile,
            longest_edge: edge("size").unwrap_or(4 * tile),
            patch: tower.patch,
            scale,
            split: true,
        },
        tower,
        projector: Projector::PixelShuffle {
            scale,
            out: lm_hidden,
        },
    })
}

/// `Qwen3VLVisionConfig`: 27 × 1152 (`gelu_pytorch_tanh` MLP of 4304), 16 px patches, a learned
/// position table of `num_position_embeddings`, the merger to `out_hidden_size` and one
/// DeepStack merger per `deepstack_visual_indexes`. Image tokens by Qwen2-VL's `smart_resize`
/// at `patch · merge` = 32 px with the Qwen3-VL repos' `preprocessor_config.json` bounds
/// (`size.shortest_edge` 65,536 = 256², `size.longest_edge` 16,777,216 = 4096² pixels).
pub(super) fn qwen3_vl(v: &Cfg) -> Result<Vision> {
    let hidden = v.size(&["hidden_size"], Some(1152))?;
    let layers = v.layer_count(&["depth"], 27)?;
    let patch = v.size(&["patch_size"], Some(16))?;
    let merge = v.size(&["spatial_merge_size"], Some(2))?;
    let deepstack = if v.obj.contains_key("deepstack_visual_indexes") {
        v.uint_list("deepstack_visual_indexes")?.len() as u64
    } else {
        3
    };
    Ok(Vision {
        family: String::new(),
        tower: Tower {
            kind: TowerKind::Qwen3,
            hidden,
            layers,
            layers_used: layers,
            heads: v.size(&["num_heads"], Some(16))?,
            ffn: v.size(&["intermediate_size"], Some(4304))?,
            gated: false,
            norm: NormKind::LayerNorm { bias: true },
            activation: v
                .string("hidden_act")
                .unwrap_or("gelu_pytorch_tanh")
                .to_string(),
            channels: v.size(&["in_channels"], Some(3))?,
            patch,
            temporal_patch: v.size(&["temporal_patch_size"], Some(2))?,
            position_rows: v.size(&["num_position_embeddings"], Some(2304))?,
            window_patches: None,
            full_attention_layers: Vec::new(),
        },
        projector: Projector::Qwen3Merger {
            merge,
            out: v.size(&["out_hidden_size"], Some(3584))?,
            deepstack,
        },
        tokens: ImageTokens::QwenDynamic {
            patch,
            merge,
            min_pixels: 65_536,
            max_pixels: 16_777_216,
        },
    })
}

/// `Qwen3_5VisionConfig` (= `Qwen3_5MoeVisionConfig`): Qwen3-VL's tower and merger without
/// DeepStack (`configuration_qwen3_5.py` deletes `deepstack_visual_indexes`;
/// `Qwen3_5VisionModel.__init__` deletes `deepstack_merger_list`), whatever the config lists.
pub(super) fn qwen3_5(v: &Cfg) -> Result<Vision> {
    let mut vision = qwen3_vl(v)?;
    if let Projector::Qwen3Merger { deepstack, .. } = &mut vision.projector {
        *deepstack = 0;
    }
    Ok(vision)
}

/// A size the config may write as an integer or an `[height, width]` pair
/// (`InternVLVisionConfig.image_size` / `patch_size`): the first side (the models are square).
fn side(v: &Cfg, key: &str, default: u64) -> Result<u64> {
    match v.obj.get(key) {
        Some(Value::Array(a)) => match a.first().and_then(Value::as_u64) {
            Some(n) if n > 0 => Ok(n),
            _ => Err(v.err(key, "must be a positive integer or [height, width]")),
        },
        _ => v.size(&[key], Some(default)),
    }
}

/// InternVL (`configuration_internvl.py`): InternViT (`InternVLVisionConfig` defaults: the
/// 300 M tower, 448 px, 14 px patches), the pixel-shuffle projector at `1 / downsample_ratio`
/// and dynamic tiling with the InternVL repos' processor settings (`crop_to_patches`, 1…12
/// tiles of 448 px plus a thumbnail; `preprocessor_config.json` overrides them), each tile
/// `image_seq_length` tokens.
pub(super) fn internvl(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let layers = v.layer_count(&["num_hidden_layers"], 24)?;
    let image = side(v, "image_size", 448)?;
    let patch = side(v, "patch_size", 14)?;
    let hidden = v.size(&["hidden_size"], Some(1024))?;
    let grid = image / patch.max(1);
    let ratio = t.float("downsample_ratio").unwrap_or(0.5);
    if !(ratio > 0.0 && ratio <= 1.0 && (1.0 / ratio).fract() == 0.0) {
        return Err(t.err(
            "downsample_ratio",
            "must be 1/n for a whole n (0.5 in InternVL)",
        ));
    }
    let scale = (1.0 / ratio) as u64;
    let absolute = v.boolean("use_absolute_position_embeddings", true)?;
    let tower = Tower {
        kind: TowerKind::InternVit {
            qkv_bias: v.boolean("attention_bias", false)?,
            qk_norm: v.boolean("use_qk_norm", false)?,
            final_norm: !v.boolean("use_mean_pooling", true)?,
            mask_token: v.boolean("use_mask_token", false)?,
        },
        hidden,
        layers,
        layers_used: layers,
        heads: v.size(&["num_attention_heads"], Some(16))?,
        ffn: v.size(&["intermediate_size"], Some(4096))?,
        gated: false,
        norm: match v.string("norm_type") {
            Some("rms_norm") => NormKind::RmsNorm,
            _ => NormKind::LayerNorm { bias: true },
        },
        activation: v.string("hidden_act").unwrap_or("gelu").to_string(),
        channels: v.size(&["num_channels"], Some(3))?,
        patch,
        temporal_patch: 1,
        position_rows: if absolute { grid * grid + 1 } else { 0 },
        window_patches: None,
        full_attention_layers: Vec::new(),
    };
    let per_tile = grid * grid / (scale * scale).max(1);
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Tiles {
            tile: image,
            patch,
            min_tiles: 1,
            max_tiles: 12,
            crop: true,
            seq: t.size(&["image_seq_length"], Some(per_tile))?,
        },
        tower,
        projector: Projector::InternVl {
            scale,
            out: lm_hidden,
        },
    })
}
