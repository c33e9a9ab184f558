//! vLLM's fit: its default utilization lowered to leave the user's reserve free, and what
//! fits the KV pool the engine would allocate.

use crate::compose::estimate;
use crate::engines::engine::FitSearch;
use crate::engines::pool_fit::{context_cap, PoolFit};
use crate::error::CoreError;
use crate::job::{ResolvedJob, Task};
use crate::report::FitAnswer;

/// vLLM takes `gpu_memory_utilization × total` whatever else runs on the GPU, and refuses to
/// start when less is free (`vllm/v1/worker/gpu_worker.py` `init_device`: "Free memory on
/// device … on startup is less than desired GPU memory utilization"), so with a `reserve`
/// and no utilization of the user's, the engine's default is lowered to the largest share in
/// hundredths that leaves the reserve free: ⌊100 × (capacity − reserve) / capacity⌋ / 100.
pub(crate) fn vllm_within_reserve(
    job: &ResolvedJob,
) -> Result<(ResolvedJob, Option<String>), CoreError> {
    let set = job.engine.gpu_memory_utilization.is_some();
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    let (Task::Infer, false, Some(gpu)) = (job.task, set, gpu) else {
        return Ok((job.clone(), None));
    };
    if job.reserve == 0 {
        return Ok((job.clone(), None));
    }
    let default = crate::engines::vllm::budget::gpu_memory_utilization(job);
    let share = job.usable(gpu.memory_bytes) as f64 / gpu.memory_bytes as f64;
    let util = ((share * 100.0).floor() / 100.0).min(default);
    // Nothing of the GPU left (a reserve of all of it): the search says so, not a bad setting.
    if util >= default || util <= 0.0 {
        return Ok((job.clone(), None));
    }
    let mut j = job.clone();
    j.set_engine("gpu_memory_utilization", util.into())?;
    let note = format!(
        "--gpu-memory-utilization {util} instead of vLLM's {default}: {} of {} is reserved",
        crate::text::bytes(job.reserve),
        crate::text::bytes(gpu.memory_bytes)
    );
    Ok((j, Some(note)))
}

/// vLLM: what fits in the KV pool the engine would allocate (its start-up log's "GPU KV cache
/// size" and "Maximum concurrency"): the most sequences at the job's context, and the longest
/// context at the job's batch (paged in `block_size` tokens).
pub(crate) fn vllm_fit(s: &FitSearch) -> Result<FitAnswer, CoreError> {
    let (spec, job, gpu, max_pos) = (s.spec, s.job, s.gpu, s.max_pos);
    let report = estimate(s.model, job)?;
    // The engine takes its share whatever else runs; past the reserve, nothing fits.
    let over_reserve = job.reserve > 0
        && report
            .per_gpu
            .peaks
            .device_total
            .is_some_and(|t| t > job.usable(gpu.memory_bytes));
    let pool = if over_reserve {
        0
    } else {
        report.per_gpu.kv_pool.unwrap_or(0)
    };
    let context = job.seq + job.new_tokens;
    let max_batch = Some(crate::engines::vllm::budget::vllm_concurrent_requests(
        spec, job, pool, context,
    )?)
    .filter(|b| *b >= 1);
    let cap = context_cap(&report, "max_model_len", max_pos);
    let longest_request = crate::engines::vllm::budget::vllm_longest_request(spec, job, pool, cap)?;
    let found = PoolFit::search(spec, job, pool, cap, max_batch, longest_request)?;
    let mut notes = vec![format!(
        "vLLM's KV pool on {}: {}",
        gpu.id,
        pool_text(&report)
    )];
    if found.limited() {
        notes.push(format!("the context search stopped at max_model_len {cap}"));
    }
    if over_reserve {
        notes.push(format!(
            "vLLM's share of {} does not leave the {} reserved free: lower \
             --gpu-memory-utilization",
            gpu.id,
            crate::text::bytes(job.reserve)
        ));
    }
    Ok(found.answer(gpu, job, max_pos, notes))
}

/// vLLM's KV pool in words: "12.50 GiB, holds 40,960 tokens = 5.0 sequences of max_model_len
/// 8,192" (tokens = blocks × block size, as vLLM's "GPU KV cache size" line counts them).
pub fn pool_text(report: &crate::report::Report) -> String {
    let pool = report.per_gpu.kv_pool.unwrap_or(0);
    let get = |k: &str| {
        report
            .engine
            .as_ref()
            .and_then(|e| e.get(k))
            .and_then(|v| v.as_u64())
    };
    let size = crate::text::bytes(pool);
    match (get("num_blocks"), get("block_size"), get("max_model_len")) {
        (Some(blocks), Some(block), Some(len)) if len > 0 => {
            let tokens = blocks * block;
            format!(
                "{size}, holds {} tokens = {:.1} sequences of max_model_len {}",
                crate::text::thousands(tokens),
                tokens as f64 / len as f64,
                crate::text::thousands(len)
            )
        }
        _ => size,
    }
}
