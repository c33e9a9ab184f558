//! The planner's answer as plain data: one layout, its screened figures, and its modelled step
//! time. The screen is `plan`'s, the step-time model `throughput::layout`'s.

use crate::report::StepParts;
use serde::Serialize;

/// One layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub framework: &'static str,
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    pub cp: u64,
    pub ep: u64,
    pub sp: bool,
    pub zero: u64,
    pub offload: &'static str,
    pub checkpointing: &'static str,
    pub micro_batch: u64,
    pub microbatches: u64,
}

/// A layout with its screened memory and cost signal.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    pub layout: Layout,
    /// Screened device total of the most-loaded GPU.
    pub device_total: u64,
    pub headroom: i64,
    /// Host RAM per GPU that offload needs (offloaded optimizer states, master weights and
    /// parameters); 0 without offload.
    pub host_bytes: u64,
    /// Extra compute from recomputation (0, Korthikanti's selective 2.7 %, full: one more
    /// forward = 1/3 of a step).
    pub recompute: f64,
    /// Pipeline bubble (p − 1)/m (Narayanan et al. 2021, §2.2).
    pub bubble: f64,
    /// Communication per step relative to DDP's all-reduce (ZeRO paper §7: stages 1–2 = 1,
    /// stage 3 = 1.5; offload adds the optimizer's PCIe round trip, counted as 1 more).
    pub communication: f64,
    /// The modelled step (`throughput::layout`); absent where the GPU's speeds are unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<LayoutTime>,
}

/// A layout's modelled step time: what the ranking reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayoutTime {
    pub step_time_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    /// `compute_s`, `communication_s`, `offload_s`, `bubble_s`.
    #[serde(flatten)]
    pub parts: StepParts,
    /// What the step spends most on: `compute`, `communication`, `offload`, `pipeline bubble`.
    pub dominant: &'static str,
    /// Bytes moved over the host link per step (offload), 0 without.
    pub host_traffic: u64,
}
