//! Image tokens: how many positions one image takes in the language model's sequence, and
//! what the vision tower runs on to make them — each family by its own processor.

use super::anyres::anyres;
use super::cost::ImageCost;
use serde::{Deserialize, Serialize};

/// A family's rule for the tokens of one image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImageTokens {
    /// Qwen2-VL / Qwen2.5-VL dynamic resolution (`image_processing_qwen2_vl.py`
    /// `smart_resize`): the image is resized to multiples of `patch·merge` with its area
    /// between `min_pixels` and `max_pixels`; the tower sees every patch, the language model
    /// one token per `merge × merge` patches.
    QwenDynamic {
        patch: u64,
        merge: u64,
        min_pixels: u64,
        max_pixels: u64,
    },
    /// A fixed resize to `image_size` square (LLaVA-1.5 at 336 px: 576 tokens; Gemma 3 at 896
    /// px: 4096 patches pooled to `tokens` = 256): the tower's sequence is `(image_size /
    /// patch)²` patches (plus CLIP's class token), the language model gets `tokens`.
    Fixed {
        image_size: u64,
        patch: u64,
        tokens: u64,
        class_token: bool,
    },
    /// LLaVA-NeXT "anyres" (`processing_llava_next.py` `_get_number_of_features`,
    /// `image_processing_utils.select_best_resolution`): the image is tiled at the best of
    /// `pinpoints` (height, width) in `image_size` crops plus one resized base image; the
    /// tokens are the base image's patches plus the tiles' patches with the padding removed
    /// and one newline per row.
    AnyRes {
        image_size: u64,
        patch: u64,
        pinpoints: Vec<(u64, u64)>,
        class_token: bool,
    },
    /// LLaVA-OneVision "anyres_max_N" (`processing_llava_onevision.py`
    /// `_get_number_of_features`, `modeling_llava_onevision.py` `pack_image_features`): LLaVA-NeXT's
    /// anyres grid over `image_size` tiles of a SigLIP tower (no class token), the unpadded
    /// feature map shrunk by bilinear interpolation when it holds more than `max_tiles` tiles'
    /// worth of patches, one newline per row, plus the base image. Several images in one
    /// sequence are not tiled: each is its base image and one newline.
    AnyResMax {
        image_size: u64,
        patch: u64,
        pinpoints: Vec<(u64, u64)>,
        max_tiles: u64,
    },
    /// Pixtral / Mistral 3 (`image_processing_pixtral.py` `get_resize_output_image_size`,
    /// `processing_pixtral.py`): the image shrunk to fit `longest_edge`, each side rounded up
    /// to a multiple of `patch·merge`; the tower sees every patch, the language model one
    /// token per `merge × merge` patches plus one `[IMG_BREAK]` / `[IMG_END]` per row.
    Pixtral {
        patch: u64,
        merge: u64,
        longest_edge: u64,
    },
    /// Idefics3 / SmolVLM image splitting (`image_processing_smolvlm.py`
    /// `get_number_of_image_patches`, `processing_smolvlm.py` `_prompt_split_image`): the
    /// longest side resized to `longest_edge`, cut into `tile`-pixel squares plus one global
    /// image; each tower image gives `(tile/patch)² / scale²` tokens after the pixel shuffle.
    Idefics3 {
        tile: u64,
        longest_edge: u64,
        patch: u64,
        scale: u64,
        split: bool,
    },
    /// InternVL dynamic tiling (`image_processing_got_ocr2.py` `get_number_of_image_patches`
    /// with `crop_to_patches`; `processing_internvl.py`): the grid of `tile`-pixel crops whose
    /// aspect ratio is closest to the image's among `min_tiles..=max_tiles` tiles, plus a
    /// thumbnail when more than one; each tower image (a `tile` square, class token included)
    /// gives `seq` tokens, the image `<img>` … `</img>` around them.
    Tiles {
        tile: u64,
        patch: u64,
        min_tiles: u64,
        max_tiles: u64,
        crop: bool,
        seq: u64,
    },
    /// Llama-3.2-Vision (`image_processing_mllama.py`, `processing_mllama.py`): the image is
    /// fitted to the best canvas of at most `max_tiles` `tile`-pixel tiles and padded to
    /// `max_tiles` tiles; the tower runs all of them as one sequence of `max_tiles ·
    /// pad8((tile/patch)² + 1)` positions. The text gets one `<|image|>` token per image; the
    /// image reaches the language model through cross-attention only.
    Mllama {
        tile: u64,
        patch: u64,
        max_tiles: u64,
    },
    /// LFM2-VL (`image_processing_lfm2_vl.py` `resize_and_split`, `processing_lfm2_vl.py`
    /// `_build_image_tokens`): an image too large for one tile is cut into the grid of `tile`
    /// squares closest to its aspect ratio plus a thumbnail, else resized whole; see
    /// [`super::lfm2_vl`].
    Lfm2Vl(super::lfm2_vl::Lfm2VlTokens),
    /// Llama 4 (`image_processing_llama4.py`, `processing_llama4.py`): at most `max_tiles`
    /// `tile`-pixel tiles plus a global tile when tiled, `(tile/patch)² / shuffle²` tokens
    /// each, with the separators of `_prompt_split_image` ([`super::llama4::cost`]).
    Llama4 {
        tile: u64,
        patch: u64,
        shuffle: u64,
        max_tiles: u64,
    },
    /// Gemma 4 (`image_processing_gemma4.py`, `processing_gemma4.py`): the image resized to
    /// at most `max_soft_tokens · pooling²` patches, padded to that many for the tower; one
    /// token per `pooling × pooling` real patches plus `<boi>` / `<eoi>` ([`super::gemma4::cost`]).
    Gemma4 {
        patch: u64,
        pooling: u64,
        max_soft_tokens: u64,
    },
}

