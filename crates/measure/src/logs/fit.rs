//! `fit --measured LOG`: the fit search on what an engine's log states, as `calibrate` does
//! for a PyTorch record. Each figure the search takes from the log is listed beside the
//! estimate of it (`from_log`), so the answer says what it measured and what it modelled.
//!
//! - vLLM: the KV pool the log states ("Available KV cache memory", the profiling table's
//!   `available_kv_cache_memory`, or its block / token count × one block's bytes) replaces the
//!   estimator's; the sequences and contexts it holds follow vLLM's paging
//!   (`vllm/v1/core/kv_cache_utils.py`: whole blocks of `block_size` tokens per request,
//!   `Maximum concurrency = pool / bytes of one max_model_len request`).
//! - llama.cpp / ollama: the most-loaded device's model, KV and compute buffers as logged
//!   (`llama_kv_cache_init`, `llama_new_context_with_model` / `llama_context`): the model and
//!   compute buffers fixed (the compute buffer is sized for one `n_ubatch` micro-batch; the
//!   estimate's when the log's copy stops before that line, with a note), the KV
//!   buffer per context cell = the logged KV buffer / `n_ctx` (llama.cpp allocates `n_ctx`
//!   cells for the layers on the device, `src/llama-kv-cache.cpp`), and the device's capacity
//!   less the job's reserve and the CUDA context (which no line of the log states).

use super::{LogKind, LogReport};
use crate::calibrate::{job_gpu, scale_up};
use serde::Serialize;
use vramscope_core::error::CoreError;
use vramscope_core::estimate::engines::kv_bytes_per_gpu;
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::largest;
use vramscope_core::gpu::Gpu;
use vramscope_core::job::{Framework, ResolvedJob};
use vramscope_core::report::TargetGpu;

/// One figure a log-calibrated fit took from the log, beside the estimate of it at the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FromLog {
    /// The Report's name for it (`parameters`, `kv_pool`, `kv_cache`, ...).
    pub figure: &'static str,
    pub log: u64,
    pub estimated: Option<u64>,
    /// How the search used it.
    pub used_as: &'static str,
}

/// What `fit --measured LOG --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogCalibratedFit {
    /// The GPU (`gpu`, `capacity`).
    #[serde(flatten)]
    pub target: TargetGpu,
    /// What was read (`vllm-log`, `llamacpp-log`, `ollama-log`).
    pub source: &'static str,
    pub from_log: Vec<FromLog>,
    /// Concurrent sequences at the job's context.
    pub max_batch: Option<u64>,
    /// The longest context per sequence at the job's batch.
    pub max_context: Option<u64>,
    pub evaluations: u64,
    pub notes: Vec<String>,
}

/// The answer on `gpu` of a fit on `log`: what it took from the log, what the search found
/// (the largest batch, the longest context, the estimates it ran) and the notes.
fn answer(
    gpu: &Gpu,
    log: &LogReport,
    from_log: Vec<FromLog>,
    (max_batch, max_context, evaluations): (Option<u64>, Option<u64>, u64),
    notes: Vec<String>,
) -> LogCalibratedFit {
    LogCalibratedFit {
        target: TargetGpu::from(gpu),
        source: log.source.name(),
        from_log,
        max_batch,
        max_context,
        evaluations,
        notes,
    }
}

fn need(what: &str) -> CoreError {
    CoreError::field(
        "measured",
        format!("the log does not state {what}, which a fit on it needs"),
    )
}

/// Searches the largest batch and context that the log's figures leave room for (module doc).
pub fn fit_from_log(
    model: &ModelInput,
    job: &ResolvedJob,
    log: &LogReport,
) -> Result<LogCalibratedFit, CoreError> {
    let gpu = job_gpu(job)?;
    if model.spec.is_none() {
        return Err(CoreError::field(
            "model",
            "a fit on a log needs the model's architecture (its KV bytes per token)",
        ));
    }
    match log.source {
        LogKind::Vllm => vllm(model, job, log, gpu),
        LogKind::LlamaCpp | LogKind::Ollama => ggml(model, job, log, gpu),
        LogKind::TorchOom => Err(CoreError::field(
            "measured",
            "an out-of-memory message states totals at the failure, not a breakdown to fit \
             with (`vramscope analyze` diagnoses it)",
        )),
    }
}

/// The longest context the search tries: the model's maximum positions, else 2^22.
fn context_cap(model: &ModelInput) -> u64 {
    model
        .spec
        .as_ref()
        .and_then(|s| s.max_position_embeddings)
        .unwrap_or(1 << 22)
}

