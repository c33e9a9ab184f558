//! What HF `generate` with `cache_implementation="static"` (transformers' `StaticCache`)
//! allocates beyond the dynamic cache's stream (`infer.rs`), each rule from its source
//! (transformers 5.17, the H200 runs' release):
//!
//! - **The cache**: `generation/utils.py` `_prepare_cache_for_generation` builds the
//!   `StaticCache` with `max_cache_len = generation_config.max_length - 1` (`generate`, step 7:
//!   the last sampled token is never fed back), `max_length` being the prompt's length +
//!   `max_new_tokens` (`_prepare_generated_length`; `kv::generate_cache_tokens`). Each layer's
//!   keys and values are made at the layer's first `update` (`cache_utils.py`
//!   `StaticLayer.lazy_initialization`: `torch.zeros` of `(batch, kv_heads, max_cache_len,
//!   head_dim)`, keys then values) — inside the prefill's attention, after the projections —
//!   then written in place (`index_copy_`) and returned whole (`infer.rs` `prefill_block`).
//! - **The prefill has no mask**: `masking_utils.py` `sdpa_mask` sizes the mask by the cache
//!   (`StaticLayer.get_mask_sizes`: `kv_length = max_cache_len`), but
//!   `_ignore_causal_mask_sdpa` skips it when the cache is empty (`q_offset == 0`) and the
//!   padding mask, padded to `max_cache_len`, is true on the prompt and false beyond it — sdpa's
//!   upper-left `is_causal` then masks the same positions. Without a mask `use_gqa_in_sdpa` is
//!   true (no `repeat_kv`), and `integrations/sdpa_attention.py` slices the keys and values to
//!   the query's length (`key[:, :, :q_length]`, views) so flash runs as on a dynamic cache:
//!   the prefill's attention is the dynamic one's (the H200 b4 × 1024 and × 4096 runs peak at
//!   exactly the dynamic mechanism's bytes, no mask among them).
//! - **Each decode forward has one**: the cache is no longer empty and its unfilled positions
//!   are masked, so `sdpa_mask` materialises a bool `(batch, 1, 1, max_cache_len)` once per
//!   forward, shared by the layers ([`forward_mask`]); with a mask `use_gqa_in_sdpa` is false,
//!   so `repeat_kv` copies the whole cache's keys and values out to every query head, and aten's
//!   `scaled_dot_product_attention` (`attention.cpp`) turns the bool mask into an additive one in
//!   the query's dtype (`convert_boolean_attn_mask`, or `_cudnn` for cuDNN: `zeros_like(mask,
//!   dtype)` then `masked_fill_(mask.logical_not(), ...)`, the `logical_not` a bool temporary).
//!   The copies and the additive mask are freed when the call returns ([`decode`]).

use super::infer_inputs::{InferInputs, StaticCache};
use super::Sink;

/// `sdpa_mask`'s bool mask of one decode forward over `q_len` new positions (freed by the
/// caller when the forward returns). Without vmap (`_non_vmap_expansion_sdpa`) the mask
/// function runs on broadcast index tensors: `and_masks` starts from a 0-d `True` and ands in the causal
/// function's `(1, 1, q_len, kv_len)` result (`kv_idx <= q_idx`), a new `(1, 1, q_len, kv_len)`
/// tensor, then the padding function's `(batch, 1, 1, kv_len)` one, the `(batch, 1, q_len,
/// kv_len)` mask; the intermediates die as `and_masks` rebinds its result.
fn forward_mask<S: Sink>(s: &mut S, inp: &InferInputs, sc: StaticCache, q_len: u64) -> u32 {
    let plane = q_len * sc.len;
    let causal = s.alloc(plane);
    let anded = s.alloc(plane);
    s.free(causal);
    let mask = s.alloc(inp.batch * plane);
    s.free(anded);
    mask
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
