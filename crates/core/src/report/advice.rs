//! The report's `advice` entries as plain data; the search that finds them is
//! `crate::advice`'s.

use serde::Serialize;
use std::collections::BTreeMap;

/// One piece of advice (the contract's `advice` entries, with extras).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// Flags to add to the job's command line.
    pub flags: Vec<String>,
    /// The job fields this changes, with their new values.
    pub changes: serde_json::Map<String, serde_json::Value>,
    pub device_total: u64,
    pub headroom: i64,
    /// One line: what this costs in quality, speed or host RAM.
    pub gives_up: String,
    /// The techniques combined.
    pub techniques: Vec<String>,
    /// Points in the cost order (`advice::techniques`): lower gives up less.
    pub cost: u32,
    /// The change's modelled time per token against the job's, less 1 (as the what-if's
    /// `time_cost`: +27 is 28× longer, −0.1 a tenth faster); `null` where either is unknown.
    /// The list is ordered by `cost`, ties by this, and never puts a change ahead of one 30×
    /// faster (`advice::order`).
    pub time_cost: Option<f64>,
    /// Host RAM the changed job needs (offloaded states, llama.cpp layers on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_bytes: Option<u64>,
    /// Environment variables the job must run with (`PYTORCH_CUDA_ALLOC_CONF`): an
    /// environment change, not a flag of the user's script.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `true` when this change's allocator reserve is `overhead.rs`'s packing estimate, not
    /// simulated (a layout the allocation stream does not write yet): its device total may run
    /// low. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reserve_estimated: bool,
}
