//! Calibrated fit: carry a measured run's per-category residual against the estimate into the
//! estimator, then search the largest batch / sequence that fits.
//!
//! Rules (why: model states do not depend on batch or sequence, activations grow with them):
//! - parameters, gradients, optimizer states, master weights: the residual `measured −
//!   estimated` is a fixed number of bytes added to every candidate;
//! - activations, KV cache, temporaries: scaled by `measured / estimated` (a fixed residual when
//!   the estimate has none of that category);
//! - unattributed bytes: scaled with the calibrated activation-like total (bytes no rule could
//!   name are mostly autograd intermediates, which grow with the batch);
//! - allocator reserve: when the record has segments, `reserved / allocated` at the measured peak
//!   applied to the calibrated allocated bytes; else the estimate's own reserve;
//! - the CUDA context: the estimate's (the allocator's record never sees it).

use crate::analysis::MeasuredPerGpu;
use serde::Serialize;
use vramscope_core::error::CoreError;
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::largest;
use vramscope_core::gpu::Gpu;
use vramscope_core::job::{Framework, ResolvedJob, Task};
use vramscope_core::report::{Category, Components, TargetGpu};

/// Model states: not a function of batch or sequence.
const FIXED: [Category; 4] = Category::MODEL_STATES;
/// Grow with batch and sequence.
const SCALED: [Category; 3] = [
    Category::Activations,
    Category::KvCache,
    Category::Temporaries,
];

/// How one category is corrected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    pub category: &'static str,
    /// The estimate at the measured job.
    pub estimated: u64,
    pub measured: u64,
    /// Bytes added to every candidate (`fixed` rules, and scaled categories the estimate lacks).
    pub add: i64,
    /// Factor on the candidate's estimate (`scaled` rules; 1 otherwise).
    pub scale: f64,
    /// The factor as `measured / estimated` bytes (exact).
    #[serde(skip)]
    ratio: (u64, u64),
    /// `fixed` or `scaled`.
    pub rule: &'static str,
}

/// The corrections learned from one measured run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub rules: Vec<Rule>,
    /// Measured unattributed bytes per calibrated activation-like byte at the measured job
    /// (or fixed bytes, see `unattributed_fixed`).
    pub unattributed_per_activation_byte: f64,
    pub unattributed_fixed: u64,
    /// `(allocated + reserve) / allocated` at the measured peak; `None` without segments.
    pub reserve_ratio: Option<f64>,
    #[serde(skip)]
    unattributed_ratio: (u64, u64),
    #[serde(skip)]
    reserve: Option<(u64, u64)>,
}

/// A candidate's device total, estimated and calibrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Calibrated {
    pub allocated: u64,
    pub allocator_reserve: u64,
    pub cuda_context: u64,
    pub device_total: u64,
    /// The estimator's own device total for the same candidate.
    pub estimated_device_total: u64,
}

impl Calibrated {
    /// Bytes the calibration adds (negative: removes) to the estimator's device total.
    pub fn correction(&self) -> i64 {
        self.device_total as i64 - self.estimated_device_total as i64
    }

