//! `fit` for a diffusion pipeline: the largest square resolution (a multiple of the VAE scale ×
//! the denoiser's patch) at the job's batch, and the largest batch at the job's resolution,
//! whose `device_total` leaves the job's `reserve` free on the GPU. The device total grows with
//! both, so each limit is a binary search over the estimator.

use super::estimate::estimate;
use super::job::{side_step, Resolved, MAX_BATCH, MAX_SIDE};
use super::Pipeline;
use crate::report::TargetGpu;
use serde::Serialize;

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffusionFit {
    /// The GPU (`gpu`, `capacity`).
    #[serde(flatten)]
    pub target: TargetGpu,
    /// Largest number of images at the job's width × height (`null`: not even one).
    pub max_batch: Option<u64>,
    /// Largest square side in pixels at the job's batch (`null`: not even one step).
    pub max_resolution: Option<u64>,
    /// The pixel step sides move by.
    pub side_step: u64,
    pub notes: Vec<String>,
}

fn fits(p: &Pipeline, name: &str, j: &Resolved) -> Result<bool, String> {
    Ok(estimate(p, name, j)?.fit.is_some_and(|f| f.fits))
}

/// Largest `k` in 1..=`hi` with `ok(k)` (monotone), `None` when `ok(1)` fails.
fn largest(
    hi: u64,
    mut ok: impl FnMut(u64) -> Result<bool, String>,
) -> Result<Option<u64>, String> {
    if hi == 0 || !ok(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(Some(lo))
}

/// The limits of job `j` (which must name a GPU) on pipeline `p`.
pub fn fit(p: &Pipeline, name: &str, j: &Resolved) -> Result<DiffusionFit, String> {
    let id = j
        .gpu
        .as_deref()
        .ok_or("gpu: fit needs a GPU (give --gpu ID)")?;
    let gpu = crate::gpu::find(id).map_err(|e| format!("gpu: {e}"))?;
    let step = side_step(p).ok_or("model: the pipeline has no denoiser or no VAE")?;
    let max_batch = largest(MAX_BATCH, |b| {
        fits(
            p,
            name,
            &Resolved {
                batch: b,
                ..j.clone()
            },
        )
    })?;
    let max_k = largest(MAX_SIDE / step, |k| {
        let s = k * step;
        fits(
            p,
            name,
            &Resolved {
                width: s,
                height: s,
                ..j.clone()
            },
        )
    })?;
    let mut notes = Vec::new();
    if max_batch == Some(MAX_BATCH) {
        notes.push(format!("max_batch: the search stops at {MAX_BATCH}"));
    }
    if max_k == Some(MAX_SIDE / step) {
        notes.push(format!("max_resolution: the search stops at {MAX_SIDE} px"));
    }
    Ok(DiffusionFit {
        target: TargetGpu::from(gpu),
        max_batch,
        max_resolution: max_k.map(|k| k * step),
        side_step: step,
        notes,
    })
}
