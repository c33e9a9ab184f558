//! What one `generate` stream is written from ([`InferInputs`]) and a static cache's shape
//! ([`StaticCache`]): the types `infer.rs` and `static_cache.rs` both read. A leaf.

use super::plan_events::PlanEvents;
use crate::estimate::forward_plan::ForwardPlan;
use crate::estimate::kv::GenerateLayer;

/// What one `generate` stream is written from: the plan and its blocks' events, the
/// parameters, the batch's shape and the cache's.
#[derive(Debug, Clone)]
pub struct InferInputs<'a> {
    pub plan: &'a ForwardPlan,
    pub events: &'a PlanEvents,
    /// Parameter tensors' bytes in module order.
    pub params: &'a [u64],
    /// cuBLAS workspace of the one handle.
    pub workspace: u64,
    pub batch: u64,
    pub prompt: u64,
    pub new_tokens: u64,
    /// Bytes of the hidden state of one token.
    pub hidden_per_token: u64,
    /// Bytes of one layer's keys (or values) per token, all sequences, averaged over the
    /// layers (`kv.rs`): the static cache's.
    pub kv_per_token: u64,
    /// Each layer's dynamic cache (`kv::generate_layers`), in the order of
    /// `events.layer_block`: its keys per token, its window, its recurrent state.
    pub kv_layers: Vec<GenerateLayer>,
    /// The vocabulary (logits of the last position: batch × vocab).
    pub vocab: u64,
    /// Width of the logits (the head's output dtype).
    pub logits_width: u64,
    /// `generate` calls (run_one.py: a warm-up and a measured one; the second reserves nothing
    /// new on the H200 runs, so one is written).
    pub calls: u8,
    /// `cache_implementation="static"` (job `engine.cache`): the static cache's shape, else
    /// `None` (transformers' `DynamicCache`).
    pub static_cache: Option<StaticCache>,
}

/// What a `StaticCache` run allocates beyond a dynamic one (module `static_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticCache {
    /// `max_cache_len`: prompt + new tokens − 1 (`kv::generate_cache_tokens`).
    pub len: u64,
    /// Query heads per key/value head (`repeat_kv`'s `n_rep`; 1 without grouped-query).
    pub rep: u64,
    /// Width of the query (the additive mask's dtype).
    pub query_width: u64,
}
