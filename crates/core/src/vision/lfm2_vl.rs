//! LFM2-VL's image tokens (transformers 5.24 `image_processing_lfm2_vl.py`
//! `Lfm2VlImageProcessor.resize_and_split`, `processing_lfm2_vl.py`
//! `Lfm2VlProcessor._build_image_tokens`).

use super::cost::ImageCost;
use serde::{Deserialize, Serialize};

/// The processor's settings (`Lfm2VlImageProcessorKwargs` defaults: patch 16, factor 2, tiles
/// of 512 px, 2…10 tiles with a thumbnail, 64…256 tokens per resized image, tolerance 2.0;
/// `use_image_special_tokens` true).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lfm2VlTokens {
    /// `encoder_patch_size`.
    pub patch: u64,
    /// `downsample_factor`: the projector's pixel unshuffle.
    pub factor: u64,
    /// `tile_size`.
    pub tile: u64,
    pub min_tiles: u64,
    pub max_tiles: u64,
    pub use_thumbnail: bool,
    pub min_image_tokens: u64,
    pub max_image_tokens: u64,
    pub max_pixels_tolerance: f64,
    pub do_image_splitting: bool,
    /// `<|image_start|>`, `<|image_end|>`, one `<|img_row_R_col_C|>` per tile and
    /// `<|img_thumbnail|>`.
    pub special_tokens: bool,
}

/// Two sides: (columns, rows) of tiles, or (height, width) of an image.
type Grid = (u64, u64);

/// Python's `round(number / factor) * factor` (half to even).
fn round_by_factor(n: u64, f: u64) -> u64 {
    (n as f64 / f as f64).round_ties_even() as u64 * f
}

impl Lfm2VlTokens {
    /// The rows of each tower image after `pad_along_first_dim`: every image is padded to
    /// `max_num_patches = max(max_image_tokens · factor², (tile / patch)²)` (the tile term only
    /// when splitting), and the tower runs on the padded rows (masked).
    pub fn max_num_patches(&self) -> u64 {
        let thumb = self.max_image_tokens * self.factor * self.factor;
        let side = self.tile / self.patch.max(1);
        thumb.max(if self.do_image_splitting {
            side * side
        } else {
            0
        })
    }

    /// `smart_resize`: (height, width) as multiples of `patch · factor` with the pixels between
    /// `min_image_tokens` and `max_image_tokens` tokens' worth.
    fn smart_resize(&self, height: u64, width: u64) -> (u64, u64) {
        let tf = self.patch * self.factor;
        let per_token = self.patch * self.patch * self.factor * self.factor;
        let (min_px, max_px) = (
            self.min_image_tokens * per_token,
            self.max_image_tokens * per_token,
        );
        let (h, w, f) = (height as f64, width as f64, tf as f64);
        let hb = tf.max(round_by_factor(height, tf));
        let wb = tf.max(round_by_factor(width, tf));
        if hb * wb > max_px {
            let beta = (h * w / max_px as f64).sqrt();
            let side = |x: f64| tf.max(((x / beta / f).floor() * f) as u64);
            (side(h), side(w))
        } else if hb * wb < min_px {
            let beta = (min_px as f64 / (h * w)).sqrt();
            let side = |x: f64| ((x * beta / f).ceil() * f) as u64;
            (side(h), side(w))
        } else {
            (hb, wb)
        }
    }

    /// `_is_image_too_large`: whether the image, rounded to `patch · factor`, holds more than
    /// `max_pixels_tolerance` times the most pixels one resized image may.
    fn too_large(&self, height: u64, width: u64) -> bool {
        let tf = self.patch * self.factor;
        let hb = self.patch.max(round_by_factor(height, tf));
        let wb = self.patch.max(round_by_factor(width, tf));
        let limit = (self.max_image_tokens * self.patch * self.patch * self.factor * self.factor)
            as f64
            * self.max_pixels_tolerance;
        (hb * wb) as f64 > limit
    }

