//! The composition step above the estimator and the step-time model: memory from
//! [`crate::estimate`], then the step time from [`crate::throughput`] on the same job. The
//! dependency runs one way: neither half imports this module.

use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::memory::memory;
use crate::estimate::vision;
use crate::job::ResolvedJob;
use crate::report::Report;

/// Estimates the job's memory ([`memory`]) and, on a GPU
/// whose speeds the catalog has, its step time ([`crate::throughput::for_job`]). Both read
/// the job with its image inputs folded in ([`vision::with_images`]).
pub fn estimate(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let job = &*vision::with_images(model.spec.as_ref(), job)?;
    let mut report = memory(model, job)?;
    let (throughput, warning) =
        crate::throughput::for_job(model, job, &report.per_gpu, report.engine.as_ref());
    report.throughput = throughput;
    report.warnings.extend(warning);
    Ok(report)
}