impl ImageTokens {
    /// The cost of each of `count` `width × height` images of one sequence: as [`Self::cost`],
    /// except where a family treats several images differently from one (LLaVA-OneVision does
    /// not tile them: `processing_llava_onevision.py` gives each `num_image_tokens + 1`).
    pub fn cost_for(&self, count: u64, width: u64, height: u64) -> Result<ImageCost, String> {
        match *self {
            ImageTokens::AnyResMax {
                image_size, patch, ..
            } if count > 1 && width > 0 && height > 0 => {
                Ok(super::onevision::single_tile(image_size, patch))
            }
            _ => self.cost(width, height),
        }
    }

    /// The cost of one `width × height` image; an error names what the processor refuses.
    pub fn cost(&self, width: u64, height: u64) -> Result<ImageCost, String> {
        if width == 0 || height == 0 {
            return Err("image width and height must be at least 1".into());
        }
        match *self {
            ImageTokens::QwenDynamic {
                patch,
                merge,
                min_pixels,
                max_pixels,
            } => qwen_dynamic((height, width), patch, merge, (min_pixels, max_pixels)),
            ImageTokens::Fixed {
                image_size,
                patch,
                tokens,
                class_token,
            } => Ok(fixed(image_size, patch, tokens, class_token)),
            ImageTokens::AnyRes {
                image_size,
                patch,
                ref pinpoints,
                class_token,
            } => anyres(height, width, image_size, patch, pinpoints, class_token),
            ImageTokens::AnyResMax {
                image_size,
                patch,
                ref pinpoints,
                max_tiles,
            } => super::onevision::anyres_max(
                (height, width),
                (image_size, patch),
                pinpoints,
                max_tiles,
            ),
            ImageTokens::Pixtral {
                patch,
                merge,
                longest_edge,
            } => super::tiling::pixtral(height, width, patch, merge, longest_edge),
            ImageTokens::Idefics3 {
                tile,
                longest_edge,
                patch,
                scale,
                split,
            } => super::tiling::idefics3(height, width, tile, longest_edge, patch, scale, split),
            ImageTokens::Tiles {
                tile,
                patch,
                min_tiles,
                max_tiles,
                crop,
                seq,
            } => Ok(super::tiling::internvl(
                (height, width),
                (tile, patch),
                (min_tiles, max_tiles),
                crop,
                seq,
            )),
            ImageTokens::Mllama {
                tile,
                patch,
                max_tiles,
            } => Ok(ImageCost {
                tokens: 1,
                tower_images: 1,
                tower_seq: max_tiles
                    .saturating_mul(super::mllama::padded_tile_positions(tile, patch)),
            }),
            ImageTokens::Lfm2Vl(ref t) => t.cost(height, width),
            ImageTokens::Llama4 {
                tile,
                patch,
                shuffle,
                max_tiles,
            } => Ok(super::llama4::cost(
                (height, width),
                (tile, patch),
                shuffle,
                max_tiles,
            )),
            ImageTokens::Gemma4 {
                patch,
                pooling,
                max_soft_tokens,
            } => super::gemma4::cost((height, width), patch, pooling, max_soft_tokens),
        }
    }
}

/// Qwen2-VL's dynamic resolution: the image resized by [`smart_resize`] to a multiple of
/// `patch · merge`, one tower position per patch, one token per `merge²` patches.
fn qwen_dynamic(
    (height, width): (u64, u64),
    patch: u64,
    merge: u64,
    (min_pixels, max_pixels): (u64, u64),
) -> Result<ImageCost, String> {
    let (h, w) = smart_resize(height, width, patch * merge, min_pixels, max_pixels)?;
    let patches = (h / patch) * (w / patch);
    Ok(ImageCost {
        tokens: patches / (merge * merge),
        tower_images: 1,
        tower_seq: patches,
    })
}

/// A fixed-size tower (CLIP, SigLIP): every image resized to `image_size`², its patches (and
/// a class token where the tower has one) through the tower, a fixed number of tokens out.
fn fixed(image_size: u64, patch: u64, tokens: u64, class_token: bool) -> ImageCost {
    let side = image_size / patch.max(1);
    ImageCost {
        tokens,
        tower_images: 1,
        tower_seq: side * side + u64::from(class_token),
    }
}

/// `smart_resize` of `image_processing_qwen2_vl.py` (transformers 5.x), exactly: Python's
/// `round` rounds half to even.
fn smart_resize(
    height: u64,
    width: u64,
    factor: u64,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(u64, u64), String> {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(format!(
            "absolute aspect ratio must be smaller than 200 (the Qwen-VL processor's limit), \
             got {}",
            h.max(w) / h.min(w)
        ));
    }
    let mut hb = (h / f).round_ties_even() * f;
    let mut wb = (w / f).round_ties_even() * f;
    if hb * wb > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        hb = f.max((h / beta / f).floor() * f);
        wb = f.max((w / beta / f).floor() * f);
    } else if hb * wb < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        hb = (h * beta / f).ceil() * f;
        wb = (w * beta / f).ceil() * f;
    }
    Ok((hb as u64, wb as u64))
}
