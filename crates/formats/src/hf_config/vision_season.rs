//! PaliGemma / PaliGemma 2 (`configuration_paligemma.py`, `modeling_paligemma.py`) and LFM2-VL
//! (`configuration_lfm2_vl.py`, `modeling_lfm2_vl.py`, `image_processing_lfm2_vl.py`), each
//! by its transformers 5.24 classes. A `vision_config` given as a dict is built with its own
//! class's defaults (`configuration_utils.py` `SubConfigSpec.create_subconfig`: the wrapper's
//! `init_kwargs` only fill a sub-config that is absent), so an absent key takes
//! `SiglipVisionConfig`'s / `Siglip2VisionConfig`'s default.

use super::fields::Cfg;
use super::vision_parts::vit;
use crate::error::Result;
use vramscope_core::vision::{ImageTokens, Lfm2VlTokens, Projector, TowerKind, Vision};

/// `SiglipVisionConfig` / `Siglip2VisionConfig` defaults (hidden, MLP, layers, heads, image,
/// patch, activation): the base model, 768 wide, 12 layers of 12 heads, 16 px patches.
const SIGLIP_BASE: (u64, u64, u64, u64, u64, u64, &str) =
    (768, 3072, 12, 12, 224, 16, "gelu_pytorch_tanh");

/// PaliGemma: `model.vision_tower` a `SiglipVisionModel` (its pooling head built when
/// `vision_use_head`, the class default true; the published configs say false), the one-linear
/// `PaliGemmaMultiModalProjector` to `projection_dim` (default 2048, which must be the language
/// model's width: the image features replace token embeddings), and a fixed
/// `(image_size / patch_size)²` image tokens (`PaliGemmaConfig.__post_init__`'s
/// `num_image_tokens`; `processing_paligemma.py` repeats `image_token` that many times: 224 px →
/// 256, 448 → 1024, 896 → 4096).
pub(super) fn paligemma(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let kind = if v.boolean("vision_use_head", true)? {
        TowerKind::SiglipHead
    } else {
        TowerKind::Siglip
    };
    let tower = vit(v, kind, SIGLIP_BASE)?;
    let out = t.size(&["projection_dim"], Some(2048))?;
    if out != lm_hidden {
        return Err(t.err(
            "projection_dim",
            format!(
                "{out} is not the language model's hidden_size {lm_hidden}: PaliGemma's \
                 projected image features replace token embeddings of that width"
            ),
        ));
    }
    let image = v.size(&["image_size"], Some(SIGLIP_BASE.4))?;
    let side = image / tower.patch.max(1);
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Fixed {
            image_size: image,
            patch: tower.patch,
            tokens: side * side,
            class_token: false,
        },
        tower,
        projector: Projector::PaliGemma { out },
    })
}

/// LFM2-VL: `model.vision_tower` a `Siglip2VisionModel` (`num_patches` learned positions,
/// default 256; the pooling head when `vision_use_head`, default true), the
/// `Lfm2VlMultiModalProjector` (`downsample_factor` 2, `projector_hidden_size` 2560,
/// `projector_use_layernorm` and `projector_bias` true) and the image processor's tiling, read
/// from the processor keys the published configs carry (`Lfm2VlImageProcessor`'s defaults
/// otherwise; `preprocessor_config.json` overrides them).
pub(super) fn lfm2_vl(v: &Cfg, t: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let head = v.boolean("vision_use_head", true)?;
    let mut tower = vit(v, TowerKind::Siglip2 { head }, SIGLIP_BASE)?;
    tower.position_rows = v.size(&["num_patches"], Some(256))?;
    let scale = t.size(&["downsample_factor"], Some(2))?;
    let projector = Projector::Lfm2Vl {
        scale,
        inner: t.size(&["projector_hidden_size"], Some(2560))?,
        out: lm_hidden,
        norm: t.boolean("projector_use_layernorm", true)?,
        bias: t.boolean("projector_bias", true)?,
    };
    let tokens = Lfm2VlTokens {
        patch: t.size(&["encoder_patch_size"], Some(16))?,
        factor: scale,
        tile: t.size(&["tile_size"], Some(512))?,
        min_tiles: t.size(&["min_tiles"], Some(2))?,
        max_tiles: t.size(&["max_tiles"], Some(10))?,
        use_thumbnail: t.boolean("use_thumbnail", true)?,
        min_image_tokens: t.size(&["min_image_tokens"], Some(64))?,
        max_image_tokens: t.size(&["max_image_tokens"], Some(256))?,
        max_pixels_tolerance: t.float("max_pixels_tolerance").unwrap_or(2.0),
        do_image_splitting: t.boolean("do_image_splitting", true)?,
        special_tokens: t.boolean("use_image_special_tokens", true)?,
    };
    Ok(Vision {
        family: String::new(),
        tokens: ImageTokens::Lfm2Vl(tokens),
        tower,
        projector,
    })
}

/// `preprocessor_config.json` of LFM2-VL: the `Lfm2VlImageProcessor` keys it names.
pub(super) fn lfm2_vl_preprocessor(p: &Cfg, tokens: &mut Lfm2VlTokens) -> Result<()> {
    let size = |key: &str, old: u64| -> Result<u64> { p.size(&[key], Some(old)) };
    tokens.patch = size("encoder_patch_size", tokens.patch)?;
    tokens.factor = size("downsample_factor", tokens.factor)?;
    tokens.tile = size("tile_size", tokens.tile)?;
    tokens.min_tiles = size("min_tiles", tokens.min_tiles)?;
    tokens.max_tiles = size("max_tiles", tokens.max_tiles)?;
    tokens.min_image_tokens = size("min_image_tokens", tokens.min_image_tokens)?;
    tokens.max_image_tokens = size("max_image_tokens", tokens.max_image_tokens)?;
    tokens.use_thumbnail = p.boolean("use_thumbnail", tokens.use_thumbnail)?;
    tokens.do_image_splitting = p.boolean("do_image_splitting", tokens.do_image_splitting)?;
    if let Some(x) = p.float("max_pixels_tolerance") {
        tokens.max_pixels_tolerance = x;
    }
    Ok(())
}

/// The head of `PaliGemmaForConditionalGeneration` / `Lfm2VlForConditionalGeneration` is tied
/// to the embeddings by the top-level `tie_word_embeddings` (`modeling_utils.py`
/// `get_expanded_tied_weights_keys` reads `self.config`, the wrapper's; both classes default
/// it to true, `Lfm2VlConfig.__post_init__` lets `tie_embedding` override it), not the text
/// config's: transformers 5.24 on the meta device ties the tiny LFM2-VL of
/// `validation/specs/cpu-tiny-lfm2vl-*.json`, whose `text_config` says false (3,796,224
/// parameters, not 3,796,224 + 1024 · 256).
pub(super) fn tie_head(
    spec: &mut vramscope_core::model::ModelSpec,
    top_type: &str,
    top: &Cfg,
) -> Result<()> {
    if let vramscope_core::model::Head::LanguageModel { tied, .. } = &mut spec.head {
        let word = top.boolean("tie_word_embeddings", true)?;
        *tied = if top_type == "lfm2_vl" {
            top.boolean("tie_embedding", word)?
        } else {
            word
        };
    }
    Ok(())
}
