//! LLaVA-OneVision's image tokens (`processing_llava_onevision.py`,
//! `modeling_llava_onevision.py`): LLaVA-NeXT's anyres grid, then "anyres_max_N" — a feature
//! map of more than N tiles' worth of patches is shrunk by bilinear interpolation before the
//! newline column is added.

use super::anyres::unpadded_grid;
use super::cost::ImageCost;

/// The shrunken feature map of `_get_unpadded_features` (`processing_llava_onevision.py`) and
/// `pack_image_features` (`modeling_llava_onevision.py`): with `ratio = sqrt(h·w / (max ·
/// side²))`, a map with `ratio > 1.1` becomes `int(h // ratio) × int(w // ratio)` (Python's
/// float floor division), the size `nn.functional.interpolate(..., mode="bilinear")` is asked
/// for; otherwise it stays `h × w`.
pub(super) fn shrink(cur_h: u64, cur_w: u64, side: u64, max_tiles: u64) -> (u64, u64) {
    let (h, w) = (cur_h as f64, cur_w as f64);
    let denom = (max_tiles.max(1) * side * side) as f64;
    let ratio = (h * w / denom).sqrt();
    if ratio > 1.1 {
        ((h / ratio).floor() as u64, (w / ratio).floor() as u64)
    } else {
        (cur_h, cur_w)
    }
}

/// One image alone in its sequence: `unpadded + newlines + base` tokens
/// (`_get_number_of_features`: the base image's `side²` patches, SigLIP having no class
/// token, and the unpadded, shrunken map with one newline per row); the tower runs on the
/// base image and each of the grid's `image_size` tiles (`image_size_to_num_patches`).
pub(super) fn anyres_max(
    (height, width): (u64, u64),
    (size, patch): (u64, u64),
    pinpoints: &[(u64, u64)],
    max_tiles: u64,
) -> Result<ImageCost, String> {
    let (sh, sw, cur_h, cur_w) = unpadded_grid(height, width, size, patch, pinpoints)?;
    let side = size / patch.max(1);
    let (h, w) = shrink(cur_h, cur_w, side, max_tiles);
    Ok(ImageCost {
        tokens: h * w + h + side * side,
        tower_images: 1 + sh * sw,
        tower_seq: side * side,
    })
}

/// An image among several in one sequence: its base image only, `side²` tokens and the
/// newline (`num_image_tokens + 1`).
pub(super) fn single_tile(size: u64, patch: u64) -> ImageCost {
    let side = size / patch.max(1);
    ImageCost {
        tokens: side * side + 1,
        tower_images: 1,
        tower_seq: side * side,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 27 × 27 map of one 384 px tile (`side` 27): a 2 × 2 grid gives 54 × 54 = 2916
    /// patches; 9 tiles' worth is 9 · 729 = 6561, ratio sqrt(2916 / 6561) = 0.67: kept. A 6 × 6
    /// grid (162 × 162 = 26,244) has ratio sqrt(26,244 / 6561) = 2.0 > 1.1: 162 // 2.0 = 81 a side.
    #[test]
    fn shrinks_only_past_max_tiles() {
        assert_eq!(shrink(54, 54, 27, 9), (54, 54));
        assert_eq!(shrink(162, 162, 27, 9), (81, 81));
    }
}
