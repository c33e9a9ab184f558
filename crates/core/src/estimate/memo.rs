//! What a model keeps between estimates: the parts of an estimate that depend only on the model
//! and a few of the job's fields — the model states, the forward plan, and which modules LoRA
//! targets adapt — computed once per distinct set of those fields and reused by every later
//! estimate of the same model (the fit searches, the what-if table, advice, the planner's
//! confirmations, a caller's sweep); and the parts that depend on the model alone — the
//! step-time model's shape ([`ModelShape::of`]) and the report's model summary
//! ([`ModelSummary::from_spec`]) — computed once per model.
//!
//! An entry is looked up by the whole job with the fields its part never reads set to fixed
//! values ([`states_key`], [`plan_key`]), so a job field added later is part of every key
//! until it is named here as unread: a field forgotten costs a recomputation, never a wrong
//! answer. The warnings a part gave are kept with it and given again on every reuse, so a
//! report is the same whether its parts were computed or remembered. Errors are not kept.

use super::forward_plan::ForwardPlan;
use super::lora_modules::LoraModules;
use super::state_bytes::StateBytes;
use crate::error::CoreError;
use crate::job::{CudaModuleLoading, ResolvedJob};
use crate::summary::ModelSummary;
use crate::throughput::shape::ModelShape;
use std::sync::{Arc, Mutex, OnceLock};

/// Entries kept per part; past it the oldest goes (a fit search's one-off batch sizes do not
/// grow the memo without bound). One report asks for dozens of distinct jobs (the estimate,
/// `fit`'s search, the advice's and the what-if's variants, each simulated through the
/// allocator model); a server or a notebook alternating between a few jobs of one model must
/// find them all again, not evict them in turn.
const CAPACITY: usize = 512;

/// The memo of one model (a field of [`super::ModelInput`]). A clone starts empty.
#[derive(Default)]
pub struct Memo {
    states: Table<ResolvedJob, StateBytes>,
    plans: Table<ResolvedJob, ForwardPlan>,
    /// By the job's `peft.targets` (the matching reads tensor names, not the job).
    lora: Table<Vec<String>, LoraModules>,
    /// The step's allocator events run through the caching-allocator model
    /// (`alloc_events`): `None` where the stream does not cover the job.
    reserves: Table<ResolvedJob, Option<super::alloc_events::outcome::Outcome>>,
    /// The model alone: its step-time shape and its summary.
    shape: OnceLock<ModelShape>,
    summary: OnceLock<ModelSummary>,
}

impl Clone for Memo {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("states", &self.states.len())
            .field("plans", &self.plans.len())
            .field("lora", &self.lora.len())
            .field("shape", &self.shape.get().is_some())
            .field("summary", &self.summary.get().is_some())
            .finish()
    }
}

impl Memo {
    /// The model states of `job` ([`super::states::model_states`]), computed by `compute` the
    /// first time; their warnings are appended to `warnings` either way.
    pub(crate) fn states(
        &self,
        job: &ResolvedJob,
        warnings: &mut Vec<String>,
        compute: impl FnOnce(&mut Vec<String>) -> Result<StateBytes, CoreError>,
    ) -> Result<Arc<StateBytes>, CoreError> {
        self.states
            .get_or_compute(states_key(job), warnings, compute)
    }

    /// The forward plan of `job` ([`super::activations::forward`]), computed by `compute` the
    /// first time; its warnings are appended to `warnings` either way.
    pub(crate) fn plan(
        &self,
        job: &ResolvedJob,
        warnings: &mut Vec<String>,
        compute: impl FnOnce(&mut Vec<String>) -> Result<ForwardPlan, CoreError>,
    ) -> Result<Arc<ForwardPlan>, CoreError> {
        self.plans.get_or_compute(plan_key(job), warnings, compute)
    }

    /// The simulated allocator's figures for `job` (`alloc_events`), computed by `compute` the
    /// first time. Every field but the echo-only ones is part of the key: the stream reads the
    /// plan's fields, the optimizer, the device and the allocator's settings.
    pub(crate) fn reserve(
        &self,
        job: &ResolvedJob,
        compute: impl FnOnce() -> Result<Option<super::alloc_events::outcome::Outcome>, CoreError>,
    ) -> Result<Arc<Option<super::alloc_events::outcome::Outcome>>, CoreError> {
        let key = ResolvedJob {
            model: Default::default(),
            reserve: 0,
            price_per_gpu_hour: None,
            ..job.clone()
        };
        self.reserves
            .get_or_compute(key, &mut Vec::new(), |_| compute())
    }

