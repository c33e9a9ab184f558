//! What LFM2-VL's SigLIP2 NaFlex tower (`modeling_siglip2.py`, transformers 5.24) keeps beyond
//! the ViT blocks every tower shares: the padding mask each attention layer turns into a float
//! bias, and the position-embedding resize's weights.

use super::blocks::Numerics;
use super::overhead::round_size;
use crate::error::CoreError;
use crate::job::{AttentionKernel, ResolvedJob};
use crate::vision::{ImageCost, ImageTokens, Vision};

/// (kept through the step, live during the tower's forward) for `images` tower images of
/// `cost.tower_seq` (= `max_num_patches`) rows each, `trains` when the tower's weights train.
///
/// - The padding mask. When some tower image is padded (`Lfm2VlTokens::padded`),
///   `Siglip2VisionTransformer.forward` makes a bool `[n, 1, s, s]` mask
///   (`create_bidirectional_mask`; with SDPA it is dropped when nothing is padded). SDPA turns
///   it into a float bias in the query's dtype in every layer (`convert_boolean_attn_mask` in
///   torch's `scaled_dot_product_attention`, on the CPU and on CUDA alike), which the kernel
///   keeps for backward (the CPU flash kernel and CUDA's memory-efficient one, which a mask
///   selects): one `n · s²` bias per trained layer. Eager gets one float mask for all layers
///   (its `+ attention_mask` saves nothing); `flash_attention_2` unpads instead of masking.
/// - `Siglip2VisionEmbeddings.resize_positional_embeddings`: the bilinear resize written as a
///   matmul, `weights [n, s, num_patches] @ position_embedding.weight`, whose `weights` (fp32;
///   a bf16 copy under autocast) the matmul keeps to give the position table its gradient.
pub(super) fn extras(
    v: &Vision,
    job: &ResolvedJob,
    images: u64,
    cost: ImageCost,
    num: Numerics,
    trains: bool,
) -> Result<(u64, u64), CoreError> {
    let (s, n) = (cost.tower_seq, images);
    let padded = match (&v.tokens, job.images) {
        (ImageTokens::Lfm2Vl(t), Some(im)) => t
            .padded(im.height, im.width)
            .map_err(|e| CoreError::field("images", e))?,
        _ => false,
    };
    let scores = n.saturating_mul(s).saturating_mul(s);
    let (mut kept, mut live) = (0u64, 0u64);
    if padded {
        let bias = round_size(scores.saturating_mul(num.compute));
        match job.attention {
            AttentionKernel::Sdpa => {
                live += round_size(scores) + bias;
                if trains {
                    let layers = v.tower.layers_used.min(v.tower.layers);
                    kept += bias.saturating_mul(layers);
                }
            }
            AttentionKernel::Eager => live += round_size(scores.saturating_mul(num.param)),
            AttentionKernel::Flash => {}
        }
    }
    let weights = n.saturating_mul(s).saturating_mul(v.tower.position_rows);
    live += round_size(weights.saturating_mul(4));
    if trains {
        let w = if num.autocast { 2 } else { 4 };
        kept += round_size(weights.saturating_mul(w));
    }
    Ok((kept, kept.max(live)))
}