fn vllm(
    model: &ModelInput,
    job: &ResolvedJob,
    log: &LogReport,
    gpu: &Gpu,
) -> Result<LogCalibratedFit, CoreError> {
    let spec = model.spec.as_ref().ok_or_else(|| need("a model"))?;
    let job = ResolvedJob {
        framework: Framework::Vllm,
        ..job.clone()
    };
    let stated = log.per_gpu.kv_pool.ok_or_else(|| {
        need("its KV pool (\"Available KV cache memory\", \"# GPU blocks\" or \"GPU KV cache size\")")
    })?;
    let block_size = job.engine.block_size_or_default();
    let block = kv_bytes_per_gpu(spec, &job, 1, block_size)?.max(1);
    // vLLM cuts the memory into whole blocks (`num_blocks = available // page_size`).
    let pool = stated / block * block;
    let est = estimate(model, &job)?;
    let c = &log.per_gpu.components;
    let e = &est.per_gpu.components;
    let mut from_log = Vec::new();
    let mut row = |figure, log: Option<u64>, estimated: Option<u64>, used_as| {
        if let Some(v) = log {
            from_log.push(FromLog {
                figure,
                log: v,
                estimated,
                used_as,
            });
        }
    };
    row(
        "kv_pool",
        Some(stated),
        est.per_gpu.kv_pool,
        "the pool the sequences share",
    );
    row(
        "parameters",
        c.parameters,
        Some(e.parameters),
        "shown beside the estimate",
    );
    row(
        "cuda_context",
        c.cuda_context,
        Some(e.cuda_context),
        "shown beside the estimate",
    );
    row(
        "temporaries",
        c.temporaries,
        None,
        "shown: vLLM's profiled activation peak",
    );
    let context = job.seq + job.new_tokens;
    let per_seq = kv_bytes_per_gpu(spec, &job, 1, context)?.max(1);
    let max_batch = Some(pool / per_seq).filter(|b| *b >= 1);
    let cap = log
        .engine
        .as_ref()
        .and_then(|e| e.get("max_model_len"))
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| context_cap(model));
    let mut evals = 1u64;
    let max_context = largest(cap, |n| {
        evals += 1;
        Ok(kv_bytes_per_gpu(spec, &job, job.batch, n)? <= pool)
    })?;
    let mut notes = vec![format!(
        "the KV pool is the log's ({stated} B, {} blocks of {block_size} tokens × {block} B); \
         it holds at the log's GPU and gpu_memory_utilization",
        pool / block
    )];
    if log
        .engine
        .as_ref()
        .is_some_and(|e| e.contains_key("kv_pool_from"))
    {
        notes.push(
            "the log states the pool as a count: its bytes are the count × the job's block bytes"
                .into(),
        );
    }
    if max_context == Some(cap) {
        notes.push(format!("the context search stopped at {cap}"));
    }
    let found = (max_batch, max_context, evals);
    Ok(answer(gpu, log, from_log, found, notes))
}

fn ggml(
    model: &ModelInput,
    job: &ResolvedJob,
    log: &LogReport,
    gpu: &Gpu,
) -> Result<LogCalibratedFit, CoreError> {
    let c = &log.per_gpu.components;
    let weights = c
        .parameters
        .ok_or_else(|| need("the device's model buffer"))?;
    let kv = c.kv_cache.ok_or_else(|| need("the device's KV buffer"))?;
    let n_ctx = log
        .engine
        .as_ref()
        .and_then(|e| e.get("n_ctx"))
        .and_then(|v| v.as_u64())
        .filter(|n| *n > 0)
        .ok_or_else(|| need("n_ctx"))?;
    let est = estimate(model, job)?;
    let e = &est.per_gpu.components;
    // A log cut before the compute-buffer line (most threads' copies are): the estimate's.
    let compute = c.temporaries.unwrap_or(e.temporaries);
    let context_bytes = e.cuda_context;
    let room = job
        .usable(gpu.memory_bytes)
        .saturating_sub(context_bytes)
        .saturating_sub(weights)
        .saturating_sub(compute);
    let cells = |n: u64| scale_up(n, (kv, n_ctx));
    let context = job.seq + job.new_tokens;
    let per_seq = cells(context).max(1);
    let max_batch = Some(room / per_seq).filter(|b| *b >= 1);
    let mut evals = 1u64;
    let max_context = largest(context_cap(model), |n| {
        evals += 1;
        Ok(cells(job.batch.saturating_mul(n)) <= room)
    })?;
    let from_log = ggml_rows(weights, kv, c.temporaries, e);
    let mut notes = vec![format!(
        "{} on the device as logged{}: {kv} B of KV for n_ctx {n_ctx}; the CUDA context is the \
         estimate's ({context_bytes} B), no log line states it",
        log.per_gpu.device.as_deref().unwrap_or("the buffers"),
        log.engine
            .as_ref()
            .and_then(|e| e.get("n_gpu_layers"))
            .and_then(|v| v.as_u64())
            .map(|n| format!(" with n_gpu_layers {n}"))
            .unwrap_or_default()
    )];
    if c.temporaries.is_none() {
        notes.push(format!(
            "the log states no compute buffer for the device: the estimate's ({compute} B)"
        ));
    }
    if log.devices.len() > 1 {
        notes.push("several devices in the log: the fit is the most-loaded one's".into());
    }
    let found = (max_batch, max_context, evals);
    Ok(answer(gpu, log, from_log, found, notes))
}

/// The figures a llama.cpp / ollama fit took from the log, beside the estimate's.
fn ggml_rows(
    weights: u64,
    kv: u64,
    compute: Option<u64>,
    e: &vramscope_core::report::Components,
) -> Vec<FromLog> {
    let mut rows = vec![
        FromLog {
            figure: "parameters",
            log: weights,
            estimated: Some(e.parameters),
            used_as: "fixed",
        },
        FromLog {
            figure: "kv_cache",
            log: kv,
            estimated: Some(e.kv_cache),
            used_as: "per context cell: the buffer / n_ctx",
        },
    ];
    if let Some(v) = compute {
        rows.push(FromLog {
            figure: "temporaries",
            log: v,
            estimated: Some(e.temporaries),
            used_as: "fixed (one n_ubatch micro-batch)",
        });
    }
    rows
}
