//! Llama-3.2-Vision (`mllama`): the tower's tensors (`modeling_mllama.py`
//! `MllamaVisionModel`: a local and a gated global transformer over all the tiles of an image),
//! its projector, and the image rule of `image_processing_mllama.py` (tiles of `image_size`
//! pixels, padded to `max_image_tiles`).

use super::blocks::Out;
use super::{Projector, TowerKind, Vision};
use crate::error::CoreError;
use crate::inventory::Component;
use crate::model::NormKind;

/// Extra rows of `embed_tokens` beyond `vocab_size`: `MllamaTextModel` builds
/// `nn.Embedding(config.vocab_size + 8, ...)` (`modeling_mllama.py`), the `<|image|>` token
/// (id 128256) among them; the head keeps `vocab_size` rows.
pub const EXTRA_EMBEDDING_ROWS: u64 = 8;

/// Patches one tile makes plus the class token: `(image_size // patch_size)² + 1`
/// (`MllamaVisionModel.num_patches`, 1601 at 560 px / 14 px).
pub fn tile_positions(tile: u64, patch: u64) -> u64 {
    let side = tile / patch.max(1);
    side.saturating_mul(side).saturating_add(1)
}

/// The tile's positions padded to a multiple of 8 as the tower runs them
/// (`num_padding_patches = (8 - n % 8) % 8`: 1601 → 1608).
pub fn padded_tile_positions(tile: u64, patch: u64) -> u64 {
    tile_positions(tile, patch).div_ceil(8).saturating_mul(8)
}

/// `get_optimal_tiled_canvas` (`image_processing_mllama.py`): among the (rows, columns)
/// arrangements of at most `max_tiles` tiles, the smallest upscale ≥ 1 of the image into the
/// canvas (its shorter fitting side), else the largest downscale; ties go to the smaller
/// canvas. Returns (tile rows, tile columns).
pub fn optimal_canvas(height: u64, width: u64, max_tiles: u64, tile: u64) -> (u64, u64) {
    let max = max_tiles.clamp(1, 64);
    let mut options = Vec::new();
    // `get_all_supported_aspect_ratios` gives (width, height) pairs; the canvas is
    // `np.array(pairs) * tile` read as (height, width).
    for a in 1..=max {
        for b in 1..=max {
            if a * b <= max {
                let (h, w) = (a * tile, b * tile);
                let sh = h as f64 / height as f64;
                let sw = w as f64 / width as f64;
                options.push((a, b, if sw > sh { sh } else { sw }));
            }
        }
    }
    let ups = options.iter().map(|o| o.2).filter(|s| *s >= 1.0);
    let selected = match ups
        .clone()
        .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.min(s))))
    {
        Some(s) => s,
        None => options.iter().map(|o| o.2).fold(f64::MIN, f64::max),
    };
    options
        .iter()
        .filter(|o| o.2 == selected)
        .min_by_key(|o| o.0 * o.1)
        .map_or((1, 1), |o| (o.0, o.1))
}

