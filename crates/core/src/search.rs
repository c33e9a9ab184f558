//! The one search every fit runs: the largest value that still fits, for a monotone test.
//! Used by the fit searches (`fit`, `fit_engines`, `fit_vision`, `diffusion::fit`) and by
//! `estimate::engines` (the longest request a KV pool holds).

use crate::error::CoreError;

/// Largest `x` in [1, hi] with `fits(x)`, assuming fitting is monotone (more never fits
/// when less does not); `None` when 1 does not fit. Exponential then binary search.
pub fn largest(
    hi: u64,
    mut fits: impl FnMut(u64) -> Result<bool, CoreError>,
) -> Result<Option<u64>, CoreError> {
    if !fits(1)? {
        return Ok(None);
    }
    let mut lo = 1u64;
    let mut step = 1u64;
    let mut up = loop {
        let probe = lo.saturating_add(step).min(hi);
        if probe == lo {
            return Ok(Some(lo));
        }
        if fits(probe)? {
            lo = probe;
            if probe == hi {
                return Ok(Some(hi));
            }
            step = step.saturating_mul(2);
        } else {
            break probe;
        }
    };
    while up - lo > 1 {
        let mid = lo + (up - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            up = mid;
        }
    }
    Ok(Some(lo))
}
