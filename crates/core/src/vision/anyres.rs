//! LLaVA-NeXT's "anyres" tiling (`processing_llava_next.py`): the best pinpoint resolution,
//! the tiles and the unpadded feature map, and the image's tokens. LLaVA-OneVision builds on
//! the same grid (`onevision`).

use super::cost::ImageCost;

/// `select_best_resolution` (transformers `image_processing_utils.py`): the pinpoint that
/// keeps the most of the image's resolution, then wastes the least.
fn best_resolution(height: u64, width: u64, pinpoints: &[(u64, u64)]) -> Option<(u64, u64)> {
    let (oh, ow) = (height as f64, width as f64);
    let mut best = None;
    let (mut max_eff, mut min_waste) = (0u64, u64::MAX);
    for &(ph, pw) in pinpoints {
        let scale = (pw as f64 / ow).min(ph as f64 / oh);
        let (dw, dh) = ((ow * scale) as u64, (oh * scale) as u64);
        let eff = (dw * dh).min(height * width);
        let waste = (ph * pw).saturating_sub(eff);
        if eff > max_eff || (eff == max_eff && waste < min_waste) {
            max_eff = eff;
            min_waste = waste;
            best = Some((ph, pw));
        }
    }
    best
}

/// The anyres grid of an image (`select_best_resolution`, then `_get_unpadded_features` of
/// `processing_llava_next.py` / `processing_llava_onevision.py`): the tiles down and across
/// (`scale_height`, `scale_width`) and the feature map left after the padding is cut off
/// (`current_height`, `current_width`, in patches).
pub(super) fn unpadded_grid(
    height: u64,
    width: u64,
    size: u64,
    patch: u64,
    pinpoints: &[(u64, u64)],
) -> Result<(u64, u64, u64, u64), String> {
    let (bh, bw) = best_resolution(height, width, pinpoints)
        .ok_or("the config's image_grid_pinpoints is empty")?;
    let (sh, sw) = (bh / size.max(1), bw / size.max(1));
    let side = size / patch.max(1);
    let (mut cur_h, mut cur_w) = (side * sh, side * sw);
    if cur_h == 0 || cur_w == 0 {
        return Err("image_grid_pinpoints holds a grid smaller than one tile".into());
    }
    let (oh, ow) = (height as f64, width as f64);
    if ow / oh > cur_w as f64 / cur_h as f64 {
        let new_h = round7(oh * (cur_w as f64 / ow)) as u64;
        cur_h -= 2 * ((cur_h.saturating_sub(new_h)) / 2);
    } else {
        let new_w = round7(ow * (cur_h as f64 / oh)) as u64;
        cur_w -= 2 * ((cur_w.saturating_sub(new_w)) / 2);
    }
    Ok((sh, sw, cur_h, cur_w))
}

/// LLaVA-NeXT's token count (`LlavaNextProcessor._get_number_of_features` and
/// `_get_unpadded_features`, `vision_feature_select_strategy: default`, which drops the class
/// token) and the tower's crops.
pub(super) fn anyres(
    height: u64,
    width: u64,
    size: u64,
    patch: u64,
    pinpoints: &[(u64, u64)],
    class_token: bool,
) -> Result<ImageCost, String> {
    let (sh, sw, cur_h, cur_w) = unpadded_grid(height, width, size, patch, pinpoints)?;
    let side = size / patch;
    Ok(ImageCost {
        tokens: cur_h * cur_w + cur_h + side * side,
        tower_images: 1 + sh * sw,
        tower_seq: side * side + u64::from(class_token),
    })
}

/// Python's `int(round(x, 7))` for the positive sizes it is used on.
fn round7(x: f64) -> f64 {
    ((x * 1e7).round_ties_even() / 1e7).trunc()
}
