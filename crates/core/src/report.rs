//! The report: the contract's JSON out (`estimate --json`, `POST /api/estimate`), and the one
//! category scheme shared by the estimate, the measurement and the picture.

mod advice;
mod fit_answer;
mod rl;
mod throughput;
mod vllm;

pub use advice::Advice;
pub use fit_answer::{FitAnswer, Launch, LayersSpeed};
pub use rl::{GeneratorFigures, PhaseFigures, RlFigures, Roles, Rollouts};
pub use throughput::{InferThroughput, StepParts, Throughput, TrainThroughput};
pub use vllm::VllmBudget;

use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::summary::ModelSummary;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Where bytes go. The declaration order is the canonical order of every table and picture
/// ([`Category::ALL`]).
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
    /// Every category in the one canonical order, the order of every table and picture (and of
    /// the derived `Ord`): the estimate's nine, then `unattributed` (measurements only). The
    /// other lists below are slices of it.
    pub const ALL: [Category; 10] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerStates,
        Category::MasterWeights,
        Category::Activations,
        Category::KvCache,
        Category::Temporaries,
        Category::CudaContext,
        Category::AllocatorReserve,
        Category::Unattributed,
    ];

    /// The categories an estimate reports (`per_gpu.components`), in canonical order.
    pub const ESTIMATED: [Category; 9] = Self::prefix();

    /// The categories that `peak_allocated` is made of (allocator-visible).
    pub const ALLOCATED: [Category; 7] = Self::prefix();

    /// The model states (`per_gpu.model_states`): not a function of batch or sequence.
    pub const MODEL_STATES: [Category; 4] = Self::prefix();

    /// What a measurement splits allocated bytes into: the allocator-visible categories, then
    /// `unattributed`.
    pub const MEASURED: [Category; 8] = {
        let mut out = [Category::Unattributed; 8];
        let allocated = Self::ALLOCATED;
        let mut i = 0;
        while i < allocated.len() {
            out[i] = allocated[i];
            i += 1;
        }
        out
    };

    /// The first `N` categories of [`Category::ALL`].
    const fn prefix<const N: usize>() -> [Category; N] {
        let mut out = [Category::Parameters; N];
        let mut i = 0;
        while i < N {
            out[i] = Self::ALL[i];
            i += 1;
        }
        out
    }

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
    /// The layer's activations and the peaks (contract `per_gpu`, flat beside the components).
    #[serde(flatten)]
    pub peaks: PeakFigures,
    /// vLLM's preallocated KV pool (beside `components.kv_cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_pool: Option<u64>,
    /// Which GPU these figures are for, when ranks differ (pipeline stages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
    /// Host (CPU) RAM the job needs beside the GPU: offloaded optimizer states and parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_bytes: Option<u64>,
    /// Optimizer states a paged bitsandbytes optimizer keeps in unified memory
    /// (`cudaMallocManaged`): outside PyTorch's allocator, so not in `components` nor
    /// `peak_allocated`/`peak_reserved`; on the GPU while it has room, so in `device_total`;
    /// evicted to host RAM under pressure, so not needed for `fit.fits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paged_states: Option<u64>,
    /// The caching allocator as simulated over the step (contract `per_gpu.allocator`); absent
    /// where the step is not simulated event by event (`estimate/alloc_events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<AllocatorSummary>,
}

/// `per_gpu`'s figures after its components and model states, in the contract's order and
/// names: the estimate fills them all (`PerGpu`); a measured record or an engine log
/// (`vramscope_measure::analysis::MeasuredPerGpu`) fills what it states and leaves the rest
/// null, so an estimate and a measurement compare field by field.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeakFigures {
    /// Bytes one transformer layer saves for backward (train) or holds (infer); `null` when the
    /// architecture is unknown, and in a record (which does not show them).
    pub activation_bytes_per_layer: Option<u64>,
    /// `torch.cuda.max_memory_allocated()` over the step (a record: the replayed peak).
    pub peak_allocated: Option<u64>,
    /// `torch.cuda.max_memory_reserved()` over the step, where the input shows it.
    pub peak_reserved: Option<u64>,
    /// What `nvidia-smi` shows used by the process (CUDA context included); a record of the
    /// allocator never sees the context: null.
    pub device_total: Option<u64>,
    /// The phase (forward, backward, optimizer...) the peak falls in, where known.
    pub peak_phase: Option<String>,
}

