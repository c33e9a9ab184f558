//! The report's `throughput` section as plain data; the step-time model that fills it is
//! `crate::throughput`'s.

use serde::Serialize;

/// The report's `throughput` (contract): the modelled time of a training step, or an
/// inference job's prefill and decode rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Throughput {
    Train(TrainThroughput),
    Infer(InferThroughput),
}

/// The four parts a training step's time adds up from (`throughput::train_step`, after
/// Narayanan et al. 2021 §2.2 and the ZeRO paper §7): the compute of its micro-batches and
/// optimizer step, the communication and the offload traffic not hidden behind it, and the
/// pipeline bubble. One type for the step-time model's answer, the report's `throughput` and the
/// planner's layouts, which all carry these four fields under these names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepParts {
    /// The micro-batches' forwards and backwards and the optimizer step.
    pub compute_s: f64,
    /// Collective communication not overlapped with compute.
    pub communication_s: f64,
    /// Host-link traffic of offload not overlapped with compute.
    pub offload_s: f64,
    /// The pipeline bubble, (p − 1) micro-batch times (1F1B).
    pub bubble_s: f64,
}

impl StepParts {
    /// The parts by the names the planner and the terminal say them in.
    fn named(&self) -> [(f64, &'static str); 4] {
        [
            (self.compute_s, "compute"),
            (self.communication_s, "communication"),
            (self.offload_s, "offload"),
            (self.bubble_s, "pipeline bubble"),
        ]
    }

    /// The part the step spends most on: `compute`, `communication`, `offload` or
    /// `pipeline bubble` (the first of equals).
    pub fn dominant(&self) -> &'static str {
        self.named()
            .into_iter()
            .fold((f64::MIN, "compute"), |a, b| if b.0 > a.0 { b } else { a })
            .1
    }

    /// The seconds of the part named `name` as [`StepParts::dominant`] names it (`compute` for
    /// any other name).
    pub fn seconds(&self, name: &str) -> f64 {
        self.named()
            .into_iter()
            .find(|p| p.1 == name)
            .map_or(self.compute_s, |p| p.0)
    }
}

/// A training step's time (contract `throughput`, train).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainThroughput {
    pub step_time_s: f64,
    /// The step's forwards (all its micro-batches), its backwards (recomputation included)
    /// and its optimizer step with `zero_grad`, each the longer of the GPU's work and the
    /// host's launches; with the communication, offload and bubble not hidden they sum to
    /// `step_time_s`.
    pub forward_s: f64,
    pub backward_s: f64,
    pub optimizer_s: f64,
    /// What bounds the step: `launch` (the host's kernel launches), `compute` (matmuls and
    /// attention), `memory` (bandwidth-bound ops and the optimizer step), `communication`,
    /// `offload`.
    pub bound: &'static str,
    pub tokens_per_s_per_gpu: f64,
    /// Model FLOPs (no recomputation) / (step time × the dtype's dense peak).
    pub mfu: f64,
    /// `compute_s`, `communication_s`, `offload_s`, `bubble_s` (contract `throughput`).
    #[serde(flatten)]
    pub parts: StepParts,
    /// With a price per GPU-hour: what a million trained tokens cost; else `null`.
    pub cost_per_million_tokens: Option<f64>,
    /// The price per GPU-hour the cost was computed with: the job's `price_per_gpu_hour`, else
    /// the built-in list's for the GPU (`throughput::price`); `null` when neither has one.
    pub price_per_gpu_hour: Option<f64>,
    /// Where that price came from: `"job"` (`--price-per-gpu-hour`) or the built-in list and
    /// the instance shape it prices; `null` without a price.
    pub price_source: Option<String>,
    /// `task: "rl"`: the seconds of the step spent generating the round's completions
    /// (`throughput::rl`), part of `step_time_s`; absent for other tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_s: Option<f64>,
}

/// An inference job's rates (contract `throughput`, infer), over all its sequences, and the
/// time of one `generate` call of the job (`throughput::infer`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InferThroughput {
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// One `generate` call: the prefill (which yields the first new token) and
    /// `new_tokens − 1` decode steps, seconds.
    pub generate_s: f64,
    pub prefill_s: f64,
    /// One decode step (a new token for every sequence), seconds.
    pub decode_step_s: f64,
    /// What a decode step is bound by: `launch` (the host issuing eager ops), `memory`,
    /// `compute`, `offload` (layers read from host RAM).
    pub bound: &'static str,
}
