//! One probe of a fit search: the job's device total as the fit judges it, and whether it
//! fits a capacity. Shared by `fit` and `fit_vision`.

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::ResolvedJob;

/// `device_total` of `job` less its paged optimizer states (evicted to host RAM rather than
/// failing, as the Report's fit check judges them), or `None` when the estimator cannot give
/// one.
fn total(model: &ModelInput, job: &ResolvedJob, evals: &mut u64) -> Result<Option<u64>, CoreError> {
    *evals += 1;
    match estimate(model, job) {
        Ok(r) => Ok(r
            .per_gpu
            .peaks
            .device_total
            .map(|t| t.saturating_sub(r.per_gpu.paged_states.unwrap_or(0)))),
        // Sizes past the estimator's limits do not fit anything.
        Err(CoreError::InvalidField { field, .. }) if field == "batch" => Ok(Some(u64::MAX)),
        Err(e) => Err(e),
    }
}

/// Whether `job`'s device total fits `capacity`.
pub(crate) fn fits_in(
    model: &ModelInput,
    job: &ResolvedJob,
    capacity: u64,
    evals: &mut u64,
) -> Result<bool, CoreError> {
    Ok(total(model, job, evals)?.is_some_and(|t| t <= capacity))
}
