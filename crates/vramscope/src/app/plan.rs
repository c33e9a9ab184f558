//! `plan`: parallel layouts of a training job over N GPUs that fit, ranked.

use super::job::{prepare, with_gpus, Prepared};
use super::{AppError, Session};
use serde::Deserialize;
use vramscope_core::job::Job;
use vramscope_core::plan::PlanResult;

/// Largest micro-batch tried unless told (`plan --max-micro-batch`).
pub const DEFAULT_MAX_MICRO_BATCH: u64 = 64;
/// Layouts listed unless told (`plan --top`).
pub const DEFAULT_TOP: usize = 10;

fn default_max_micro_batch() -> u64 {
    DEFAULT_MAX_MICRO_BATCH
}

fn default_top() -> usize {
    DEFAULT_TOP
}

/// `plan`'s input: the job (it names the GPU), and the search's options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
    /// GPUs to lay the job over (`--gpus N`; else the job's `parallel.gpus`).
    #[serde(default)]
    pub gpus: Option<u64>,
    /// How many layouts to list.
    #[serde(default = "default_top")]
    pub top: usize,
    /// Largest micro-batch to try.
    #[serde(default = "default_max_micro_batch")]
    pub max_micro_batch: u64,
}

/// What `plan --json` prints and `/api/plan` answers.
pub fn plan(session: &Session, input: &PlanInput) -> Result<PlanResult, AppError> {
    plan_until(session, input, &|| false)
}

/// `plan`, stopping with an error once `stop` answers true (checked between layouts): the
/// server's requests stop at their deadline.
pub fn plan_until(
    session: &Session,
    input: &PlanInput,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<PlanResult, AppError> {
    let mut job = input.job.clone();
    if let Some(n) = input.gpus {
        with_gpus(&mut job, n)?;
    }
    let p = prepare(session, &job)?;
    let gpu = plan_gpu(&p)?;
    let gpus = p.resolved.parallel.gpus;
    let limits = (input.max_micro_batch, input.top);
    Ok(vramscope_core::plan::plan_until(
        &p.model,
        &p.resolved,
        gpus,
        gpu,
        limits,
        stop,
    )?)
}

/// `plan` of a job whose model is already loaded.
pub fn plan_prepared(
    p: &Prepared,
    max_micro_batch: u64,
    top: usize,
) -> Result<PlanResult, AppError> {
    let gpu = plan_gpu(p)?;
    let gpus = p.resolved.parallel.gpus;
    Ok(vramscope_core::plan::plan(
        &p.model,
        &p.resolved,
        gpus,
        gpu,
        max_micro_batch,
        top,
    )?)
}

/// The GPU a plan lays the job over: the job must name one.
pub fn plan_gpu(p: &Prepared) -> Result<&'static vramscope_core::gpu::Gpu, AppError> {
    let id =
        p.resolved.gpu.as_deref().ok_or_else(|| {
            AppError::bad("gpu: plan needs a GPU (e.g. --gpu h100-80gb --gpus 16)")
        })?;
    Ok(vramscope_core::gpu::find(id)?)
}
