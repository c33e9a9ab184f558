//! The report: the contract's JSON out (`estimate --json`, `POST /api/estimate`), and the one
//! category scheme shared by the estimate, the measurement and the picture.

use crate::job::ResolvedJob;
use crate::summary::ModelSummary;
use serde::{Deserialize, Serialize};

/// Where bytes go. The order is the order of every table and picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameters,
    Gradients,
    OptimizerStates,
    MasterWeights,
    Activations,
    KvCache,
    Temporaries,
    CudaContext,
    AllocatorReserve,
    /// Measurements only: bytes no rule could attribute.
    Unattributed,
}

impl Category {
    /// The categories that `peak_allocated` is made of (allocator-visible).
    pub const ALLOCATED: [Category; 7] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerStates,
        Category::MasterWeights,
        Category::Activations,
        Category::KvCache,
        Category::Temporaries,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerStates => "optimizer_states",
            Category::MasterWeights => "master_weights",
            Category::Activations => "activations",
            Category::KvCache => "kv_cache",
            Category::Temporaries => "temporaries",
            Category::CudaContext => "cuda_context",
            Category::AllocatorReserve => "allocator_reserve",
            Category::Unattributed => "unattributed",
        }
    }

    /// Human label for tables and legends.
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerStates => "optimizer states",
            Category::MasterWeights => "master weights",
            Category::Activations => "activations",
            Category::KvCache => "KV cache",
            Category::Temporaries => "temporaries",
            Category::CudaContext => "CUDA context",
            Category::AllocatorReserve => "allocator reserve",
            Category::Unattributed => "unattributed",
        }
    }
}

/// `per_gpu.components`: bytes live at the peak moment by category. The first seven add up to
/// `peak_allocated`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Components {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_states: u64,
    pub master_weights: u64,
    pub activations: u64,
    pub kv_cache: u64,
    pub temporaries: u64,
    pub cuda_context: u64,
    pub allocator_reserve: u64,
}

impl Components {
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Parameters => self.parameters,
            Category::Gradients => self.gradients,
            Category::OptimizerStates => self.optimizer_states,
            Category::MasterWeights => self.master_weights,
            Category::Activations => self.activations,
            Category::KvCache => self.kv_cache,
            Category::Temporaries => self.temporaries,
            Category::CudaContext => self.cuda_context,
            Category::AllocatorReserve => self.allocator_reserve,
            Category::Unattributed => 0,
        }
    }

    pub fn get_mut(&mut self, c: Category) -> Option<&mut u64> {
        Some(match c {
            Category::Parameters => &mut self.parameters,
            Category::Gradients => &mut self.gradients,
            Category::OptimizerStates => &mut self.optimizer_states,
            Category::MasterWeights => &mut self.master_weights,
            Category::Activations => &mut self.activations,
            Category::KvCache => &mut self.kv_cache,
            Category::Temporaries => &mut self.temporaries,
            Category::CudaContext => &mut self.cuda_context,
            Category::AllocatorReserve => &mut self.allocator_reserve,
            Category::Unattributed => return None,
        })
    }

    /// Sum of the allocator-visible categories (= `peak_allocated` at the peak).
    pub fn allocated(&self) -> u64 {
        Category::ALLOCATED.iter().map(|c| self.get(*c)).sum()
    }
}

/// `per_gpu.model_states`: bytes each model state holds over the step (its maximum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStates {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_states: u64,
    pub master_weights: u64,
}

impl ModelStates {
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer_states + self.master_weights
    }
}

/// The per-GPU figures of the most-loaded GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerGpu {
    pub components: Components,
    pub model_states: ModelStates,
    /// Bytes one transformer layer saves for backward (train) or holds (infer); `null` when the
    /// architecture is unknown.
    pub activation_bytes_per_layer: Option<u64>,
    pub peak_allocated: Option<u64>,
    pub peak_reserved: Option<u64>,
    pub device_total: Option<u64>,
    pub peak_phase: Option<String>,
    /// vLLM's preallocated KV pool (beside `components.kv_cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_pool: Option<u64>,
    /// Which GPU these figures are for, when ranks differ (pipeline stages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
    /// Host (CPU) RAM the job needs beside the GPU: offloaded optimizer states and parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_bytes: Option<u64>,
}

/// One event of the simulated step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelinePoint {
    pub phase: String,
    pub label: String,
    pub allocated: u64,
    pub by_category: std::collections::BTreeMap<&'static str, u64>,
}

/// Does the job fit its GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub gpu: String,
    pub capacity: u64,
    pub fits: bool,
    /// capacity − reserve − device_total (negative when it does not fit).
    pub headroom: i64,
    /// Bytes the job's `reserve` keeps free for other applications (absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub reserve: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub model: ModelSummary,
    pub job: ResolvedJob,
    pub per_gpu: PerGpu,
    pub timeline: Vec<TimelinePoint>,
    pub fit: Option<Fit>,
    pub warnings: Vec<String>,
    /// The serving engine's own budget (vLLM: KV pool, blocks, max concurrency; llama.cpp:
    /// the GPU/host split), when the job runs on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<serde_json::Value>,
    /// When the job does not fit (or advice was asked for): the cheapest changes that make it
    /// fit, cheapest first (`crate::advice`); `[]` when nothing searched fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<Vec<crate::advice::Advice>>,
}