    /// The modules LoRA adapts for `targets` ([`super::states::lora_modules`]), matched by
    /// `compute` the first time.
    pub(crate) fn lora_modules(
        &self,
        targets: &[String],
        compute: impl FnOnce() -> LoraModules,
    ) -> Arc<LoraModules> {
        let key = targets.to_vec();
        if let Some((found, _)) = self.lora.find(&key) {
            return found;
        }
        let value = Arc::new(compute());
        self.lora.insert(key, Arc::clone(&value), Vec::new());
        value
    }

    /// The model's shape as the step-time model reads it, made by `compute` the first time.
    pub(crate) fn shape(&self, compute: impl FnOnce() -> ModelShape) -> &ModelShape {
        self.shape.get_or_init(compute)
    }

    /// The model's summary before the job's figures (`params_trainable`) and the caller's
    /// name are set, made by `compute` the first time.
    pub(crate) fn summary(&self, compute: impl FnOnce() -> ModelSummary) -> &ModelSummary {
        self.summary.get_or_init(compute)
    }
}

/// The job as the model states see it: the step's shape (batch, sequence, tokens generated,
/// accumulation), the kernels (attention, loss, checkpointing), the serving engine's settings,
/// the device and the echo-only fields are never read by `states` (nor by `optimizer` and
/// `quant`, which it calls).
fn states_key(job: &ResolvedJob) -> ResolvedJob {
    let mut k = unread_by_both(job);
    k.batch = 0;
    k.seq = 0;
    k.checkpointing = crate::job::Checkpointing::None;
    k.attention = crate::job::AttentionKernel::Sdpa;
    k.loss = crate::job::LossKernel::Standard;
    k
}

/// The job as the forward plan sees it (`activations`, `stages`, `blocks`): the optimizer, the
/// serving engine's settings, the device and the echo-only fields are never read.
fn plan_key(job: &ResolvedJob) -> ResolvedJob {
    let mut k = unread_by_both(job);
    k.optimizer = crate::job::Optimizer::None;
    k
}

/// The fields neither part reads, set to fixed values: the model's name as written (the model
/// itself is the memo's owner), accumulation and tokens generated (read by the step walk and
/// the KV cache), the engine's settings, the GPU, the KV dtype, CUDA's module loading, the
/// user's reserve, the host RAM (read by advice) and the caching allocator's settings (read by
/// the device figures and the fit).
fn unread_by_both(job: &ResolvedJob) -> ResolvedJob {
    ResolvedJob {
        model: Default::default(),
        grad_accum: 0,
        new_tokens: 0,
        engine: Default::default(),
        gpu: None,
        kv_dtype: None,
        cuda_module_loading: CudaModuleLoading::Lazy,
        reserve: 0,
        host_ram: None,
        allocator: Default::default(),
        ..job.clone()
    }
}

/// One remembered value: its key's fingerprint ([`Fingerprint`]), its key, the value, and the
/// warnings computing it gave.
type Entry<K, V> = (u64, K, Arc<V>, Vec<String>);

/// A few of a key's fields folded into one number, compared before the whole key: a table of
/// hundreds of jobs is scanned by one integer each, and only a job that agrees on these is
/// compared field by field. Equal keys have equal fingerprints; unequal ones may share one.
trait Fingerprint {
    fn fingerprint(&self) -> u64;
}

impl Fingerprint for ResolvedJob {
    /// The step's shape: what a fit search, a sweep and the advice's variants differ in most.
    fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(
            &(self.batch, self.seq, self.grad_accum, self.new_tokens),
            &mut h,
        );
        std::hash::Hasher::finish(&h)
    }
}

impl Fingerprint for Vec<String> {
    fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(self, &mut h);
        std::hash::Hasher::finish(&h)
    }
}

/// One part's entries, oldest first.
struct Table<K, V> {
    entries: Mutex<Vec<Entry<K, V>>>,
}

