//! Image tokens of the families that resize to a longest edge (Pixtral / Mistral 3) or cut
//! the image into tiles (Idefics3 / SmolVLM): each rule as its transformers processor computes
//! it, Python's float arithmetic and integer truncation kept.

use super::ImageCost;

/// Idefics3's upper bound on either side after the first resize (`MAX_IMAGE_SIZE` in
/// `image_processing_idefics3.py` / `image_processing_smolvlm.py`).
const IDEFICS_MAX_SIDE: u64 = 4096;

/// Pixtral (`image_processing_pixtral.py` `get_resize_output_image_size` with the processor's
/// `patch_size · spatial_merge_size` as the step, `processing_pixtral.py`): an image larger
/// than `longest` on either side is shrunk by `ratio = max(h/longest, w/longest)` (floored);
/// each side is then rounded up to whole `patch·merge` cells. The language model gets one
/// `[IMG]` per cell and one `[IMG_BREAK]` per row (the last one `[IMG_END]`): `(cols + 1) ·
/// rows`; the tower sees `(rows·merge) · (cols·merge)` patches.
pub(super) fn pixtral(
    height: u64,
    width: u64,
    patch: u64,
    merge: u64,
    longest: u64,
) -> Result<ImageCost, String> {
    let cell = patch.max(1) * merge.max(1);
    let (mut h, mut w) = (height as f64, width as f64);
    let ratio = (h / longest.max(1) as f64).max(w / longest.max(1) as f64);
    if ratio > 1.0 {
        h = (h / ratio).floor();
        w = (w / ratio).floor();
    }
    let (h, w) = (h as u64, w as u64);
    if h == 0 || w == 0 {
        return Err(format!(
            "a {width}×{height} image shrinks to no pixels on one side within the processor's \
             longest edge {longest} (aspect ratio too extreme)"
        ));
    }
    let (rows, cols) = ((h - 1) / cell + 1, (w - 1) / cell + 1);
    Ok(ImageCost {
        tokens: (cols + 1) * rows,
        tower_images: 1,
        tower_seq: (rows * merge).saturating_mul(cols * merge),
    })
}

/// `_resize_output_size_rescale_to_max_len`: the longest side set to `max_len`, the other by
/// the aspect ratio (truncated, then made even).
fn rescale_to_max_len(height: u64, width: u64, max_len: u64) -> (u64, u64) {
    let aspect = width as f64 / height as f64;
    let (h, w) = if width >= height {
        let mut h = (max_len as f64 / aspect) as u64;
        h += h % 2;
        (h, max_len)
    } else {
        let mut w = (max_len as f64 * aspect) as u64;
        w += w % 2;
        (max_len, w)
    };
    (h.max(1), w.max(1))
}

/// `_resize_output_size_scale_below_upper_bound`: the longest side capped at `max_len`.
fn scale_below(height: u64, width: u64, max_len: u64) -> (u64, u64) {
    let aspect = width as f64 / height as f64;
    let (h, w) = if width >= height && width > max_len {
        ((max_len as f64 / aspect) as u64, max_len)
    } else if height > width && height > max_len {
        (max_len, (max_len as f64 * aspect) as u64)
    } else {
        (height, width)
    };
    (h.max(1), w.max(1))
}

/// Idefics3 / SmolVLM (`get_number_of_image_patches` of `image_processing_smolvlm.py` and
/// `image_processing_idefics3.py`): the image resized so its longest side is `longest` (up or
/// down), capped at 4096, each side rounded up to whole `tile`s; more than one tile gives
/// `rows × cols` tiles plus the global image. Each tower image (`tile` square) yields `seq =
/// (tile/patch)² / scale²` tokens after the pixel shuffle. The prompt (`_prompt_split_image`):
/// per tile `<fake_token_around_image>`, `<row_r_col_c>` and `seq` `<image>`; a newline after
/// each row; then a newline, `<fake_token_around_image>`, `<global-img>`, `seq` `<image>`,
/// `<fake_token_around_image>` — `rows·cols·(seq + 2) + rows + seq + 3` tokens, the last row's
/// newline and the next one being one `"\n\n"` token in the GPT-2-style BPE vocabularies these
/// models use (SmolLM2, Llama 3). One tile: `seq + 3` (`_prompt_single_image`).
pub(super) fn idefics3(
    height: u64,
    width: u64,
    tile: u64,
    longest: u64,
    patch: u64,
    scale: u64,
    split: bool,
) -> Result<ImageCost, String> {
    let tile = tile.max(1);
    let side = tile / patch.max(1);
    let seq = side.saturating_mul(side) / scale.saturating_mul(scale).max(1);
    let single = ImageCost {
        tokens: seq + 3,
        tower_images: 1,
        tower_seq: side.saturating_mul(side),
    };
    if !split {
        return Ok(single);
    }
    let (h, w) = rescale_to_max_len(height, width, longest.max(1));
    let (h, w) = scale_below(h, w, IDEFICS_MAX_SIDE);
    let (rows, cols) = (h.div_ceil(tile), w.div_ceil(tile));
    if rows * tile <= tile && cols * tile <= tile {
        return Ok(single);
    }
    Ok(ImageCost {
        tokens: (rows * cols).saturating_mul(seq + 2) + rows + seq + 3,
        tower_images: rows * cols + 1,
        tower_seq: side.saturating_mul(side),
    })
}

/// Most tiles considered by the InternVL grid search (a hostile `max_patches` stays cheap).
const MAX_TILES: u64 = 256;

/// `get_optimal_tiled_canvas` (`image_processing_got_ocr2.py`): among the (columns, rows)
/// grids of `min..=max` tiles, in `get_all_supported_aspect_ratios`'s order (by tile count,
/// stable), the one whose aspect ratio is closest to the image's; on a tie the later grid
/// wins while the image's area exceeds half the grid's.
fn optimal_canvas(height: u64, width: u64, tile: u64, min: u64, max: u64) -> (u64, u64) {
    let max = max.min(MAX_TILES);
    let mut grids = Vec::new();
    for c in 1..=max {
        for r in 1..=max {
            if (min..=max).contains(&(c * r)) {
                grids.push((c, r));
            }
        }
    }
    grids.sort_by_key(|&(c, r)| c * r);
    let aspect = width as f64 / height as f64;
    let area = width as f64 * height as f64;
    let (mut best_diff, mut best) = (f64::INFINITY, (1, 1));
    for (c, r) in grids {
        let diff = (aspect - c as f64 / r as f64).abs();
        if diff < best_diff {
            (best_diff, best) = (diff, (c, r));
        } else if diff == best_diff && area > 0.5 * (tile as f64).powi(2) * (c * r) as f64 {
            best = (c, r);
        }
    }
    best
}

/// InternVL's tiles and tokens (`processing_internvl.py`: `<img>`, `seq` `<IMG_CONTEXT>` per
/// tile, `</img>` — `2 + seq · tiles`); the tower sees `(tile/patch)² + 1` positions per tile.
pub(super) fn internvl(
    (height, width): (u64, u64),
    (tile, patch): (u64, u64),
    (min, max): (u64, u64),
    crop: bool,
    seq: u64,
) -> ImageCost {
    let mut tiles = 1;
    if crop && max > 1 {
        let (c, r) = optimal_canvas(height, width, tile.max(1), min, max);
        if c * r > 1 {
            tiles += c * r;
        }
    }
    let side = tile / patch.max(1);
    ImageCost {
        tokens: seq.saturating_mul(tiles).saturating_add(2),
        tower_images: tiles,
        tower_seq: side.saturating_mul(side).saturating_add(1),
    }
}
