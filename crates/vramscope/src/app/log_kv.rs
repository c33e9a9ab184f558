//! A vLLM log's KV pool in bytes when the log states it only as a count (`# GPU blocks: N`,
//! `GPU KV cache size: N tokens`): the count × the bytes of one block of the model the job
//! names, or the model the log's engine-config line names when it is a preset (no Hub, no
//! file). Without either, the count stays alone with a note: never an invented figure.

use super::job::{prepare, Prepared};
use vramscope_core::estimate::engines::kv_bytes_per_gpu;
use vramscope_core::job::{Framework, Job};
use vramscope_measure::logs::{kv_count, LogKind, LogReport};

/// Fills `per_gpu.kv_pool` of a vLLM log from its count: with the job's model and settings
/// (`job`, for `compare --job`), else with the model the log names when it is a preset; else
/// the count-only note.
pub fn complete(log: &mut LogReport, job: Option<&Prepared>) {
    if log.source != LogKind::Vllm
        || log.per_gpu.kv_pool.is_some()
        || log.engine.as_ref().and_then(kv_count).is_none()
    {
        return;
    }
    let from_log;
    let (p, whose) = match job {
        Some(p) => (Some(p), "the job"),
        None => {
            // A preset alone (`log_job`): no held model, no fetch, so no session's options
            // change it, and a default session is that reading, stated.
            from_log = log_job(log).and_then(|j| prepare(&super::Session::default(), &j).ok());
            (from_log.as_ref(), "the log's model line")
        }
    };
    let derived = p.is_some_and(|p| derive(log, p, whose));
    if !derived {
        log.note_kv_count_only();
    }
}

/// The job the log's own lines imply, when its model is a preset (never the Hub).
fn log_job(log: &LogReport) -> Option<Job> {
    let model = log.job.get("model")?.as_str()?;
    vramscope_formats::presets::find(model)?;
    let mut j = log.job.clone();
    j.insert("model".into(), model.into());
    serde_json::from_value(serde_json::Value::Object(j)).ok()
}

/// The count × one block's bytes on one GPU, for the prepared model and settings.
fn derive(log: &mut LogReport, p: &Prepared, whose: &str) -> bool {
    let Some(spec) = p.model.spec.as_ref() else {
        return false;
    };
    let r = &p.resolved;
    let job = vramscope_core::job::ResolvedJob {
        framework: Framework::Vllm,
        ..r.clone()
    };
    let block_size = job.engine.block_size_or_default();
    let Ok(block_bytes) = kv_bytes_per_gpu(spec, &job, 1, block_size) else {
        return false;
    };
    let dtype = job
        .kv_dtype
        .as_ref()
        .map(|k| k.as_str().to_string())
        .unwrap_or_else(|| job.precision.as_str().to_string());
    let size_note = if job.engine.block_size.is_some() {
        String::new()
    } else {
        format!("; block size {block_size} is vLLM's default, the log states none")
    };
    let of = format!(
        "{}'s KV at {dtype}, tp {}, from {whose}{size_note}",
        p.model.name,
        job.parallel.tp.max(1)
    );
    log.kv_pool_from_count(block_bytes, block_size, &of)
}
