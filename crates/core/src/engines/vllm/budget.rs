//! vLLM's memory budget: it preallocates a KV pool from what is left of
//! `gpu_memory_utilization` after weights, a profiled forward and CUDA graphs.

use crate::error::CoreError;
use crate::estimate::engines::{forward_peak, kv_bytes_per_gpu};
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use crate::report::VllmBudget;

/// Largest batch vLLM captures a CUDA graph for (`max_capture_size`, 512 by default, capped by
/// `max_num_seqs`).
pub const VLLM_MAX_CAPTURE_SIZE: u64 = 512;

/// `engine.gpu_memory_utilization` (checked to lie in (0, 1] in resolution), or vLLM's 0.9.
pub fn gpu_memory_utilization(job: &ResolvedJob) -> f64 {
    job.engine.utilization_or_default()
}

/// The longest request vLLM accepts with a KV pool of `pool` bytes, at most `cap` tokens: the
/// largest `max_model_len` for which one request's blocks fit the pool, as vLLM's start-up
/// check computes it (`vllm/v1/core/kv_cache_utils.py`: `check_enough_kv_cache_memory` refuses
/// to start when one request of `max_model_len` tokens does not fit, and
/// `estimate_max_model_len` binary-searches the longest that does, the figure its error names).
/// `None` when not even one token fits.
pub fn vllm_longest_request(
    spec: &ModelSpec,
    job: &ResolvedJob,
    pool: u64,
    cap: u64,
) -> Result<Option<u64>, CoreError> {
    crate::search::largest(cap.max(1), |t| {
        Ok(kv_bytes_per_gpu(spec, job, 1, t)? <= pool)
    })
}

/// The most requests of `tokens` tokens each that vLLM runs at once in a pool of `pool` bytes:
/// its scheduler admits a waiting request while the pool has free blocks for it and fewer than
/// `max_num_seqs` run (`vllm/v1/core/sched/scheduler.py` `schedule`: the waiting loop stops
/// at `len(self.running) == self.max_num_running_reqs` or when
/// `kv_cache_manager.allocate_slots` returns `None`), so the pool is shared block by block,
/// not split per sequence: ⌊pool / (⌈tokens / block_size⌉ blocks per request)⌋.
pub fn vllm_concurrent_requests(
    spec: &ModelSpec,
    job: &ResolvedJob,
    pool: u64,
    tokens: u64,
) -> Result<u64, CoreError> {
    Ok(pool / kv_bytes_per_gpu(spec, job, 1, tokens)?.max(1))
}

/// vLLM's start-up accounting (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`,
/// `vllm/utils` `memory_profiling`): KV pool = capacity × utilization − weights − torch peak of
/// the profile run − non-torch memory − CUDA graphs, cut into blocks of `block_size` tokens.
pub fn vllm_budget(
    spec: &ModelSpec,
    job: &ResolvedJob,
    capacity: u64,
    weights: u64,
    non_torch: u64,
) -> Result<VllmBudget, CoreError> {
    let util = gpu_memory_utilization(job);
    let usable = (capacity as f64 * util) as u64;
    let block_size = job.engine.block_size_or_default();
    let mnbt = job.engine.max_num_batched_tokens_or_default();
    let max_seqs = job.engine.max_num_seqs_or_default();
    let max_model_len = job
        .engine
        .max_model_len
        .or(spec.max_position_embeddings)
        .unwrap_or(job.seq + job.new_tokens);
    let profile_peak = forward_peak(spec, job, max_seqs, mnbt)?;
    let capture = max_seqs.min(VLLM_MAX_CAPTURE_SIZE);
    let cuda_graphs = forward_peak(spec, job, capture, capture)?;
    let block_bytes = kv_bytes_per_gpu(spec, job, 1, block_size)?;
    let kv_pool = usable
        .saturating_sub(weights)
        .saturating_sub(profile_peak)
        .saturating_sub(non_torch)
        .saturating_sub(cuda_graphs);
    let num_blocks = kv_pool / block_bytes.max(1);
    let per_request = kv_bytes_per_gpu(spec, job, 1, max_model_len)?.max(1);
    let max_concurrency = (num_blocks * block_bytes) as f64 / per_request as f64;
    Ok(VllmBudget {
        usable,
        weights,
        profile_peak,
        cuda_graphs,
        non_torch,
        kv_pool: num_blocks * block_bytes,
        block_size,
        block_bytes,
        num_blocks,
        max_model_len,
        max_concurrency,
    })
}
