//! The step simulator (first cut: model states only; activations and the event walk follow).

use super::ModelInput;
use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::report::*;
use crate::summary::ModelSummary;

pub fn run(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let p = model.params_total;
    let states = ModelStates {
        parameters: p.saturating_mul(4),
        gradients: p.saturating_mul(4),
        optimizer_states: p.saturating_mul(8),
        master_weights: 0,
    };
    let components = Components {
        parameters: states.parameters,
        gradients: states.gradients,
        optimizer_states: states.optimizer_states,
        ..Components::default()
    };
    let summary = match &model.spec {
        Some(s) => ModelSummary::from_spec(s, p, model.inventory.as_ref()),
        None => ModelSummary::from_params(&model.name, p),
    };
    Ok(Report {
        model: summary,
        job: job.clone(),
        per_gpu: PerGpu {
            components,
            model_states: states,
            activation_bytes_per_layer: None,
            peak_allocated: Some(components.allocated()),
            peak_reserved: None,
            device_total: None,
            peak_phase: Some("optimizer".into()),
            kv_pool: None,
        },
        timeline: Vec::new(),
        fit: None,
        warnings: Vec::new(),
    })
}
