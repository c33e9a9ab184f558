//! llama.cpp's `-ngl` trade-off for `fit`: the decode and prefill speed at each choice of
//! layers on the GPU, from the one function the estimate's `throughput` comes from
//! (`throughput::infer::split`), so a row here and `estimate` at the same `-ngl` agree.

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::{ResolvedJob, Task};
pub use crate::report::LayersSpeed;
use crate::report::Throughput;

/// Rows per trade-off at most: the most layers that fit, then eighths of it down to 0.
const ROWS: u64 = 8;

/// The `-ngl` choices `fit` shows: `max` (the most that fit), then `max · k / 8` for k = 7..0,
/// each once, most layers first.
pub fn choices(max: u64) -> Vec<u64> {
    let mut out: Vec<u64> = (0..=ROWS).rev().map(|k| max * k / ROWS).collect();
    out.dedup();
    out
}

/// The trade-off of a llama.cpp or ollama inference job at its batch and context: one row per
/// [`choices`] of `max_gpu_layers`; empty for other jobs or without a modelled throughput.
pub fn gpu_layers_speed(
    model: &ModelInput,
    job: &ResolvedJob,
    max_gpu_layers: Option<u64>,
) -> Result<Vec<LayersSpeed>, CoreError> {
    let (Some(max), Task::Infer) = (max_gpu_layers, job.task) else {
        return Ok(Vec::new());
    };
    if crate::engines::settings::spec(job.framework).is_none_or(|e| e.layers_flag().is_none()) {
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    for ngl in choices(max) {
        let mut j = job.clone();
        j.set_engine("n_gpu_layers", ngl.into())?;
        let r = estimate(model, &j)?;
        let Some(Throughput::Infer(t)) = &r.throughput else {
            return Ok(Vec::new());
        };
        rows.push(LayersSpeed {
            n_gpu_layers: ngl,
            decode_tokens_per_s: t.decode_tokens_per_s,
            prefill_tokens_per_s: t.prefill_tokens_per_s,
            generate_s: t.generate_s,
            host_bytes: crate::advice::host_bytes(&r).unwrap_or(0),
            fits: r.fit.as_ref().is_some_and(|f| f.fits),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::choices;

    /// 81 layers fit: 81, then ⌊81·k/8⌋ = 70, 60, 50, 40, 30, 20, 10, 0.
    #[test]
    fn choices_step_down_by_eighths() {
        assert_eq!(choices(81), vec![81, 70, 60, 50, 40, 30, 20, 10, 0]);
        // Fewer layers than rows: each once.
        assert_eq!(choices(3), vec![3, 2, 1, 0]);
        assert_eq!(choices(0), vec![0]);
    }
}
