//! vLLM's rows of the advice table (`advice/techniques.rs`).

use crate::advice::context::{context_or_model, serves, set_engine, shorten_context, Ctx};
use crate::compose::estimate;
use crate::estimate::input::ModelInput;
use crate::job::{Framework, ResolvedJob, Task};

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
    let current = context_or_model(j.engine.max_model_len, c);
    shorten_context(j, Framework::Vllm, "max_model_len", current, need)
}

/// vLLM: `gpu_memory_utilization` 0.95 (from the default 0.9).
pub(crate) fn utilization(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let now = j.engine.utilization_or_default();
    serves(j, Framework::Vllm) && now < 0.95 && set_engine(j, "gpu_memory_utilization", 0.95.into())
}

/// vLLM: the longest request the job's KV pool holds, at most its `max_model_len` (the job's
/// or the model's), as `fit` finds it; `None` for other engines or when nothing fits.
pub(crate) fn longest_request(model: &ModelInput, job: &ResolvedJob) -> Option<u64> {
    let spec = model.spec.as_ref()?;
    if job.task != Task::Infer {
        return None;
    }
    let report = estimate(model, job).ok()?;
    let pool = report.per_gpu.kv_pool?;
    let cap = job
        .engine
        .max_model_len
        .or(spec.max_position_embeddings)
        .unwrap_or(1 << 22);
    crate::engines::vllm::budget::vllm_longest_request(spec, job, pool, cap)
        .ok()
        .flatten()
}

/// vLLM: the requests of `job`'s context its pool holds at once; `None` for other engines.
pub(crate) fn concurrent(
    model: &ModelInput,
    job: &ResolvedJob,
    r: &crate::report::Report,
) -> Option<u64> {
    if job.task != Task::Infer {
        return None;
    }
    let spec = model.spec.as_ref()?;
    let pool = r.per_gpu.kv_pool?;
    let context = job.seq + job.new_tokens;
    crate::engines::vllm::budget::vllm_concurrent_requests(spec, job, pool, context).ok()
}
