//! Gemma 4's vision tower and embedder as the estimator reads them (`gemma4`,
//! `Gemma4ForConditionalGeneration` with `audio_config` null: the 26B and 31B checkpoints).
//! `Gemma4VisionConfig`'s class defaults (`configuration_gemma4.py`, transformers 5.24) for
//! absent keys; the image budget is the processor's (`Gemma4ImageProcessor.max_soft_tokens`
//! 280, written into published configs as `vision_soft_tokens_per_image`).

use super::fields::Cfg;
use crate::error::Result;
use vramscope_core::model::NormKind;
use vramscope_core::vision::{ImageTokens, Projector, Tower, TowerKind, Vision};

/// `image_processing_gemma4.py` `_SUPPORTED_SOFT_TOKENS`: the budgets the processor accepts.
const SUPPORTED_SOFT_TOKENS: [u64; 5] = [70, 140, 280, 560, 1120];

/// The tower (`Gemma4VisionModel`), the embedder (`Gemma4MultimodalEmbedder` to `lm_hidden`)
/// and the image rule. Tensor for tensor this is `gemma4_towers.rs`'s vision part.
pub(crate) fn vision(v: &Cfg, top: &Cfg, lm_hidden: u64) -> Result<Vision> {
    let hidden = v.size(&["hidden_size"], Some(768))?;
    let heads = v.size(&["num_attention_heads"], Some(12))?;
    let kv_heads = v.size(&["num_key_value_heads"], Some(12))?;
    if !heads.is_multiple_of(kv_heads) {
        return Err(v.err(
            "num_key_value_heads",
            format!("{kv_heads} does not divide num_attention_heads {heads}"),
        ));
    }
    let head_dim = v.size(&["head_dim"], Some(64))?;
    let patch = v.size(&["patch_size"], Some(16))?;
    let pooling = v.size(&["pooling_kernel_size"], Some(3))?;
    let soft = top.size(&["vision_soft_tokens_per_image"], Some(280))?;
    if !SUPPORTED_SOFT_TOKENS.contains(&soft) {
        return Err(top.err(
            "vision_soft_tokens_per_image",
            format!("{soft} is not one of Gemma4ImageProcessor's budgets 70, 140, 280, 560, 1120"),
        ));
    }
    let layers = v.layer_count(&["num_hidden_layers"], 16)?;
    Ok(Vision {
        family: String::new(),
        tower: Tower {
            kind: TowerKind::Gemma4 {
                kv_heads,
                head_dim,
                positions: v.size(&["position_embedding_size"], Some(10 * 1024))?,
                pooling,
                clipped: v.boolean("use_clipped_linears", false)?,
                standardize: v.boolean("standardize", false)?,
            },
            hidden,
            layers,
            layers_used: layers,
            heads,
            ffn: v.size(&["intermediate_size"], Some(3072))?,
            gated: true,
            norm: NormKind::RmsNorm,
            activation: v
                .string("hidden_activation")
                .unwrap_or("gelu_pytorch_tanh")
                .to_string(),
            // `Gemma4VisionPatchEmbedder.input_proj` takes `3 · patch²` values.
            channels: 3,
            patch,
            temporal_patch: 1,
            position_rows: 0,
            window_patches: None,
            full_attention_layers: Vec::new(),
        },
        projector: Projector::Gemma4 { out: lm_hidden },
        tokens: ImageTokens::Gemma4 {
            patch,
            pooling,
            max_soft_tokens: soft,
        },
    })
}
