//! Diffusion pipelines (diffusers) in the application layer: whether a job's MODEL names a
//! pipeline — a directory with `model_index.json` or a Hub repo whose listing has one, resolved
//! through the one MODEL resolution (`Session::resolve_any`) — and the pipeline's
//! `estimate`, `fit` and `inspect` (`vramscope_core::diffusion`). The CLI, the server and the
//! Python package ask here first and fall through to the language-model commands when MODEL is
//! no pipeline; the model resolved on the way is remembered, so it is not fetched twice.

use super::{AppError, Session};
use serde::Serialize;
use serde_json::Value;
use vramscope_core::diffusion::estimate::{estimate as estimate_pipeline, DiffusionReport};
use vramscope_core::diffusion::fit::{fit as fit_pipeline, DiffusionFit};
use vramscope_core::diffusion::job::DiffusionJob;
use vramscope_core::diffusion::residency::{resident_weight_bytes, Offload};
use vramscope_core::diffusion::Role;
use vramscope_hub::{Reached, ResolvedPipeline};

/// The pipeline MODEL names, or `None` when it names a model (or a model held in memory, or
/// anything that cannot be a pipeline: a preset, a file).
pub fn pipeline_of(
    session: &Session,
    model: &str,
    assume_llama: bool,
) -> Result<Option<ResolvedPipeline>, AppError> {
    if session.is_held(model) || !vramscope_hub::may_be_pipeline(model) {
        return Ok(None);
    }
    match session.resolve_any(model, &session.options(assume_llama))? {
        Reached::Pipeline(p) => Ok(Some(*p)),
        Reached::Model(_) => Ok(None),
    }
}

/// The pipeline a job (as JSON) names by its `model` string, if it names one.
pub fn pipeline_of_job(
    session: &Session,
    job: &Value,
) -> Result<Option<ResolvedPipeline>, AppError> {
    let Some(model) = job.get("model").and_then(Value::as_str) else {
        return Ok(None);
    };
    let assume_llama = job.get("assume_llama").and_then(Value::as_bool) == Some(true);
    pipeline_of(session, model, assume_llama)
}

/// A job's JSON as a diffusion job (docs/diffusion.md's fields); a field it does not have is
/// named.
pub fn job_of(job: &Value) -> Result<DiffusionJob, AppError> {
    serde_json::from_value(job.clone())
        .map_err(|e| AppError::bad(format!("invalid diffusion job: {e}")))
}

/// The pipeline's estimate for the job: one image-generation call, phase by phase, with
/// `model.source` saying where the pipeline was read.
pub fn estimate(p: &ResolvedPipeline, job: &DiffusionJob) -> Result<DiffusionReport, AppError> {
    let resolved = job.resolve(&p.pipeline)?;
    let mut report = estimate_pipeline(&p.pipeline, &p.name, &resolved)?;
    report.model.read_from = p.source.read_from();
    Ok(report)
}

/// The pipeline's fit: the most images at the job's size, the largest square side at its batch.
pub fn fit(p: &ResolvedPipeline, job: &DiffusionJob) -> Result<DiffusionFit, AppError> {
    let resolved = job.resolve(&p.pipeline)?;
    Ok(fit_pipeline(&p.pipeline, &p.name, &resolved)?)
}

/// Bytes a parameter in bf16/fp16, the dtype the pipelines' cards load them in.
const HALF: u64 = 2;

/// One model of the pipeline in `inspect`.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentRow {
    pub name: String,
    pub library: String,
    pub class: String,
    pub role: Role,
    pub params: u64,
    pub bytes_16bit: u64,
}

/// What `inspect PIPELINE --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineInspect {
    pub pipeline: String,
    /// The directory, or `ORG/NAME@commit via ...` for a repo.
    pub source: String,
    pub components: Vec<ComponentRow>,
    pub params_total: u64,
    /// Weights on the GPU in 16-bit, all resident (`pipe.to("cuda")`).
    pub resident_bytes_16bit: u64,
    /// The same under `enable_model_cpu_offload()` (the largest model).
    pub resident_bytes_16bit_model_offload: u64,
    /// Whether classifier-free guidance doubles the denoiser's batch.
    pub cfg_doubles_batch: bool,
    /// Where it was read: `{"kind", "repo", "revision", "commit", "path"}` as apply.
    pub origin: Value,
}

fn overflow() -> AppError {
    AppError::bad("pipeline parameter count past 2^64")
}

/// The pipeline's models, each with its class, role and exact parameter count, and the weights
/// the GPU holds with and without `enable_model_cpu_offload`.
pub fn inspect(r: &ResolvedPipeline) -> Result<PipelineInspect, AppError> {
    let p = &r.pipeline;
    let mut components = Vec::new();
    for c in &p.components {
        let params = c.arch.params().ok_or_else(overflow)?;
        components.push(ComponentRow {
            name: c.name.clone(),
            library: c.library.clone(),
            class: c.class.clone(),
            role: c.arch.role(),
            params,
            bytes_16bit: params.checked_mul(HALF).ok_or_else(overflow)?,
        });
    }
    let source = match r.source.kind.as_str() {
        "file" => r.name.clone(),
        _ => r.source.describe(),
    };
    Ok(PipelineInspect {
        pipeline: p.class.clone(),
        source,
        components,
        params_total: p.params_total().ok_or_else(overflow)?,
        resident_bytes_16bit: resident_weight_bytes(p, Offload::None, HALF).ok_or_else(overflow)?,
        resident_bytes_16bit_model_offload: resident_weight_bytes(p, Offload::Model, HALF)
            .ok_or_else(overflow)?,
        cfg_doubles_batch: p.cfg_doubles_batch(),
        origin: serde_json::to_value(&r.source).unwrap_or(Value::Null),
    })
}
