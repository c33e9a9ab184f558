//! What the newer families' projectors save for backward (`vision.rs` asks for the ones it
//! does not model itself): Mistral 3's patch-merging projector, the pixel-shuffle connector
//! of Idefics3 / SmolVLM and Qwen3-VL's merger with its DeepStack mergers.

use super::blocks::Numerics;
use super::overhead::round_size;
use crate::vision::{ImageCost, Projector, Vision};

/// Saved tensors of the projector over `images` tower images of `cost.tower_seq` patches,
/// each at the compute width (`w`: 2 under autocast); the tower's last output (the first
/// norm's input) is already kept by the tower.
///
/// - `Mistral3MultiModalProjector` (`modeling_mistral3.py`): the RMSNorm's input (fp32 under
///   autocast: the residual width), `merging_layer`'s input (the unfolded `merge²·hidden`
///   rows, a copy), `linear_1`'s input, GELU's input and `linear_2`'s input.
/// - `Idefics3Connector` (`modeling_idefics3.py` `pixel_shuffle` then `modality_projection`):
///   the shuffled copy the projection saves, `seq·hidden` values per image.
/// - `Qwen3VLVisionPatchMerger` (`modeling_qwen3_vl.py`): as Qwen2-VL's merger (the LayerNorm
///   input, then `linear_fc1`'s, GELU's and `linear_fc2`'s inputs at `merge²·hidden`); each
///   DeepStack merger normalises an intermediate block's output (already kept as the next
///   block's input) and saves its three merged-width tensors.
pub(super) fn projector_kept(v: &Vision, images: u64, cost: ImageCost, num: Numerics) -> u64 {
    let seq = cost.tower_seq;
    let h = v.tower.hidden;
    let w = if num.autocast { 2 } else { num.compute };
    let all = images.saturating_mul(seq);
    match v.projector {
        Projector::Mistral3 { merge, out, .. } => {
            let rows = all / (merge * merge).max(1);
            round_size(all * h * num.param)
                + round_size(all * h * w)
                + round_size(rows * h * w)
                + 2 * round_size(rows * out * w)
        }
        Projector::PixelShuffle { .. } => round_size(all * h * w),
        Projector::Qwen3Merger {
            merge, deepstack, ..
        } => {
            let rows = all / (merge * merge).max(1);
            let wide = h * merge * merge;
            let one = 3 * round_size(rows * wide * w);
            round_size(all * h * num.param) + one * (1 + deepstack)
        }
        // `InternVLMultiModalProjector` after `pixel_shuffle` (a copy): the LayerNorm's and
        // `linear_1`'s inputs at `scale²·hidden`, GELU's and `linear_2`'s at the output width.
        Projector::InternVl { scale, out } => {
            let rows = all / (scale * scale).max(1);
            2 * round_size(all * h * w) + 2 * round_size(rows * out * w)
        }
        // `PaliGemmaMultiModalProjector.linear` saves its input: the tower's final
        // LayerNorm output (fp32 under autocast, so the linear's 16-bit copy).
        Projector::PaliGemma { .. } => round_size(all * h * w),
        Projector::Lfm2Vl {
            scale, inner, norm, ..
        } => lfm2_vl_kept(all, h, (scale, inner, norm), num),
        // Llama 4 (`modeling_llama4.py`): the tower's output without its class token goes
        // through `pixel_shuffle` (two `permute(...).contiguous()` copies; the second,
        // `(seq-1)·hidden` values per image, is what `vision_adapter.mlp.fc1` saves), GELU saves
        // `fc1`'s output, `fc2` its input, the second GELU `fc2`'s output, and the projector's
        // `linear_1` that GELU's output: per shuffled row `shuffle²·hidden + input + 3·output`.
        Projector::Llama4 { .. } => {
            let crate::vision::TowerKind::Llama4 {
                shuffle,
                projector_input,
                projector_output,
            } = v.tower.kind
            else {
                return 0;
            };
            let patches = images.saturating_mul(seq.saturating_sub(1));
            let rows = patches / (shuffle * shuffle).max(1);
            round_size(patches * h * w)
                + round_size(rows * projector_input * w)
                + 3 * round_size(rows * projector_output * w)
        }
        _ => 0,
    }
}

/// `Lfm2VlMultiModalProjector` (`modeling_lfm2_vl.py`) over the `rows` patch rows
/// `Lfm2VlModel.get_image_features` gathers (every token slot of every tower image, padding
/// slots included): `pixel_unshuffle`'s last `reshape` copies the permuted rows (at the tower
/// output's width; the LayerNorm, or `linear_1`, saves it), the LayerNorm's output (saved by
/// `linear_1`; its 16-bit copy under autocast) and its fp32 mean and rstd per token, `linear_1`'s
/// output (saved by GELU) and GELU's (saved by `linear_2`), at `projector_hidden_size`.
fn lfm2_vl_kept(rows: u64, h: u64, p: (u64, u64, bool), num: Numerics) -> u64 {
    let (scale, inner, norm) = p;
    let w = if num.autocast { 2 } else { num.compute };
    let tokens = rows / (scale * scale).max(1);
    let copy = round_size(rows * h * num.param);
    let normed = if norm {
        round_size(rows * h * w) + 2 * round_size(tokens * 4)
    } else if num.autocast && num.param == 4 {
        round_size(rows * h * 2)
    } else {
        0
    };
    copy + normed + 2 * round_size(tokens * inner * w)
}