    /// Share of the predicted device total that comes from the corrections: |correction| /
    /// calibrated device total (0 when the total is 0).
    pub fn share(&self) -> f64 {
        if self.device_total == 0 {
            return 0.0;
        }
        self.correction().unsigned_abs() as f64 / self.device_total as f64
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn add_signed(base: u64, add: i64) -> u64 {
    (base as i128 + add as i128).clamp(0, u64::MAX as i128) as u64
}

/// `bytes × num / den`, rounded up (a fit answer errs towards not fitting); exact integers, so
/// the measured job reproduces its measurement to the byte.
pub(crate) fn scale_up(bytes: u64, (num, den): (u64, u64)) -> u64 {
    if den == 0 {
        return bytes;
    }
    let v = (bytes as u128 * num as u128).div_ceil(den as u128);
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl Calibration {
    /// Learns the corrections: `estimated` is the estimate's components at the measured job,
    /// `measured` the analysis of the record of that job.
    pub fn learn(estimated: &Components, measured: &MeasuredPerGpu) -> Calibration {
        let m = &measured.components;
        let mut rules = Vec::new();
        for c in FIXED {
            let (e, v) = (estimated.get(c), m.get(c));
            rules.push(Rule {
                category: c.name(),
                estimated: e,
                measured: v,
                add: clamp_i64(v as i128 - e as i128),
                scale: 1.0,
                ratio: (1, 1),
                rule: "fixed",
            });
        }
        for c in SCALED {
            let (e, v) = (estimated.get(c), m.get(c));
            let (add, ratio, rule) = if e > 0 {
                (0, (v, e), "scaled")
            } else {
                (clamp_i64(v as i128), (1, 1), "fixed")
            };
            rules.push(Rule {
                category: c.name(),
                estimated: e,
                measured: v,
                add,
                scale: ratio.0 as f64 / ratio.1 as f64,
                ratio,
                rule,
            });
        }
        let activation_like: u64 = SCALED.iter().map(|&c| m.get(c)).sum();
        let (unattributed_ratio, fixed) = if activation_like > 0 {
            ((m.unattributed, activation_like), 0)
        } else {
            ((0, 1), m.unattributed)
        };
        let allocated = measured.peaks.peak_allocated.unwrap_or(0);
        let reserve = match measured.peaks.peak_reserved {
            Some(_) if allocated > 0 => Some((
                allocated.saturating_add(m.base.allocator_reserve),
                allocated,
            )),
            _ => None,
        };
        Calibration {
            rules,
            unattributed_per_activation_byte: unattributed_ratio.0 as f64
                / unattributed_ratio.1 as f64,
            unattributed_fixed: fixed,
            reserve_ratio: reserve.map(|(n, d)| n as f64 / d as f64),
            unattributed_ratio,
            reserve,
        }
    }

    /// The calibrated device total of a candidate whose estimate has these components.
    pub fn apply(&self, est: &Components) -> Calibrated {
        let mut allocated = 0u64;
        let mut activation_like = 0u64;
        for r in &self.rules {
            let c = FIXED
                .iter()
                .chain(SCALED.iter())
                .copied()
                .find(|c| c.name() == r.category)
                .unwrap_or(Category::Unattributed);
            let mut v = est.get(c);
            if r.rule == "scaled" {
                v = scale_up(v, r.ratio);
            }
            v = add_signed(v, r.add);
            if SCALED.contains(&c) {
                activation_like = activation_like.saturating_add(v);
            }
            allocated = allocated.saturating_add(v);
        }
        let unattributed = scale_up(activation_like, self.unattributed_ratio)
            .saturating_add(self.unattributed_fixed);
        allocated = allocated.saturating_add(unattributed);
        let allocator_reserve = match self.reserve {
            Some(k) => scale_up(allocated, k).saturating_sub(allocated),
            None => est.allocator_reserve,
        };
        let estimated_device_total = est
            .allocated()
            .saturating_add(est.allocator_reserve)
            .saturating_add(est.cuda_context);
        Calibrated {
            allocated,
            allocator_reserve,
            cuda_context: est.cuda_context,
            device_total: allocated
                .saturating_add(allocator_reserve)
                .saturating_add(est.cuda_context),
            estimated_device_total,
        }
    }
}

/// The calibrated fit answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibratedFit {
    /// The GPU (`gpu`, `capacity`).
    #[serde(flatten)]
    pub target: TargetGpu,
    pub calibration: Calibration,
    /// The measured job's batch and sequence (infer: prompt length).
    pub measured_batch: u64,
    pub measured_seq: u64,
    /// Largest micro-batch (infer: concurrent sequences) at the measured sequence.
    pub max_batch: Option<u64>,
    /// train: longest sequence at the measured batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<u64>,
    /// infer: longest context (prompt + generated) at the measured batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
    /// The prediction at `max_batch`: how much of it the calibration supplies.
    pub at_max_batch: Option<Calibrated>,
    /// The prediction at the longest sequence / context.
    pub at_max_seq: Option<Calibrated>,
    pub evaluations: u64,
    pub notes: Vec<String>,
}

const MAX_BATCH: u64 = 1 << 24;

/// The calibrated prediction for a candidate job; `None` when the estimator cannot size it.
fn predict(
    model: &ModelInput,
    job: &ResolvedJob,
    cal: &Calibration,
    evals: &mut u64,
) -> Result<Option<Calibrated>, CoreError> {
    *evals += 1;
    match estimate(model, job) {
        Ok(r) if r.per_gpu.peaks.device_total.is_some() => {
            Ok(Some(cal.apply(&r.per_gpu.components)))
        }
        Ok(_) => Ok(None),
        Err(CoreError::InvalidField { field, .. }) if field == "batch" || field == "seq" => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Why a record cannot calibrate a fit of this model and job, if it cannot.
fn check_calibratable(
    model: &ModelInput,
    job: &ResolvedJob,
    measured: &MeasuredPerGpu,
) -> Result<(), CoreError> {
    if model.spec.is_none() {
        return Err(CoreError::field(
            "model",
            "a calibrated fit needs the model's architecture (a bare parameter count has no \
             activations to scale)",
        ));
    }
    if matches!(job.framework, Framework::Vllm | Framework::LlamaCpp) {
        return Err(CoreError::field(
            "framework",
            "a calibrated fit reads PyTorch allocator records: vLLM and llama.cpp size their \
             own pools",
        ));
    }
    if measured.peaks.peak_allocated.unwrap_or(0) == 0 {
        return Err(CoreError::field(
            "measured",
            "the record holds no allocations to calibrate with",
        ));
    }
    Ok(())
}

/// The searches of a calibrated fit: candidates of one job, predicted with one calibration,
/// counted as they are evaluated.
struct Search<'a> {
    model: &'a ModelInput,
    job: &'a ResolvedJob,
    cal: &'a Calibration,
    /// Bytes the device total may reach: the GPU less the job's `reserve` (contract
    /// `reserve`).
    usable: u64,
    evals: u64,
}

impl Search<'_> {
    fn with_batch(&self, batch: u64) -> ResolvedJob {
        ResolvedJob {
            batch,
            ..self.job.clone()
        }
    }

    fn with_seq(&self, seq: u64) -> ResolvedJob {
        ResolvedJob {
            seq,
            ..self.job.clone()
        }
    }

    fn predict(&mut self, j: &ResolvedJob) -> Result<Option<Calibrated>, CoreError> {
        predict(self.model, j, self.cal, &mut self.evals)
    }

    fn fits(&mut self, j: &ResolvedJob) -> Result<bool, CoreError> {
        let usable = self.usable;
        Ok(self.predict(j)?.is_some_and(|c| c.device_total <= usable))
    }

    /// The prediction at a searched size, when the search found one.
    fn at(&mut self, j: Option<ResolvedJob>) -> Result<Option<Calibrated>, CoreError> {
        match j {
            Some(j) => self.predict(&j),
            None => Ok(None),
        }
    }
}

/// The longest sequence the search tries: the model's maximum position (infer: less the
/// generated tokens), else 2^22; and whether the model named its maximum.
fn seq_cap(model: &ModelInput, job: &ResolvedJob) -> (u64, bool) {
    let max_pos = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let cap = max_pos.unwrap_or(1 << 22).max(1);
    let cap = if job.task == Task::Infer {
        cap.saturating_sub(job.new_tokens).max(1)
    } else {
        cap
    };
    (cap, max_pos.is_some())
}

/// The job's GPU, which every fit needs: its catalog entry, or an error naming the field.
pub(crate) fn job_gpu(job: &ResolvedJob) -> Result<&'static Gpu, CoreError> {
    let id = job
        .gpu
        .as_deref()
        .ok_or_else(|| CoreError::field("gpu", "fit needs a GPU (e.g. --gpu a100-80gb)"))?;
    vramscope_core::gpu::find(id)
}

/// Learns the calibration from `measured` (a record of `job`) and searches the largest batch
/// and sequence (train) or batch and context (infer) whose calibrated device total fits the
/// job's GPU.
pub fn fit_calibrated(
    model: &ModelInput,
    job: &ResolvedJob,
    measured: &MeasuredPerGpu,
) -> Result<CalibratedFit, CoreError> {
    let gpu = job_gpu(job)?;
    check_calibratable(model, job, measured)?;
    let base = estimate(model, job)?;
    let cal = Calibration::learn(&base.per_gpu.components, measured);
    let mut s = Search {
        model,
        job,
        cal: &cal,
        usable: job.usable(gpu.memory_bytes),
        evals: 1,
    };
    let max_batch = largest(MAX_BATCH, |b| s.fits(&s.with_batch(b)))?;
    let (cap, model_max) = seq_cap(model, job);
    let best_seq = largest(cap, |q| s.fits(&s.with_seq(q)))?;
    let at_max_batch = s.at(max_batch.map(|b| s.with_batch(b)))?;
    let at_max_seq = s.at(best_seq.map(|q| s.with_seq(q)))?;
    let evaluations = s.evals;
    let infer = job.task == Task::Infer;
    Ok(CalibratedFit {
        target: TargetGpu::from(gpu),
        notes: fit_notes(best_seq == Some(cap) && model_max, cap, &cal, measured),
        calibration: cal,
        measured_batch: job.batch,
        measured_seq: job.seq,
        max_batch,
        max_seq: (!infer).then_some(best_seq).flatten(),
        max_context: if infer {
            best_seq.map(|s| s + job.new_tokens)
        } else {
            None
        },
        at_max_batch,
        at_max_seq,
        evaluations,
    })
}

/// What the answer should say about its limits.
fn fit_notes(
    stopped_at_cap: bool,
    cap: u64,
    cal: &Calibration,
    measured: &MeasuredPerGpu,
) -> Vec<String> {
    let mut notes = Vec::new();
    if stopped_at_cap {
        notes.push(format!(
            "the sequence search stopped at the model's maximum of {cap} positions"
        ));
    }
    if cal.reserve_ratio.is_none() {
        notes.push(
            "the record has no allocator segments: the allocator reserve is the estimate's".into(),
        );
    }
    if measured.components.unattributed > 0 {
        notes.push("unattributed measured bytes are assumed to grow with the activations".into());
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{MeasuredComponents, PeakFigures};
    use vramscope_core::report::ModelStates;

    fn measured(c: Components, unattributed: u64, reserved: Option<u64>) -> MeasuredPerGpu {
        let alloc = c.allocated() + unattributed;
        MeasuredPerGpu {
            components: MeasuredComponents {
                base: c,
                unattributed,
                before_recording: 0,
            },
            model_states: ModelStates::default(),
            peaks: PeakFigures {
                peak_allocated: Some(alloc),
                peak_reserved: reserved,
                ..Default::default()
            },
        }
    }

    /// Estimate at the measured job: params 1000, grads 1000, states 2000, activations 400,
    /// temporaries 100, reserve 300, context 500.
    fn est() -> Components {
        Components {
            parameters: 1000,
            gradients: 1000,
            optimizer_states: 2000,
            activations: 400,
            temporaries: 100,
            allocator_reserve: 300,
            cuda_context: 500,
            ..Components::default()
        }
    }

    /// Measured at the same job: params and grads as estimated, states 2008 (+8: AdamW's
    /// per-tensor step counters), activations 600 (×1.5), temporaries 50 (×0.5); no reserve.
    fn measured_components() -> Components {
        Components {
            parameters: 1000,
            gradients: 1000,
            optimizer_states: 2008,
            activations: 600,
            temporaries: 50,
            ..Components::default()
        }
    }

    #[test]
    fn learns_fixed_and_scaled_rules() {
        // Measured (`measured_components`), unattributed 65; reserve 1/4 of allocated.
        let m_comp = Components {
            allocator_reserve: 1180,
            ..measured_components()
        };
        // allocated = 1000 + 1000 + 2008 + 600 + 50 + 65 = 4723; reserve field set to 1180.
        let cal = Calibration::learn(&est(), &measured(m_comp, 65, Some(5903)));
        let rule = |n: &str| cal.rules.iter().find(|r| r.category == n).unwrap().clone();
        assert_eq!(rule("optimizer_states").add, 8);
        assert_eq!(rule("parameters").add, 0);
        assert_eq!(rule("activations").scale, 1.5);
        assert_eq!(rule("temporaries").scale, 0.5);
        // KV cache: neither side has any: fixed, +0.
        assert_eq!(rule("kv_cache").rule, "fixed");
        assert_eq!(rule("kv_cache").add, 0);
        // 65 unattributed per 650 activation-like bytes = 0.1.
        assert!((cal.unattributed_per_activation_byte - 0.1).abs() < 1e-12);
        // (4723 + 1180) / 4723.
        assert!((cal.reserve_ratio.unwrap() - 5903.0 / 4723.0).abs() < 1e-12);

        // At the measured job the calibration reproduces the measurement.
        let at = cal.apply(&est());
        assert_eq!(at.allocated, 4723);
        assert_eq!(at.allocator_reserve, 1180);
        assert_eq!(at.device_total, 4723 + 1180 + 500);
        assert_eq!(at.estimated_device_total, 4500 + 300 + 500);
    }

    #[test]
    fn applies_to_a_larger_batch() {
        // Measured as above but without segments (a profiler timeline): reserve stays the
        // estimate's.
        let cal = Calibration::learn(&est(), &measured(measured_components(), 0, None));
        assert_eq!(cal.reserve_ratio, None);
        // Candidate at 4× the batch: activations 1600, temporaries 400, reserve 700.
        let cand = Components {
            activations: 1600,
            temporaries: 400,
            allocator_reserve: 700,
            ..est()
        };
        let c = cal.apply(&cand);
        // 1000 + 1000 + (2000 + 8) + 1600×1.5 + 400×0.5 = 6608.
        assert_eq!(c.allocated, 6608);
        assert_eq!(c.allocator_reserve, 700);
        assert_eq!(c.device_total, 6608 + 700 + 500);
        // Estimator alone: 1000 + 1000 + 2000 + 1600 + 400 + 700 + 500 = 7200.
        assert_eq!(c.estimated_device_total, 7200);
        assert_eq!(c.correction(), 608);
        assert!((c.share() - 608.0 / 7808.0).abs() < 1e-12);
    }

    #[test]
    fn category_missing_from_the_estimate_is_a_fixed_residual() {
        let e = Components {
            parameters: 100,
            ..Components::default()
        };
        let m = Components {
            parameters: 100,
            temporaries: 40,
            ..Components::default()
        };
        let cal = Calibration::learn(&e, &measured(m, 10, None));
        // No activation-like bytes in the estimate: temporaries become +40 fixed; the
        // unattributed 10 scale with the (calibrated) 40 activation-like bytes: 0.25 each.
        let c = cal.apply(&Components {
            parameters: 100,
            ..Components::default()
        });
        assert_eq!(c.allocated, 100 + 40 + 10);
        // Negative residuals never take a category below zero.
        let cal = Calibration::learn(
            &Components {
                parameters: 500,
                ..Components::default()
            },
            &measured(
                Components {
                    parameters: 100,
                    ..Components::default()
                },
                0,
                None,
            ),
        );
        assert_eq!(cal.apply(&Components::default()).allocated, 0);
    }

    #[test]
    fn search_finds_the_largest_monotone_value() {
        // Fits while x ≤ 37.
        assert_eq!(largest(1 << 20, |x| Ok(x <= 37)).unwrap(), Some(37));
        assert_eq!(largest(10, |x| Ok(x <= 37)).unwrap(), Some(10));
        assert_eq!(largest(10, |_| Ok(false)).unwrap(), None);
        assert_eq!(largest(1, |_| Ok(true)).unwrap(), Some(1));
    }
}
