//! The weight format in force for a model and a job.

use super::input::ModelInput;
use super::quant;
use crate::error::CoreError;
use crate::model::ModelSpec;

/// The weight format in force: the job's `weights`, or, when it says `none`, the format the
/// checkpoint is published in (config.json's `quantization_config`).
pub fn effective_weights(
    model: &ModelInput,
    job: &crate::job::ResolvedJob,
) -> Result<quant::WeightFormat, CoreError> {
    weights_in_force(model.spec.as_ref(), job)
}

/// [`effective_weights`] from the model's architecture alone. The job's format was parsed in
/// resolution; the checkpoint's (a property of the model, not the job) is read here.
pub fn weights_in_force(
    spec: Option<&ModelSpec>,
    job: &crate::job::ResolvedJob,
) -> Result<quant::WeightFormat, CoreError> {
    match spec.and_then(|s| s.quantization.as_deref()) {
        Some(q) if job.weights.value.is_none() => quant::WeightFormat::parse(q),
        _ => Ok(job.weights.value),
    }
}
