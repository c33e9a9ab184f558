//! SGLang's device: its own static-fraction budget (`budget.rs`) as the report's
//! per-GPU figures, and what SGLang would say of the job.

use crate::engines::device::{pool_capacity, pool_device, served_kv, EngineDevice, Pool, Served};
use crate::error::CoreError;
use crate::estimate::serving::{non_torch_bytes, Device};
use crate::job::ResolvedJob;
use crate::text::bytes;

impl EngineDevice for super::settings::Sglang {
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        sglang_device(s, warnings).map(Some)
    }
}

/// SGLang serving: weights and the token pool in the static share, one prefill chunk's
/// activations, the CUDA graphs and the request table outside it (`budget.rs`); this job's
/// own sequences' KV inside the pool.
fn sglang_device(s: &Served, warnings: &mut Vec<String>) -> Result<Device, CoreError> {
    let (spec, job, gpu) = (s.spec, s.job, s.gpu);
    let capacity = pool_capacity(gpu, "SGLang sizes its static share", warnings);
    let non_torch = non_torch_bytes(gpu, job);
    let b = crate::engines::sglang::budget::sglang_budget(
        spec,
        job,
        capacity,
        job.usable(capacity),
        s.states.resident.parameters,
        non_torch,
    )?;
    let job_kv = served_kv(s)?;
    let starts = sglang_warnings(job, &b, job_kv, warnings);
    let pool = Pool {
        weights: b.weights,
        kv_pool: b.kv_pool,
        job_kv,
        outside: b.activations + b.cuda_graphs + b.req_to_token,
        non_torch,
    };
    let engine = serde_json::to_value(&b).unwrap_or_default();
    Ok(pool_device(pool, Vec::new(), engine, starts))
}

/// What SGLang would say of this job; `false` when it would refuse to start (no room for a KV
/// pool in the static share).
fn sglang_warnings(
    job: &ResolvedJob,
    b: &crate::engines::sglang::budget::SglangBudget,
    job_kv: u64,
    warnings: &mut Vec<String>,
) -> bool {
    let ctx = job.seq.saturating_add(job.new_tokens);
    if b.max_total_tokens == 0 {
        warnings.push(format!(
            "SGLang would not start: mem_fraction_static {} of the {} free leaves no KV pool \
             beside {} of weights (model_runner.py: \"Not enough memory. Please try to \
             increase --mem-fraction-static\")",
            b.mem_fraction_static,
            bytes(b.free_at_start),
            bytes(b.weights)
        ));
        return false;
    }
    if job_kv > b.kv_pool {
        warnings.push(format!(
            "this job's {} sequences need {} of KV but SGLang's token pool holds {} ({} \
             tokens): requests would wait or be retracted",
            job.batch,
            bytes(job_kv),
            bytes(b.kv_pool),
            crate::text::thousands(b.max_total_tokens)
        ));
    }
    if ctx > b.context_length {
        warnings.push(format!(
            "context {ctx} is longer than context_length {}: SGLang rejects longer requests",
            b.context_length
        ));
    }
    if job.batch > b.max_running_requests {
        warnings.push(format!(
            "{} sequences exceed max_running_requests {}: the rest queue",
            job.batch, b.max_running_requests
        ));
    }
    let outside = b.activations + b.cuda_graphs + b.req_to_token;
    let left = (b.free_at_start as f64 * (1.0 - b.mem_fraction_static)) as u64;
    if outside > left {
        warnings.push(format!(
            "a prefill chunk of {} tokens, the CUDA graphs up to batch {} and the request \
             table need {} but 1 − mem_fraction_static leaves {}: SGLang would run out of \
             memory under load; lower --mem-fraction-static or --chunked-prefill-size",
            b.chunked_prefill_size,
            b.cuda_graph_max_bs,
            bytes(outside),
            bytes(left)
        ));
    }
    true
}
