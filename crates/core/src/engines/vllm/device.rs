//! vLLM's device: weights, the profiling run's peak, the CUDA graphs and the KV pool sized
//! from `gpu_memory_utilization` (`budget.rs`), its start-up as a
//! timeline, and what vLLM would say of the job.

use crate::engines::device::{pool_capacity, pool_device, served_kv, EngineDevice, Pool, Served};
use crate::error::CoreError;
use crate::estimate::serving::{non_torch_bytes, Device};
use crate::job::ResolvedJob;
use crate::report::TimelinePoint;

impl EngineDevice for super::settings::Vllm {
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        vllm_device(s, warnings).map(Some)
    }
}

/// vLLM serving: weights, the profiling run's peak and CUDA graphs, and the KV pool sized from
/// `gpu_memory_utilization` (`budget.rs`); this job's own sequences' KV inside the pool.
fn vllm_device(s: &Served, warnings: &mut Vec<String>) -> Result<Device, CoreError> {
    let (spec, job, gpu) = (s.spec, s.job, s.gpu);
    let capacity = pool_capacity(gpu, "vLLM sizes its KV pool", warnings);
    let non_torch = non_torch_bytes(gpu, job);
    let b = crate::engines::vllm::budget::vllm_budget(
        spec,
        job,
        capacity,
        s.states.resident.parameters,
        non_torch,
    )?;
    let job_kv = served_kv(s)?;
    let engine_starts = vllm_warnings(spec, job, &b, job_kv, warnings)?;
    let pool = Pool {
        weights: b.weights,
        kv_pool: b.kv_pool,
        job_kv,
        outside: b.profile_peak + b.cuda_graphs,
        non_torch,
    };
    let engine = serde_json::to_value(&b).unwrap_or_default();
    let timeline = vllm_timeline(&b, job_kv);
    Ok(pool_device(pool, timeline, engine, engine_starts))
}

/// What vLLM would say of this job at start-up and under load; `false` when it would refuse to
/// start (one request of `max_model_len` tokens must fit the pool).
fn vllm_warnings(
    spec: &crate::model::ModelSpec,
    job: &ResolvedJob,
    b: &crate::report::VllmBudget,
    job_kv: u64,
    warnings: &mut Vec<String>,
) -> Result<bool, CoreError> {
    if job_kv > b.kv_pool {
        warnings.push(format!(
            "this job's {} sequences need {} of KV but vLLM's pool holds {}: requests \
             would wait or be preempted",
            job.batch,
            crate::text::bytes(job_kv),
            crate::text::bytes(b.kv_pool)
        ));
    }
    let one_request = crate::estimate::engines::kv_bytes_per_gpu(spec, job, 1, b.max_model_len)?;
    let starts = one_request <= b.kv_pool;
    if !starts {
        // vLLM's own error names the longest that fits (`estimate_max_model_len`).
        let longest = crate::engines::vllm::budget::vllm_longest_request(
            spec,
            job,
            b.kv_pool,
            b.max_model_len,
        )?;
        let lower = longest.map_or_else(
            || "lower --max-model-len".to_string(),
            |n| format!("--max-model-len {n} fits it"),
        );
        warnings.push(format!(
            "vLLM would not start: one request of max_model_len {} tokens needs {} of KV \
             but the pool holds {} (vllm/v1/core/kv_cache_utils.py \
             check_enough_kv_cache_memory); {lower}, or free memory",
            b.max_model_len,
            crate::text::bytes(one_request),
            crate::text::bytes(b.kv_pool)
        ));
    }
    if job.seq + job.new_tokens > b.max_model_len {
        warnings.push(format!(
            "context {} is longer than max_model_len {}",
            job.seq + job.new_tokens,
            b.max_model_len
        ));
    }
    Ok(starts)
}

/// vLLM's start-up as events: weights, the profile run, the KV pool, CUDA graphs, serving.
fn vllm_timeline(b: &crate::report::VllmBudget, job_kv: u64) -> Vec<TimelinePoint> {
    let point = |label: &'static str, pairs: &[(&'static str, u64)]| TimelinePoint {
        phase: "startup".into(),
        label: label.into(),
        allocated: pairs.iter().map(|(_, v)| v).sum(),
        by_category: pairs.iter().copied().filter(|(_, v)| *v > 0).collect(),
    };
    let mut serving = point(
        "serving this job",
        &[
            ("parameters", b.weights),
            ("kv_cache", job_kv.min(b.kv_pool)),
            ("allocator_reserve", b.kv_pool.saturating_sub(job_kv)),
            ("temporaries", b.profile_peak + b.cuda_graphs),
        ],
    );
    serving.phase = "serving".into();
    vec![
        point("weights loaded", &[("parameters", b.weights)]),
        point(
            "profile run",
            &[("parameters", b.weights), ("temporaries", b.profile_peak)],
        ),
        // The pool is reserved, not yet holding this job's KV: its free blocks are the
        // allocator reserve of the per-GPU figures (labelled "KV pool (free blocks)"), the
        // job's own KV its kv_cache, so the chart and the bar name the same bytes alike.
        point(
            "KV pool allocated",
            &[("parameters", b.weights), ("allocator_reserve", b.kv_pool)],
        ),
        point(
            "CUDA graphs captured",
            &[
                ("parameters", b.weights),
                ("allocator_reserve", b.kv_pool),
                ("temporaries", b.cuda_graphs),
            ],
        ),
        serving,
    ]
}
