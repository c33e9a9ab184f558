//! The estimator: a model and a resolved job in, a report out. Pure arithmetic over the model's
//! inventory; no I/O.

pub mod activations;
pub mod alloc_events;
pub mod blocks;
pub mod compile;
pub mod dpo;
pub use crate::job::engine_settings;
pub mod engines;
pub mod kv;
pub mod layout;
pub mod memo;
pub mod mllama;
pub mod optimizer;
pub mod overhead;
pub mod quant;
pub mod rl;
pub mod serving;
pub mod sglang;
pub mod stages;
pub mod states;
pub mod tape;
pub mod techniques;
pub mod vision;
mod vision_projectors;

use crate::inventory::Inventory;
use crate::model::ModelSpec;

/// What the estimator knows about the model.
///
/// A model is not changed once built ([`ModelInput::new`]): the parts of an estimate that
/// depend only on it and a few job fields are remembered in its [`memo::Memo`] and reused by
/// every later estimate of it (a clone starts with an empty memo).
#[derive(Debug, Clone)]
pub struct ModelInput {
    pub name: String,
    /// The architecture; `None` for a bare parameter count or a file without config.
    pub spec: Option<ModelSpec>,
    /// The parameter tensors; `None` for a bare parameter count.
    pub inventory: Option<Inventory>,
    pub params_total: u64,
    memo: memo::Memo,
}

impl ModelInput {
    /// The estimator's input for a model: its name, architecture, tensors and parameter count.
    pub fn new(
        name: String,
        spec: Option<ModelSpec>,
        inventory: Option<Inventory>,
        params_total: u64,
    ) -> Self {
        ModelInput {
            name,
            spec,
            inventory,
            params_total,
            memo: memo::Memo::default(),
        }
    }

    /// What this model remembers between estimates.
    pub(crate) fn memo(&self) -> &memo::Memo {
        &self.memo
    }
}

use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::report::Report;

/// Estimates the job's memory (see [`simulate`] for how the peak is found) and, on a GPU
/// whose speeds the catalog has, its step time ([`crate::throughput`]).
pub fn estimate(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let job = &*vision::with_images(model.spec.as_ref(), job)?;
    let mut report = simulate::run(model, job)?;
    let (throughput, warning) =
        crate::throughput::for_job(model, job, &report.per_gpu, report.engine.as_ref());
    report.throughput = throughput;
    report.warnings.extend(warning);
    Ok(report)
}

pub mod simulate;

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

/// Bytes the caching allocator hands out for a request: the one rounding function, defined with
/// the allocator's other rules in `overhead` (`c10/cuda/CUDACachingAllocator.cpp` `round_size`).
pub use overhead::round_size;