/// The tower's tensors under `model.vision_model` (`MllamaVisionModel.__init__`): the patch
/// convolution without bias, `class_embedding`, the gated positional embedding (`embedding
/// [patches+1, h]`, `gate`, `tile_embedding [ratios+1, tiles·(patches+1)·h]`), the pre- and
/// post-tile embeddings (`[ratios+1, tiles·h]` and a gate each), `layernorm_pre`/`_post`, the
/// local `transformer` and the `global_transformer` whose layers add `gate_attn`/`gate_ffn`.
/// The kind's `global_layers`, `tiles` and `aspect_ratios` are passed in by the dispatch
/// (`inventory::tower`).
pub(super) fn tower(
    v: &Vision,
    o: &mut Out,
    global_layers: u64,
    tiles: u64,
    aspect_ratios: u64,
) -> Result<(), CoreError> {
    let t = &v.tower;
    let (h, e) = (t.hidden, Component::Embedding);
    let root = "model.vision_model";
    let positions = t.position_rows;
    let conv = vec![h, t.channels, t.patch, t.patch];
    o.push(format!("{root}.patch_embedding.weight"), conv, e)?;
    o.push(format!("{root}.class_embedding"), vec![h], e)?;
    let g = format!("{root}.gated_positional_embedding");
    o.push(format!("{g}.gate"), vec![1], e)?;
    o.push(format!("{g}.embedding"), vec![positions, h], e)?;
    let tile_rows = tiles.saturating_mul(positions).saturating_mul(h);
    let ratios = aspect_ratios + 1;
    o.push(
        format!("{g}.tile_embedding.weight"),
        vec![ratios, tile_rows],
        e,
    )?;
    for which in ["pre", "post"] {
        let p = format!("{root}.{which}_tile_positional_embedding");
        o.push(format!("{p}.embedding.weight"), vec![ratios, tiles * h], e)?;
        o.push(format!("{p}.gate"), vec![1], e)?;
    }
    let ln = NormKind::LayerNorm { bias: true };
    o.norm(&format!("{root}.layernorm_pre"), ln, h)?;
    o.norm(&format!("{root}.layernorm_post"), ln, h)?;
    for i in 0..t.layers {
        layer(v, &format!("{root}.transformer.layers.{i}"), false, o)?;
    }
    for i in 0..global_layers {
        layer(v, &format!("{root}.global_transformer.layers.{i}"), true, o)?;
    }
    Ok(())
}

/// `MllamaVisionEncoderLayer`: `self_attn.{q,k,v,o}_proj` without biases, `mlp.fc1`/`fc2`
/// with biases, two LayerNorms; a gated (global) layer adds `gate_attn` and `gate_ffn` `[1]`.
fn layer(v: &Vision, p: &str, gated: bool, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let (h, a, m) = (t.hidden, Component::Attention, Component::Mlp);
    if gated {
        o.push(format!("{p}.gate_attn"), vec![1], Component::Norm)?;
        o.push(format!("{p}.gate_ffn"), vec![1], Component::Norm)?;
    }
    for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
        o.linear(&format!("{p}.self_attn.{proj}"), h, h, false, a)?;
    }
    o.linear(&format!("{p}.mlp.fc1"), h, t.ffn, true, m)?;
    o.linear(&format!("{p}.mlp.fc2"), t.ffn, h, true, m)?;
    o.norm(&format!("{p}.input_layernorm"), t.norm, h)?;
    o.norm(&format!("{p}.post_attention_layernorm"), t.norm, h)
}

/// `MllamaModel.multi_modal_projector`: one biased `nn.Linear(vision_output_dim,
/// text hidden_size)`.
pub(super) fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    if let Projector::Mllama { input, out } = v.projector {
        o.push(
            "model.multi_modal_projector.weight".into(),
            vec![out, input],
            Component::Mlp,
        )?;
        o.push(
            "model.multi_modal_projector.bias".into(),
            vec![out],
            Component::Mlp,
        )?;
    }
    Ok(())
}

impl Vision {
    /// Rows `embed_tokens` has beyond the head's vocabulary (Mllama: 8).
    pub fn extra_embedding_rows(&self) -> u64 {
        match self.tower.kind {
            TowerKind::Mllama { .. } => EXTRA_EMBEDDING_ROWS,
            _ => 0,
        }
    }

    /// Vision tokens one image gives the language model's cross-attention layers (Mllama:
    /// `max_num_tiles · ((image_size/patch)² + 1)`, 6404 — every image padded to
    /// `max_image_tiles` tiles by `pad_batches_and_tiles`, its padding tiles masked, and
    /// `_prepare_static_cache` sizes the cross-attention cache the same); 0 for a family whose
    /// images enter the sequence instead.
    pub fn cross_tokens_per_image(&self) -> u64 {
        match self.tower.kind {
            TowerKind::Mllama { tiles, .. } => tiles.saturating_mul(self.tower.position_rows),
            _ => 0,
        }
    }
}
