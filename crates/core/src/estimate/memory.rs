//! The memory half of an estimate: the report without step time.

use super::input::ModelInput;
use super::{simulate, vision};
use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::report::Report;

/// Estimates the job's memory (see [`simulate`] for how the peak is found): the report with
/// `throughput` left empty. Image inputs are first folded into the job
/// ([`vision::with_images`]). The step time is added above, in [`crate::compose`].
pub fn memory(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let job = &*vision::with_images(model.spec.as_ref(), job)?;
    simulate::run(model, job)
}
