//! vLLM's rows of the advice table (`advice/techniques.rs`).

use crate::advice::context::{serves, set_engine, Ctx};
use crate::job::{Framework, ResolvedJob};

/// vLLM: `max_model_len` = the longest request its KV pool holds (what `fit` launches with),
/// else the job's own context (prompt + generated) in whole blocks of 16: vLLM refuses to
/// start when one request of `max_model_len` does not fit the pool
/// (`vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`), so a model's long
/// default is lowered to what the pool holds, not to the job's context.
pub(crate) fn max_model_len(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let context = j.seq + j.new_tokens;
    let need = match c.vllm_longest_request {
        Some(n) if n >= context => n,
        _ => context.div_ceil(16) * 16,
    };
    let current = j
        .engine
        .max_model_len
        .or_else(|| c.spec.and_then(|s| s.max_position_embeddings))
        .unwrap_or(u64::MAX);
    serves(j, Framework::Vllm) && current > need && set_engine(j, "max_model_len", need.into())
}

/// vLLM: `gpu_memory_utilization` 0.95 (from the default 0.9).
pub(crate) fn utilization(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let now = j.engine.utilization_or_default();
    serves(j, Framework::Vllm) && now < 0.95 && set_engine(j, "gpu_memory_utilization", 0.95.into())
}
