//! What HF `generate` with `cache_implementation="static"` (transformers' `StaticCache`)
//! allocates beyond the dynamic cache's stream (`infer.rs`), each rule from its source:
//!
//! - **The cache**: `generation/utils.py` `_prepare_cache_for_generation` builds the
//!   `StaticCache` with `max_cache_len = generation_config.max_length`, which
//!   `_prepare_generated_length` sets to the prompt's length + `max_new_tokens`. Each layer's
//!   keys and values are made at the layer's first `update` (`cache_utils.py`
//!   `StaticLayer.lazy_initialization`: `torch.zeros` of `(batch, kv_heads, max_cache_len,
//!   head_dim)`, keys then values) — inside the prefill's attention, after the projections —
//!   then written in place (`index_copy_`) and returned whole: the attention reads all
//!   `max_cache_len` positions in prefill and in every decode step.
//! - **The mask**: `masking_utils.py` `create_causal_mask` sizes the mask by the cache
//!   (`StaticLayer.get_mask_sizes`: `kv_length = max_cache_len`); the padding mask padded to
//!   that length has unfilled (false) positions, so `_ignore_causal_mask_sdpa` cannot leave
//!   the mask to `is_causal` and `sdpa_mask` materialises a bool `(batch, 1, q_len,
//!   max_cache_len)` once per forward, shared by the layers.
//! - **Per attention call** (`integrations/sdpa_attention.py` `sdpa_attention_forward`): with a
//!   mask `use_gqa_in_sdpa` is false, so `repeat_kv` copies the whole cache's keys and values
//!   out to every query head; then aten's `scaled_dot_product_attention` (`attention.cpp`)
//!   turns the bool mask into an additive one in the query's dtype
//!   (`convert_boolean_attn_mask`, or `_cudnn` for cuDNN: `zeros_like(mask, dtype)` then
//!   `masked_fill_(mask.logical_not(), ...)`, the `logical_not` a bool temporary). A mask rules
//!   flash out; the memory-efficient (or cuDNN) kernel that takes it allocates its output as
//!   flash does (`blocks/sdpa.rs`), so the block's own events stand for it. The copies and the
//!   additive mask are freed when the call returns. The mask's last dimension is a multiple of
//!   16 on the measured runs, so `preprocess_mask`'s `pad_bias` copy is not written.

use super::infer::{InferInputs, StaticCache};
use super::{run_block, BlockIds, Sink};
use crate::estimate::tape::BlockEvents;

/// `sdpa_mask`'s bool mask of one forward over `q_len` new positions (freed by the caller when
/// the forward returns). Without vmap (`_non_vmap_expansion_sdpa`) the mask function runs on
/// broadcast index tensors: `and_masks` starts from a 0-d `True` and ands in the causal
/// function's `(1, 1, q_len, kv_len)` result (`kv_idx <= q_idx`), a new `(1, 1, q_len, kv_len)`
/// tensor, then the padding function's `(batch, 1, 1, kv_len)` one, the `(batch, 1, q_len,
/// kv_len)` mask; the intermediates die as `and_masks` rebinds its result.
pub(super) fn forward_mask<S: Sink>(
    s: &mut S,
    inp: &InferInputs,
    sc: StaticCache,
    q_len: u64,
) -> u32 {
    let plane = q_len * sc.len;
    let causal = s.alloc(plane);
    let anded = s.alloc(plane);
    s.free(causal);
    let mask = s.alloc(inp.batch * plane);
    s.free(anded);
    mask
}

/// One prefill block with a static cache: its events up to the attention kernel, the layer's
/// cache made (first `update`), the call's `repeat_kv` copies and additive mask, the kernel's
/// output, the call's tensors freed, the rest of the block. Returns the layer's keys and values.
pub(super) fn prefill_block<S: Sink>(
    s: &mut S,
    inp: &InferInputs,
    sc: StaticCache,
    b: &BlockEvents,
    ids: BlockIds,
) -> [u32; 2] {
    let evs = &b.forward_no_save;
    let at = b
        .attention_at
        .map_or(evs.len(), |a| a as usize)
        .min(evs.len());
    run_block(s, b, &evs[..at], ids, false);
    let k = s.alloc(inp.kv_per_token * sc.len);
    let v = s.alloc(inp.kv_per_token * sc.len);
    // `key_states, value_states = past_key_values.update(...)` rebinds the attention's names
    // to the cache's tensors: the projected (rotated) keys and values die here, before
    // `repeat_kv` (their later frees in the block's events are no-ops).
    for slot in b.attention_kv.into_iter().flatten() {
        if slot != b.input {
            s.free(ids.id(b, slot));
        }
    }
    let call = attention_call(s, inp, sc, inp.prompt);
    let kernel = (at + 1).min(evs.len());
    run_block(s, b, &evs[at..kernel], ids, false);
    for id in call {
        s.free(id);
    }
    run_block(s, b, &evs[kernel..], ids, false);
    [k, v]
}

/// One decode forward with a static cache (the query one token): the forward's mask, then per
/// layer the whole cache through `repeat_kv` and the additive mask, freed as each call returns.
pub(super) fn decode<S: Sink>(s: &mut S, inp: &InferInputs, sc: StaticCache, layers: usize) {
    let mask = forward_mask(s, inp, sc, 1);
    for _ in 0..layers {
        for id in attention_call(s, inp, sc, 1) {
            s.free(id);
        }
    }
    s.free(mask);
}

/// One attention call's tensors over `q_len` queries: the repeated keys and values (none
/// without grouped-query attention: `repeat_kv` returns its input when `n_rep == 1`), the
/// additive mask, whose `logical_not` temporary is freed once filled. Returns what the call
/// holds until it returns.
fn attention_call<S: Sink>(s: &mut S, inp: &InferInputs, sc: StaticCache, q_len: u64) -> [u32; 3] {
    let repeated = if sc.rep > 1 {
        inp.kv_per_token * sc.len * sc.rep
    } else {
        0
    };
    let k = s.alloc(repeated);
    let v = s.alloc(repeated);
    let positions = inp.batch * q_len * sc.len;
    let additive = s.alloc(positions * sc.query_width);
    let not = s.alloc(positions);
    s.free(not);
    [k, v, additive]
}
