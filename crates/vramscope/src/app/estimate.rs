//! `estimate`: a job in, the contract's Report out; and the one picture of a report.

use super::job::prepare;
use super::{AppError, Session};
use serde::Deserialize;
use vramscope_core::job::Job;
use vramscope_core::report::{Fit, Report, TargetGpu};

/// `estimate`'s input: the contract's job and whether to search advice even when it fits.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
    /// Search the cheapest changes that make the job fit even when it already fits (`--advise`).
    #[serde(default)]
    pub advise: bool,
}

/// The Report that `estimate --job job.json --json [--advise]` prints and `/api/estimate`
/// answers: the model loaded once, the step simulated, the advice searched when the job does
/// not fit its GPU (or with `advise`).
pub fn estimate(session: &Session, input: &EstimateInput) -> Result<Report, AppError> {
    prepare(session, &input.job)?.report_with_advice(input.advise)
}

/// `picture`'s input: a Report as `estimate` returned it.
#[derive(Debug, Clone, Deserialize)]
pub struct PictureInput {
    pub report: ReportJob,
}

/// What a picture needs of a Report: its resolved job (every field filled in, so it is a
/// complete job) and whether it carried advice. The other fields are read again from the job:
/// the picture's what-if chart needs the model, which a Report names but does not hold.
#[derive(Debug, Clone, Deserialize)]
pub struct ReportJob {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
    #[serde(default)]
    pub advice: Option<serde_json::Value>,
}

/// The self-contained SVG picture that `estimate --svg FILE` writes for the report's job
/// (`picture::render_svg`: the bar by category, the step's timeline, the what-if chart).
pub fn picture(session: &Session, input: &PictureInput) -> Result<String, AppError> {
    let r = &input.report;
    let p = prepare(session, &r.job)?;
    let advise = r.advice.as_ref().is_some_and(|a| !a.is_null());
    let report = p.report_with_advice(advise)?;
    Ok(super::picture::render_svg(&report, &p.what_if()?))
}

/// The fit verdict of a report: the estimator's own, or, when it left it out although the job
/// names a GPU, one derived from the best device figure the report has (device total, else
/// peak reserved, else peak allocated, else the sum of the components). `--require-fit` exits
/// on this and every renderer draws it.
pub fn verdict(report: &Report) -> Option<Fit> {
    if let Some(f) = &report.fit {
        return Some(f.clone());
    }
    let gpu = vramscope_core::gpu::find(report.job.gpu.as_deref()?).ok()?;
    let p = &report.per_gpu;
    let c = &p.components;
    let used = p
        .peaks
        .device_total
        .or(p.peaks.peak_reserved)
        .or(p.peaks.peak_allocated)
        .unwrap_or_else(|| c.allocated() + c.cuda_context + c.allocator_reserve);
    let usable = report.job.usable(gpu.memory_bytes);
    let headroom = (i128::from(usable) - i128::from(used))
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Some(Fit {
        target: TargetGpu::from(gpu),
        fits: used <= usable,
        headroom,
        reserve: report.job.reserve,
    })
}