impl<K, V> Default for Table<K, V> {
    fn default() -> Self {
        Table {
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl<K: PartialEq + Fingerprint, V> Table<K, V> {
    fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// The value for `key` and the warnings computing it gave, if remembered.
    fn find(&self, key: &K) -> Option<(Arc<V>, Vec<String>)> {
        let entries = self.entries.lock().ok()?;
        let print = key.fingerprint();
        // Newest first: the job asked again is most often the one just computed.
        let (_, _, v, w) = entries
            .iter()
            .rev()
            .find(|(p, k, _, _)| *p == print && k == key)?;
        Some((Arc::clone(v), w.clone()))
    }

    /// Remembers `value` for `key`, the oldest entry going when the table is full. A key
    /// already remembered is kept as it is: callers that missed it at once (a server's
    /// concurrent requests for one job) computed equal values, and one copy each would fill
    /// the table with duplicates and evict the jobs other callers come back for.
    fn insert(&self, key: K, value: Arc<V>, warnings: Vec<String>) {
        if let Ok(mut entries) = self.entries.lock() {
            let print = key.fingerprint();
            if entries.iter().any(|(p, k, _, _)| *p == print && *k == key) {
                return;
            }
            if entries.len() >= CAPACITY {
                entries.remove(0);
            }
            entries.push((key.fingerprint(), key, value, warnings));
        }
    }

    /// The value for `key`, computed by `compute` (outside the lock) when absent; the warnings
    /// it gave appended to `warnings`.
    fn get_or_compute(
        &self,
        key: K,
        warnings: &mut Vec<String>,
        compute: impl FnOnce(&mut Vec<String>) -> Result<V, CoreError>,
    ) -> Result<Arc<V>, CoreError> {
        if let Some((v, w)) = self.find(&key) {
            warnings.extend(w);
            return Ok(v);
        }
        let mut given = Vec::new();
        let value = Arc::new(compute(&mut given)?);
        warnings.extend(given.iter().cloned());
        self.insert(key, Arc::clone(&value), given);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key type whose fingerprint is the same for every key: the table must still tell
    /// them apart by the key itself.
    #[derive(PartialEq)]
    struct Same(u32);
    impl Fingerprint for Same {
        fn fingerprint(&self) -> u64 {
            7
        }
    }

    #[test]
    fn keys_sharing_a_fingerprint_are_told_apart() {
        let t: Table<Same, u32> = Table::default();
        t.insert(Same(1), Arc::new(10), Vec::new());
        t.insert(Same(2), Arc::new(20), vec!["w".into()]);
        assert_eq!(t.find(&Same(1)).map(|(v, _)| *v), Some(10));
        assert_eq!(
            t.find(&Same(2)).map(|(v, w)| (*v, w)),
            Some((20, vec!["w".to_string()]))
        );
        assert!(t.find(&Same(3)).is_none());
    }

    /// Eight callers miss one key at once (each computes while the others wait at the
    /// barrier, so all eight find it absent): the table keeps one entry, not eight.
    #[test]
    fn callers_missing_one_key_at_once_leave_one_entry() {
        let t: Table<Vec<String>, usize> = Table::default();
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let mut w = Vec::new();
                    t.get_or_compute(vec!["job".to_string()], &mut w, |_| {
                        barrier.wait();
                        Ok(42)
                    })
                    .unwrap();
                });
            }
        });
        assert_eq!(t.len(), 1);
        assert_eq!(t.find(&vec!["job".to_string()]).map(|(v, _)| *v), Some(42));
    }

    #[test]
    fn the_oldest_entry_goes_when_full() {
        let t: Table<Vec<String>, usize> = Table::default();
        for i in 0..=CAPACITY {
            t.insert(vec![i.to_string()], Arc::new(i), Vec::new());
        }
        assert_eq!(t.len(), CAPACITY);
        assert!(t.find(&vec!["0".to_string()]).is_none());
        assert_eq!(t.find(&vec!["1".to_string()]).map(|(v, _)| *v), Some(1));
        assert_eq!(
            t.find(&vec![CAPACITY.to_string()]).map(|(v, _)| *v),
            Some(CAPACITY)
        );
    }
}
