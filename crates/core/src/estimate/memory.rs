//! The memory half of an estimate: the report without step time.

use super::input::ModelInput;
use super::{dpo, rl, simulate, vision};
use crate::error::CoreError;
use crate::job::{ResolvedJob, Task};
use crate::report::Report;

/// Estimates the job's memory: the report with `throughput` left empty (the step time is added
/// above, in [`crate::compose`]). Image inputs are first folded into the job
/// ([`vision::with_images`]); an RL job goes to its phases ([`rl::run`]), a DPO step to its
/// pair of rows ([`dpo::run`]), any other to one simulated step ([`simulate::run_edited`]).
pub fn memory(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let job = &*vision::with_images(model.spec.as_ref(), job)?;
    if job.task == Task::Rl {
        return rl::run(model, job);
    }
    if dpo::is_dpo(job) {
        return dpo::run(model, job);
    }
    simulate::run_edited(model, job, None)
}