    /// `_target_ratios` then `find_closest_aspect_ratio`: the (columns, rows) grid whose
    /// aspect ratio is closest to the image's; a tie goes to the later grid when the image
    /// covers more than half of its area. Grids of one product are tried by columns ascending
    /// (Python orders them by a set's iteration, which only matters on an exact tie).
    fn grid(&self, height: u64, width: u64) -> (u64, u64) {
        let (lo, hi) = (self.min_tiles, self.max_tiles);
        let mut ratios: Vec<(u64, u64)> = (1..=hi)
            .flat_map(|w| (1..=hi).map(move |h| (w, h)))
            .filter(|&(w, h)| (lo..=hi).contains(&(w * h)))
            .collect();
        ratios.sort_by_key(|&(w, h)| (w * h, w));
        let aspect = width as f64 / height as f64;
        let area = (width * height) as f64;
        let mut best = (1, 1);
        let mut best_diff = f64::INFINITY;
        for (w, h) in ratios {
            let diff = (aspect - w as f64 / h as f64).abs();
            if diff < best_diff {
                (best_diff, best) = (diff, (w, h));
            } else if diff == best_diff {
                let target = (self.tile * self.tile * w * h) as f64;
                if area > 0.5 * target {
                    best = (w, h);
                }
            }
        }
        best
    }

    /// The processor's layout of one image: (columns, rows) of tiles (1 × 1: resized whole)
    /// and the resized image's (height, width), which is also the thumbnail's.
    fn layout(&self, height: u64, width: u64) -> Result<(Grid, Grid), String> {
        if self.patch == 0 || self.factor == 0 || self.tile < self.patch {
            return Err("LFM2-VL's patch, downsample factor and tile must be positive".into());
        }
        let (lo, hi) = if self.do_image_splitting {
            (self.min_tiles, self.max_tiles)
        } else {
            (1, 1)
        };
        if lo == 0 || lo > hi {
            return Err("min_tiles must be at least 1 and at most max_tiles".into());
        }
        let splitting = !(lo == 1 && hi == 1);
        let resized = self.smart_resize(height, width);
        let grid = if splitting && self.too_large(height, width) {
            Lfm2VlTokens {
                min_tiles: lo,
                max_tiles: hi,
                ..self.clone()
            }
            .grid(height, width)
        } else {
            (1, 1)
        };
        Ok((grid, resized))
    }

    /// Whether some tower image of a `width × height` image has fewer patches than
    /// [`Self::max_num_patches`]: then `pixel_attention_mask` masks padding and
    /// `Siglip2Encoder` attends under a mask (`masking_utils.py` `create_bidirectional_mask`
    /// drops an all-true one for SDPA: `_ignore_bidirectional_mask_sdpa`).
    pub fn padded(&self, height: u64, width: u64) -> Result<bool, String> {
        let ((cols, rows), (h, w)) = self.layout(height, width)?;
        let max = self.max_num_patches();
        let whole = (h / self.patch) * (w / self.patch) < max;
        if rows > 1 || cols > 1 {
            let side = self.tile / self.patch;
            Ok(side * side < max || (self.use_thumbnail && whole))
        } else {
            Ok(whole)
        }
    }

    /// The cost of one `width × height` image: its tiles and thumbnail (or the one resized
    /// image) as tower images of [`Self::max_num_patches`] rows, and its tokens —
    /// `ceil(tile/patch/factor)²` per tile, `ceil(h/patch/factor) · ceil(w/patch/factor)` for
    /// the resized image or thumbnail, and the special tokens around them.
    pub fn cost(&self, height: u64, width: u64) -> Result<ImageCost, String> {
        let ((cols, rows), (new_h, new_w)) = self.layout(height, width)?;
        let f = self.factor;
        let per_tile = (self.tile / self.patch).div_ceil(f).pow(2);
        let whole = (new_h / self.patch).div_ceil(f) * (new_w / self.patch).div_ceil(f);
        let special = u64::from(self.special_tokens);
        let multi = rows > 1 || cols > 1;
        let thumbnail = multi && self.use_thumbnail;
        let tokens = 2 * special
            + if multi {
                rows * cols * (per_tile + special) + if thumbnail { special + whole } else { 0 }
            } else {
                whole
            };
        Ok(ImageCost {
            tokens,
            tower_images: if multi {
                rows * cols + u64::from(thumbnail)
            } else {
                1
            },
            tower_seq: self.max_num_patches(),
        })
    }
}