/// `per_gpu.allocator`: what the caching-allocator model says of the simulated step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AllocatorSummary {
    /// Segments (cudaMalloc'd blocks) at the most.
    pub segments: u64,
    /// 1 − peak_allocated / peak_reserved.
    pub fragmentation: f64,
    /// The largest cached free block at the end of the step.
    pub largest_free_block: u64,
    /// cudaMalloc failures that freed the cache and retried.
    pub num_alloc_retries: u64,
}

/// One event of the simulated step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelinePoint {
    pub phase: Cow<'static, str>,
    pub label: Cow<'static, str>,
    pub allocated: u64,
    pub by_category: CategoryBytes,
}

/// Bytes live per category at one timeline point: the categories of [`Category::ALL`] and a
/// measurement's `before_recording`, in a fixed array (a step walk makes ~70 of these per
/// estimate; a map allocated each time). A zero is an absent key: JSON lists the non-zero
/// categories only, keys in alphabetical order, as the `BTreeMap<&str, u64>` it replaces did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CategoryBytes {
    /// Indexed by the category's place in [`Category::ALL`]; the last slot is
    /// `before_recording`.
    bytes: [u64; CATEGORY_SLOTS],
}

const CATEGORY_SLOTS: usize = Category::ALL.len() + 1;

/// The key of the bytes a measurement saw allocated before its recording began.
pub const BEFORE_RECORDING: &str = "before_recording";

/// The slots in the alphabetical order of their keys: the JSON's key order.
const ALPHABETICAL_SLOTS: [usize; CATEGORY_SLOTS] = [4, 8, 10, 7, 1, 5, 3, 2, 0, 6, 9];

impl CategoryBytes {
    fn slot(name: &str) -> Option<usize> {
        if name == BEFORE_RECORDING {
            return Some(Category::ALL.len());
        }
        Category::ALL.iter().position(|c| c.name() == name)
    }

    fn key(slot: usize) -> &'static str {
        Category::ALL
            .get(slot)
            .map_or(BEFORE_RECORDING, |c| c.name())
    }

    /// Bytes of one category (no allocation, no lookup by name).
    pub fn of(&self, cat: Category) -> u64 {
        self.bytes[cat as usize]
    }

    /// Sets one category's bytes.
    pub fn set(&mut self, cat: Category, bytes: u64) {
        self.bytes[cat as usize] = bytes;
    }

    /// The bytes under a JSON key, `None` when absent (zero) or not a key.
    pub fn get(&self, name: &str) -> Option<&u64> {
        Self::slot(name).map(|i| &self.bytes[i]).filter(|b| **b > 0)
    }

    /// Sets the bytes under a JSON key; a name that is no key is ignored. Returns the bytes
    /// there before (`None` when absent).
    pub fn insert(&mut self, name: &str, bytes: u64) -> Option<u64> {
        let i = Self::slot(name)?;
        let before = std::mem::replace(&mut self.bytes[i], bytes);
        (before > 0).then_some(before)
    }

    /// How many keys the JSON lists (the non-zero ones).
    pub fn len(&self) -> usize {
        self.bytes.iter().filter(|b| **b > 0).count()
    }

    /// No bytes in any category.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The non-zero (key, bytes) pairs in alphabetical order of the keys.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ALPHABETICAL_SLOTS
            .iter()
            .map(|&i| (Self::key(i), self.bytes[i]))
            .filter(|(_, b)| *b > 0)
    }
}

impl std::ops::Index<&str> for CategoryBytes {
    type Output = u64;
    /// Like a map's index: panics on an absent (zero) key.
    fn index(&self, name: &str) -> &u64 {
        self.get(name)
            .unwrap_or_else(|| panic!("no '{name}' bytes at this point"))
    }
}

impl FromIterator<(&'static str, u64)> for CategoryBytes {
    fn from_iter<I: IntoIterator<Item = (&'static str, u64)>>(pairs: I) -> Self {
        let mut out = CategoryBytes::default();
        for (k, b) in pairs {
            out.insert(k, b);
        }
        out
    }
}

