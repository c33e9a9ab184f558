//! The attention masks a causal LM's forward builds once, before its first block, and holds to
//! its end (transformers 5.24 `masking_utils.py`; `LlamaModel.forward` / `MistralModel.forward`
//! build one mask, `Gemma2Model` / `Gemma3TextModel` / gpt-oss / Llama 4 a dict of one mask per
//! layer type, every layer reading its own). Which mask exists, by attention implementation:
//!
//! - **flash-attention**: none (`flash_attention_mask` returns the 2-D padding mask or `None`).
//! - **SDPA**: `sdpa_mask` returns `None` — the kernel's `is_causal` — when
//!   `_ignore_causal_mask_sdpa` holds: no padding and the query as long as the keys (a prefill,
//!   a training forward) or one token (a decode step), *unless* the layer is local
//!   (`create_sliding_window_causal_mask` / `create_chunked_causal_mask` pass `local_size`, and
//!   `kv_length >= local_size` forbids the skip). So a full-attention layer has no mask, and a
//!   sliding (chunked) layer's mask is materialised once the sequence reaches the window (the
//!   chunk): a bool tensor. Its shape is the broadcast of the mask function's index tensors
//!   (`_non_vmap_expansion_sdpa`): `[1, 1, q, kv]`, `expand`ed to the batch (a view), without
//!   padding; a padding mask (`padding_mask_function` indexes `padding_mask[batch_idx,
//!   kv_idx]`) makes it `[b, 1, q, kv]`. Probed on transformers 5.24 (tiny Mistral, window 8,
//!   batch 2, prompt 32, `generate`): an all-ones `attention_mask` gives a 1,024 B storage
//!   (32², the padding mask dropped), one padded row 2,048 B. The job knows no padding, so
//!   the unpadded `[1, 1, s, s]` is modelled (a padded batch holds `b×` that).
//!   DeepSeek-V3.2's / GLM-5's indexed layers ask for theirs with `allow_is_causal_skip=False`
//!   and turn it into their sparse float mask per layer (`blocks/dsa.rs`); their shared
//!   causal mask is not counted here (counted as a full layer's).
//! - **eager**: `eager_mask` never skips (`allow_is_causal_skip=False`) and turns the bool mask
//!   into `torch.where(mask, 0, min_dtype)`, a float `[b, 1, q, kv]` in the embeddings' dtype,
//!   one per layer type (full attention included); the bool mask dies once filled.
//!
//! In a decode step the masks are `[b, 1, 1, ≤ window]` (or `[b, 1, 1, kv]` for eager's full
//! layers): bytes per sequence per cached token, not modelled. SDPA's own additive copy of a
//! bool mask, one per masked layer call (`convert_boolean_attn_mask`), is the block's
//! (`blocks/attention.rs` `masked_sdpa_inputs`). A compiled training step's mask is
//! `compile::traced_causal_mask`.

use super::blocks::Numerics;
use super::forward_plan::EagerMasks;
use super::overhead::round_size;
use crate::job::{AttentionKernel, Framework, ResolvedJob};
use crate::model::{AttentionKind, Head, ModelSpec};

/// The kinds of attention layer a forward builds a mask for, one mask each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Kinds {
    full: bool,
    /// The smallest sliding window among the sliding layers.
    sliding: Option<u64>,
    /// The smallest chunk among the chunked layers.
    chunked: Option<u64>,
}

/// The layer types of `spec`'s attention layers (state-space layers have none).
fn kinds(spec: &ModelSpec) -> Kinds {
    let mut k = Kinds::default();
    let min = |a: Option<u64>, b: u64| Some(a.map_or(b, |a| a.min(b)));
    for l in spec.all_layers() {
        let att = &l.attention;
        if matches!(att.kind, AttentionKind::StateSpace(_)) {
            continue;
        }
        if let Some(c) = att.attention_chunk {
            k.chunked = min(k.chunked, c);
        } else if let Some(w) = att.sliding_window {
            k.sliding = min(k.sliding, w);
        } else {
            k.full = true;
        }
    }
    k
}

/// The masks of `job`'s forward on `spec` ([`EagerMasks`]: the held bytes and the bool
/// pattern freed once a float mask is filled from it), per the module's rules. `seq` is the
/// job's sequence (the prompt in inference), the batch unpadded.
pub fn forward_masks(spec: &ModelSpec, job: &ResolvedJob, num: Numerics) -> EagerMasks {
    let causal = matches!(spec.head, Head::LanguageModel { .. }) && spec.encoder.is_none();
    // Megatron builds its own boolean mask in the data loader, not transformers'; a serving
    // engine runs its own kernels.
    let hf_modules = matches!(
        job.framework,
        Framework::Pytorch | Framework::Deepspeed | Framework::Fsdp
    );
    if !causal || !hf_modules || num.compile {
        return EagerMasks::default();
    }
    let k = kinds(spec);
    let (b, s) = (job.batch, job.seq);
    let plane = s * s;
    // gpt-oss has no SDPA path (`_supports_sdpa = False`): SDPA reads as eager, as in its
    // blocks (`blocks/attention.rs`).
    let kernel = match job.attention {
        AttentionKernel::Sdpa if spec.all_layers().any(|l| l.attention.sinks) => {
            AttentionKernel::Eager
        }
        k => k,
    };
    match kernel {
        AttentionKernel::Flash => EagerMasks::default(),
        AttentionKernel::Eager => {
            let n =
                u64::from(k.full) + u64::from(k.sliding.is_some()) + u64::from(k.chunked.is_some());
            if n == 0 {
                return EagerMasks::default();
            }
            EagerMasks {
                bytes: n * round_size(b * s * s * num.param),
                pattern: round_size(plane),
            }
        }
        AttentionKernel::Sdpa => {
            let reaches = |w: Option<u64>| w.is_some_and(|w| s >= w);
            let n = u64::from(reaches(k.sliding)) + u64::from(reaches(k.chunked));
            EagerMasks {
                bytes: n * round_size(plane),
                pattern: 0,
            }
        }
    }
}
