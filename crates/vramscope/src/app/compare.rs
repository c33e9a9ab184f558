//! `compare`: the estimate of a job and a measurement of it side by side, per category, with
//! the difference in peak allocated bytes explained as far as the record allows.

use super::job::estimate_job;
use super::AppError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vramscope_core::job::Job;
use vramscope_core::report::{Category, PerGpu, Report};
use vramscope_measure::{Analysis, MeasuredPerGpu};

/// `compare`'s input: the job that was measured and the measurement's path (as for `analyze`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareInput {
    pub job: Job,
    pub path: PathBuf,
}

/// One category: estimated, measured, and measured − estimated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub category: String,
    pub estimated: u64,
    pub measured: u64,
    pub difference: i64,
}

/// What the rows leave unexplained.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Residual {
    /// measured − estimated peak allocated.
    pub peak_allocated_difference: Option<i64>,
    /// Measured bytes no rule could attribute: part of the difference may sit here.
    pub unattributed: u64,
    /// Reserved but unallocated at the peak, estimated vs measured (null when the record has
    /// no segments).
    pub allocator_reserve_estimated: u64,
    pub allocator_reserve_measured: Option<u64>,
    /// The CUDA context and non-PyTorch memory: in the estimate, invisible to the allocator's
    /// record (add it to compare with nvidia-smi).
    pub cuda_context_not_measured: u64,
}

/// What `compare --job JOB FILE --json` prints and `/api/compare` answers.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub estimate: PerGpu,
    pub measured: MeasuredPerGpu,
    pub rows: Vec<Row>,
    pub residual: Residual,
    pub warnings: Vec<String>,
}

/// `compare` of a job and a measurement file.
pub fn compare(input: &CompareInput) -> Result<Comparison, AppError> {
    let report = estimate_job(&input.job)?;
    let measured = super::analyze::record(&input.path)?;
    Ok(side_by_side(report, measured))
}

/// `compare` of a job and a measurement already in memory; `name` is what errors call it
/// (`measurement` when none is given).
pub fn compare_bytes(job: &Job, bytes: &[u8], name: Option<&str>) -> Result<Comparison, AppError> {
    let report = estimate_job(job)?;
    let measured = super::analyze::record_bytes(bytes, name)?;
    Ok(side_by_side(report, measured))
}

/// measured − estimated, saturated to the i64 range.
fn diff(m: u64, e: u64) -> i64 {
    (m as i128 - e as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The rows, the residual and both sides' warnings.
fn side_by_side(report: Report, measured: Analysis) -> Comparison {
    let (e, m) = (&report.per_gpu, &measured.per_gpu);
    let mut rows: Vec<Row> = Category::ALLOCATED
        .iter()
        .map(|&c| Row {
            category: c.name().to_string(),
            estimated: e.components.get(c),
            measured: m.components.get(c),
            difference: diff(m.components.get(c), e.components.get(c)),
        })
        .collect();
    rows.push(Row {
        category: Category::Unattributed.name().to_string(),
        estimated: 0,
        measured: m.components.unattributed,
        difference: diff(m.components.unattributed, 0),
    });
    let residual = Residual {
        peak_allocated_difference: match (m.peak_allocated, e.peak_allocated) {
            (Some(a), Some(b)) => Some(diff(a, b)),
            _ => None,
        },
        unattributed: m.components.unattributed,
        allocator_reserve_estimated: e.components.allocator_reserve,
        allocator_reserve_measured: m.peak_reserved.map(|_| m.components.base.allocator_reserve),
        cuda_context_not_measured: e.components.cuda_context,
    };
    let mut warnings = report.warnings;
    warnings.extend(measured.warnings);
    Comparison {
        estimate: report.per_gpu,
        measured: measured.per_gpu,
        rows,
        residual,
        warnings,
    }
}