impl Serialize for CategoryBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, b) in self.iter() {
            m.serialize_entry(k, &b)?;
        }
        m.end()
    }
}

/// The GPU an answer is judged on: its catalog id and the bytes it holds (contract `fit.gpu`,
/// `fit.capacity`; the first two fields of every fit answer: `fit`, `fit --measured`, a
/// pipeline's fit), taken from the catalog's entry (`crate::gpu::Gpu`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetGpu {
    pub gpu: String,
    pub capacity: u64,
}

impl From<&Gpu> for TargetGpu {
    fn from(g: &Gpu) -> Self {
        TargetGpu {
            gpu: g.id.clone(),
            capacity: g.memory_bytes,
        }
    }
}

/// Does the job fit its GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    #[serde(flatten)]
    pub target: TargetGpu,
    pub fits: bool,
    /// capacity − reserve − device_total (negative when it does not fit).
    pub headroom: i64,
    /// Bytes the job's `reserve` keeps free for other applications (absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub reserve: u64,
}

/// serde's `skip_serializing_if` for byte counts absent when 0.
pub(crate) fn is_zero(n: &u64) -> bool {
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
    pub advice: Option<Vec<Advice>>,
    /// `task: "rl"`: each phase's figures (generation, training) by category and by role,
    /// the peak phase, what vLLM's sleep releases (`crate::estimate::rl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rl: Option<RlFigures>,
    /// The modelled step time and rates (`crate::throughput`); `null` without a GPU or where
    /// the GPU's speeds are unknown.
    pub throughput: Option<Throughput>,
}

#[cfg(test)]
mod tests {
    use super::Category::{self, *};
    use super::{CategoryBytes, ALPHABETICAL_SLOTS, BEFORE_RECORDING};

    /// The contract's order (`contract.md`, `per_gpu.components` as written there, then
    /// `unattributed`, which only `analyze` reports), written out by hand; the match is
    /// exhaustive, so a new category cannot compile without a place here.
    fn contract_position(c: Category) -> usize {
        match c {
            Parameters => 0,
            Gradients => 1,
            OptimizerStates => 2,
            MasterWeights => 3,
            Activations => 4,
            KvCache => 5,
            Temporaries => 6,
            CudaContext => 7,
            AllocatorReserve => 8,
            Unattributed => 9,
        }
    }

    #[test]
    fn one_canonical_order_and_its_slices() {
        for (i, c) in Category::ALL.iter().enumerate() {
            assert_eq!(contract_position(*c), i, "{c:?}");
        }
        // The derived Ord (used by maps keyed by category) agrees with the canonical order.
        assert!(Category::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Category::ESTIMATED[..], Category::ALL[..9]);
        assert_eq!(Category::ALLOCATED[..], Category::ALL[..7]);
        assert_eq!(
            Category::MODEL_STATES,
            [Parameters, Gradients, OptimizerStates, MasterWeights]
        );
        assert_eq!(Category::MEASURED[..7], Category::ALLOCATED[..]);
        assert_eq!(Category::MEASURED[7], Unattributed);
        assert!(!Category::ESTIMATED.contains(&Unattributed));
    }

    #[test]
    fn category_bytes_keys_are_in_alphabetical_order() {
        // The JSON's key order must be a BTreeMap's: every key, sorted as strings.
        let keys: Vec<&str> = ALPHABETICAL_SLOTS
            .iter()
            .map(|&i| CategoryBytes::key(i))
            .collect();
        let mut sorted: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
        sorted.push(BEFORE_RECORDING);
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn category_bytes_serialize_like_a_sorted_map_of_non_zero_keys() {
        let mut b = CategoryBytes::default();
        b.insert("temporaries", 3);
        b.insert("activations", 2);
        b.insert(BEFORE_RECORDING, 7);
        b.insert("parameters", 0);
        b.insert("no such key", 9);
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"activations":2,"before_recording":7,"temporaries":3}"#
        );
        assert_eq!(b.len(), 3);
        assert_eq!(b.get("parameters"), None);
        assert_eq!(b["activations"], 2);
    }

    #[test]
    fn names_are_the_json_keys() {
        for c in Category::ALL {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
    }
}
