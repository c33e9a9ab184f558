//! A diffusion job's report as plain data: its phases, the pipeline's summary and the report
//! around them (the contract's Report shape). Filled by `estimate` (inference) and `train`.

use super::job::Resolved;
use super::Role;
use crate::report::{Fit, PerGpu, TimelinePoint};
use crate::summary::ReadFrom;
use serde::Serialize;

/// One phase of the call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// `text_encode:<component>`, `denoise`, `vae_decode`.
    pub phase: String,
    /// Weights on the GPU during the phase.
    pub parameters: u64,
    /// The phase's activation peak.
    pub activations: u64,
    /// Workspaces (cuBLAS/cuBLASLt, allocated once and kept).
    pub temporaries: u64,
    /// Training: the adapters' gradients alive in the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradients: Option<u64>,
    /// Training: the optimizer's states.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizer_states: Option<u64>,
    pub allocated: u64,
}

impl Phase {
    /// A phase whose parts are all alive at its peak, so `allocated` is their sum (the
    /// weights, the activations, the cuBLAS workspaces and, training, `(gradients,
    /// optimizer states)`); `None` when the sum overflows.
    pub fn summed(
        phase: String,
        parameters: u64,
        activations: u64,
        temporaries: u64,
        train: Option<(u64, u64)>,
    ) -> Option<Phase> {
        let (g, o) = train.unwrap_or((0, 0));
        let allocated = [activations, temporaries, g, o]
            .iter()
            .try_fold(parameters, |a, &x| a.checked_add(x))?;
        Some(Phase {
            phase,
            parameters,
            activations,
            temporaries,
            gradients: train.map(|t| t.0),
            optimizer_states: train.map(|t| t.1),
            allocated,
        })
    }
}

/// A component's line in the report's model summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentSummary {
    pub name: String,
    pub class: String,
    pub role: Role,
    pub params: u64,
}

/// The pipeline in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSummary {
    pub name: String,
    pub pipeline: String,
    pub params_total: u64,
    pub components: Vec<ComponentSummary>,
    /// Where the pipeline was read (`source`: `file`, `hf-cache`, `hub`; `origin`), filled in
    /// by the caller that read it.
    #[serde(flatten)]
    pub read_from: ReadFrom,
}

/// The report of a diffusion job: the contract's Report shape (`per_gpu`, `timeline`, `fit`,
/// `warnings`) with the phases beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffusionReport {
    pub model: ModelSummary,
    pub job: Resolved,
    pub per_gpu: PerGpu,
    pub phases: Vec<Phase>,
    pub timeline: Vec<TimelinePoint>,
    pub fit: Option<Fit>,
    pub warnings: Vec<String>,
}
