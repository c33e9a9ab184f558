//! Llama 4 (`llama4`, `modeling_llama4.py` `Llama4VisionModel`, `Llama4MultiModalProjector`):
//! the tower's tensors — an unfold-and-linear patch embedding, class token and learned
//! positions, LayerNorm encoder layers with biased `q/k/v/o_proj` (2-D rotary positions, no
//! parameters), and the pixel-shuffle adapter (`vision_adapter.mlp.fc1/fc2`, no biases) —
//! the projector, and the image rule of `image_processing_llama4.py` / `processing_llama4.py`.

use super::blocks::Out;
use super::cost::ImageCost;
use super::{Projector, Vision};
use crate::error::CoreError;
use crate::inventory::Component;
use crate::model::NormKind;

/// The tower under `vision_model` (`Llama4VisionModel.__init__`):
/// `patch_embedding.linear` `[hidden, channels·patch²]` (`Llama4UnfoldConvolution`, no bias),
/// `class_embedding [hidden]`, `positional_embedding_vlm [(image/patch)² + 1, hidden]`,
/// `layernorm_pre`/`_post`, `model.layers.N` (`Llama4VisionEncoderLayer`) and the adapter
/// (`Llama4VisionPixelShuffleMLP` → `Llama4VisionMLP2`: `fc1` `intermediate_size →
/// projector_input_dim`, `fc2` `projector_output_dim` square).
/// The kind's `projector_input` and `projector_output` are passed in by the dispatch
/// (`inventory::tower`).
pub(super) fn tower(
    v: &Vision,
    o: &mut Out,
    projector_input: u64,
    projector_output: u64,
) -> Result<(), CoreError> {
    let t = &v.tower;
    let (h, e) = (t.hidden, Component::Embedding);
    let root = "vision_model";
    let px = t.channels * t.patch * t.patch;
    o.linear(&format!("{root}.patch_embedding.linear"), px, h, false, e)?;
    o.push(format!("{root}.class_embedding"), vec![h], e)?;
    o.push(
        format!("{root}.positional_embedding_vlm"),
        vec![t.position_rows, h],
        e,
    )?;
    let ln = NormKind::LayerNorm { bias: true };
    o.norm(&format!("{root}.layernorm_pre"), ln, h)?;
    o.norm(&format!("{root}.layernorm_post"), ln, h)?;
    let (a, m) = (Component::Attention, Component::Mlp);
    for i in 0..t.layers {
        let p = format!("{root}.model.layers.{i}");
        for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            o.linear(&format!("{p}.self_attn.{proj}"), h, h, true, a)?;
        }
        o.linear(&format!("{p}.mlp.fc1"), h, t.ffn, true, m)?;
        o.linear(&format!("{p}.mlp.fc2"), t.ffn, h, true, m)?;
        o.norm(&format!("{p}.input_layernorm"), ln, h)?;
        o.norm(&format!("{p}.post_attention_layernorm"), ln, h)?;
    }
    let ad = format!("{root}.vision_adapter.mlp");
    o.linear(&format!("{ad}.fc1"), t.ffn, projector_input, false, m)?;
    o.linear(
        &format!("{ad}.fc2"),
        projector_output,
        projector_output,
        false,
        m,
    )
}

/// `Llama4MultiModalProjector`: `linear_1` `vision_output_dim → text hidden_size`, no bias.
pub(super) fn projector(v: &Vision, o: &mut Out) -> Result<(), CoreError> {
    if let Projector::Llama4 { input, out } = v.projector {
        let name = "multi_modal_projector.linear_1";
        o.linear(name, input, out, false, Component::Mlp)?;
    }
    Ok(())
}

/// One image's cost under Llama 4's processor. `Llama4ImageProcessor._preprocess` fits the
/// image to the best canvas of at most `max_patches` (16) `tile`-pixel tiles — the canvas
/// rule of `get_best_fit` over `find_supported_resolutions`, the same as Mllama's
/// ([`super::mllama::optimal_canvas`]) — splits it into `rows × cols` tiles and, when there is
/// more than one, adds a global tile (the whole image resized to one tile). Each tile is a tower
/// image of `(tile/patch)² + 1` positions (class token); after the pixel shuffle it gives
/// `(tile/patch)² / shuffle²` tokens (`processing_llama4.py` `replace_image_token`: 144 at
/// 336 px, patch 14, ratio 0.5). `_prompt_split_image` writes `<|image_start|>`, then for a
/// tiled image each row's tiles with a `<|tile_x_separator|>` between them and a
/// `<|tile_y_separator|>` after the row, then `<|image|>`, the global tile's tokens and
/// `<|image_end|>`.
pub fn cost(
    (height, width): (u64, u64),
    (tile, patch): (u64, u64),
    shuffle: u64,
    max_tiles: u64,
) -> ImageCost {
    let (rows, cols) = super::mllama::optimal_canvas(height, width, max_tiles, tile);
    let side = tile / patch.max(1);
    let per_tile = side * side / (shuffle * shuffle).max(1);
    let tiles = rows * cols;
    let (local, separators, tower_images) = if tiles > 1 {
        (tiles * per_tile, rows * (cols - 1) + rows, tiles + 1)
    } else {
        (0, 0, 1)
    };
    ImageCost {
        tokens: 1 + local + separators + 1 + per_tile + 1,
        tower_images,
        tower_seq: side * side + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 336 px tiles of 14 px patches: 24² = 576 patches, 144 tokens a tile after the 0.5
    /// pixel shuffle; 577 tower positions with the class token.
    #[test]
    fn one_tile_and_tiled_images() {
        // A 336×336 image fits one tile exactly (scale 1): no global tile; start, `<|image|>`,
        // 144, end = 147.
        let one = cost((336, 336), (336, 14), 2, 16);
        assert_eq!((one.tokens, one.tower_images, one.tower_seq), (147, 1, 577));
        // 672 high × 1008 wide: the smallest upscale ≥ 1 is 1.0 on the 2×3 canvas (672×1008);
        // 6 tiles + the global tile = 7 tower images; tokens: start 1, 6·144 = 864, x
        // separators 2·2 = 4, y separators 2, `<|image|>` 1, global 144, end 1 = 1017.
        let six = cost((672, 1008), (336, 14), 2, 16);
        assert_eq!((six.tokens, six.tower_images), (1017, 7));
    }
}
