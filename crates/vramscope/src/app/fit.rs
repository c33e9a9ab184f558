//! `fit`: the largest batch / sequence / context that fits the GPU, plain or calibrated by a
//! measured run of the job.

use super::job::{prepare, Prepared};
use super::AppError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vramscope_core::job::Job;
use vramscope_measure::calibrate::CalibratedFit;
use vramscope_measure::logs::fit::LogCalibratedFit;
use vramscope_measure::logs::Measured;

/// `fit`'s input: the contract's job.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
}

/// `fit_calibrated`'s input: the job and a measured run of it (a snapshot pickle or profiler
/// timeline, as for `analyze`), whose batch and sequence are the job's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedFitInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
    pub measured: PathBuf,
}

/// `fit --json`'s answer: the contract's fit, and when even 1 does not fit, the advice.
#[derive(Debug, Clone, Serialize)]
pub struct FitWithAdvice {
    #[serde(flatten)]
    pub answer: vramscope_core::fit::FitAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<Vec<vramscope_core::advice::Advice>>,
}

/// What `fit --json` prints and `/api/fit` answers: the fit search, and the advice (the
/// cheapest changes that fit) when nothing fits at 1.
pub fn fit(input: &FitInput) -> Result<FitWithAdvice, AppError> {
    fit_prepared(&prepare(&input.job)?)
}

/// `fit` of a job whose model is already loaded.
pub fn fit_prepared(p: &Prepared) -> Result<FitWithAdvice, AppError> {
    let (model, resolved) = (&p.model, &p.resolved);
    let mut answer = vramscope_core::fit::fit(model, resolved)?;
    serve_by_repo(&mut answer, &model.name);
    let advice = if answer.max_batch.is_none() {
        Some(vramscope_core::advice::advise(model, resolved)?)
    } else {
        None
    };
    Ok(FitWithAdvice { answer, advice })
}

/// vLLM and SGLang load a model by its Hugging Face repo: a preset's launch line names the preset's repo
/// (`vllm serve meta-llama/Llama-3.1-8B`), not vramscope's short id.
fn serve_by_repo(answer: &mut vramscope_core::fit::FitAnswer, name: &str) {
    let (Some(l), Some(p)) = (
        answer.launch.as_mut(),
        vramscope_formats::presets::find(name),
    ) else {
        return;
    };
    if l.engine == "vllm" {
        l.command = l.command.replacen(
            &format!("vllm serve {name}"),
            &format!("vllm serve {}", p.repo),
            1,
        );
    }
    if l.engine == "sglang" {
        l.command = l.command.replacen(
            &format!("--model-path {name}"),
            &format!("--model-path {}", p.repo),
            1,
        );
    }
}

/// A fit on a measurement: a PyTorch record's per-category correction, or an engine log's
/// figures (`vramscope_measure::logs::fit`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum MeasuredFit {
    Record(Box<CalibratedFit>),
    Log(Box<LogCalibratedFit>),
}

/// What `fit --measured FILE --json` prints: the search on the estimator corrected by the
/// measured run's per-category residual (`vramscope_measure::calibrate`), or on what an
/// engine's log states.
pub fn fit_calibrated(input: &CalibratedFitInput) -> Result<MeasuredFit, AppError> {
    fit_calibrated_prepared(&prepare(&input.job)?, &input.measured)
}

/// `fit_calibrated` of a job whose model is already loaded.
pub fn fit_calibrated_prepared(
    p: &Prepared,
    measured: &std::path::Path,
) -> Result<MeasuredFit, AppError> {
    let read = super::analyze::read_path(measured)?;
    match super::analyze::completed(read, Some(p)) {
        Measured::Record(record) => Ok(MeasuredFit::Record(Box::new(
            vramscope_measure::calibrate::fit_calibrated(&p.model, &p.resolved, &record.per_gpu)?,
        ))),
        Measured::Log(log) => Ok(MeasuredFit::Log(Box::new(
            vramscope_measure::logs::fit::fit_from_log(&p.model, &p.resolved, &log)?,
        ))),
    }
}
