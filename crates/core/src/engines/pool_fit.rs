//! What a pool engine's fit (vLLM's, SGLang's) finds of its KV pool, and its answer: the
//! engines differ in how they size the pool and which setting caps the context; the search of
//! the longest context and the answer's fields are one.

use crate::error::CoreError;
use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use crate::report::{FitAnswer, Report};
use crate::search::largest;

/// A number in the estimate's engine figures (`report.engine`, the budget's fields).
pub(crate) fn engine_u64(r: &Report, k: &str) -> Option<u64> {
    r.engine.as_ref()?.get(k)?.as_u64()
}

/// Where a pool engine's context search stops: its own context setting as the estimate
/// resolved it (`setting`: vLLM's `max_model_len`, SGLang's `context_length`), else the
/// model's maximum positions, else 2²² tokens.
pub(crate) fn context_cap(r: &Report, setting: &str, max_pos: Option<u64>) -> u64 {
    engine_u64(r, setting).or(max_pos).unwrap_or(1 << 22)
}

/// A pool engine's fit, found: what the answer reports.
pub(crate) struct PoolFit {
    /// The most sequences of the job's context the pool holds; `None` when not one.
    pub max_batch: Option<u64>,
    /// The longest context at the job's batch the pool holds, at most `cap`.
    pub max_context: Option<u64>,
    /// Where the context search stops ([`context_cap`]).
    pub cap: u64,
    /// The estimate and the KV sums the search ran.
    pub evaluations: u64,
    /// The longest request the pool holds (the engine's own rule).
    pub longest_request: Option<u64>,
}

impl PoolFit {
    /// Searches the longest context at the job's batch whose KV
    /// (`estimate::engines::kv_bytes_per_gpu`) fits `pool`, at most `cap`, counting the
    /// evaluations with the estimate's: 1 + one per context tried.
    pub fn search(
        spec: &ModelSpec,
        job: &ResolvedJob,
        pool: u64,
        cap: u64,
        max_batch: Option<u64>,
        longest_request: Option<u64>,
    ) -> Result<Self, CoreError> {
        let mut evaluations = 1u64;
        let max_context = largest(cap, |c| {
            evaluations += 1;
            Ok(crate::estimate::engines::kv_bytes_per_gpu(spec, job, job.batch, c)? <= pool)
        })?;
        Ok(PoolFit {
            max_batch,
            max_context,
            cap,
            evaluations,
            longest_request,
        })
    }

    /// Whether the context search stopped at `cap` rather than at the pool.
    pub fn limited(&self) -> bool {
        self.max_context == Some(self.cap)
    }

    /// The fit answer on `gpu` (`max_pos` the model's maximum positions), with `notes`.
    pub fn answer(
        self,
        gpu: &Gpu,
        job: &ResolvedJob,
        max_pos: Option<u64>,
        notes: Vec<String>,
    ) -> FitAnswer {
        FitAnswer {
            max_batch: self.max_batch,
            max_context: self.max_context,
            seq_limited_by_model: self.limited(),
            model_max_positions: max_pos,
            evaluations: self.evaluations,
            notes,
            longest_request: self.longest_request,
            ..FitAnswer::on(gpu, job.reserve)
        }
    }
}
