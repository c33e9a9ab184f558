//! `compare`: the estimate of a job and a measurement of it side by side, per category, with
//! the difference in peak allocated bytes explained as far as the record allows.

use super::analyze::completed;
use super::job::prepare;
use super::{AppError, Session};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vramscope_core::job::Job;
use vramscope_core::report::{Category, PerGpu, Report};
use vramscope_measure::logs::{LogPerGpu, LogReport, Measured};
use vramscope_measure::{Analysis, MeasuredPerGpu};

/// `compare`'s input: the job that was measured and the measurement's path (as for `analyze`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareInput {
    #[serde(deserialize_with = "super::job::with_from")]
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

/// The measured side: a PyTorch record's per-GPU figures, or an engine log's (only what the
/// log states; `source` in the comparison says which log).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum MeasuredSide {
    Record(MeasuredPerGpu),
    Log(LogPerGpu),
}

impl MeasuredSide {
    pub fn peak_allocated(&self) -> Option<u64> {
        match self {
            MeasuredSide::Record(m) => m.peaks.peak_allocated,
            MeasuredSide::Log(l) => l.peaks.peak_allocated,
        }
    }
}

/// What `compare --job JOB FILE --json` prints and `/api/compare` answers.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// For an engine log: what was read (`vllm-log`, `llamacpp-log`, `ollama-log`, `torch-oom`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    pub estimate: PerGpu,
    pub measured: MeasuredSide,
    pub rows: Vec<Row>,
    pub residual: Residual,
    pub warnings: Vec<String>,
}

/// `compare` of a job and a measurement file.
pub fn compare(session: &Session, input: &CompareInput) -> Result<Comparison, AppError> {
    let p = prepare(session, &input.job)?;
    let report = p.report()?;
    let measured = super::analyze::read_path(&input.path)?;
    Ok(either(report, completed(measured, Some(&p))))
}

/// `compare` of a job and a measurement already in memory; `name` is what errors call it
/// (`measurement` when none is given).
pub fn compare_bytes(
    session: &Session,
    job: &Job,
    bytes: &[u8],
    name: Option<&str>,
) -> Result<Comparison, AppError> {
    let p = prepare(session, job)?;
    let report = p.report()?;
    let measured = super::analyze::read_bytes(bytes, name)?;
    Ok(either(report, completed(measured, Some(&p))))
}

fn either(report: Report, measured: Measured) -> Comparison {
    match measured {
        Measured::Record(a) => side_by_side(report, *a),
        Measured::Log(l) => log_side_by_side(report, *l),
    }
}

/// An engine log beside the estimate: one row per category the log states (weights, KV
/// cache, compute buffers or the profiled activation peak, non-torch memory), and the KV
/// pool of an engine that preallocates one.
fn log_side_by_side(report: Report, log: LogReport) -> Comparison {
    let (e, m) = (&report.per_gpu, &log.per_gpu);
    let c = &m.components;
    let stated = [
        (Category::Parameters, c.parameters),
        (Category::Activations, c.activations),
        (Category::KvCache, c.kv_cache),
        (Category::Temporaries, c.temporaries),
        (Category::CudaContext, c.cuda_context),
    ];
    let mut rows: Vec<Row> = stated
        .iter()
        .filter_map(|&(cat, v)| {
            let v = v?;
            let est = e.components.get(cat);
            Some(Row {
                category: cat.name().to_string(),
                estimated: est,
                measured: v,
                difference: diff(v, est),
            })
        })
        .collect();
    if let (Some(est), Some(v)) = (e.kv_pool, m.kv_pool) {
        rows.push(Row {
            category: "kv_pool".into(),
            estimated: est,
            measured: v,
            difference: diff(v, est),
        });
    }
    let residual = Residual {
        peak_allocated_difference: match (m.peaks.peak_allocated, e.peaks.peak_allocated) {
            (Some(a), Some(b)) => Some(diff(a, b)),
            _ => None,
        },
        unattributed: 0,
        allocator_reserve_estimated: e.components.allocator_reserve,
        allocator_reserve_measured: None,
        cuda_context_not_measured: if c.cuda_context.is_some() {
            0
        } else {
            e.components.cuda_context
        },
    };
    let mut warnings = report.warnings;
    warnings.push(format!(
        "compared with a {}: only the figures the log states have rows",
        log.source.name()
    ));
    let (jf, lf) = (
        report.job.framework.as_str(),
        log.job.get("framework").and_then(|v| v.as_str()),
    );
    if let Some(lf) = lf.filter(|lf| *lf != jf) {
        warnings.push(format!(
            "the log is {lf}'s but the job's framework is {jf}: the categories compare, the \
             engines' rules differ"
        ));
    }
    warnings.extend(log.warnings);
    Comparison {
        source: Some(log.source.name()),
        estimate: report.per_gpu,
        measured: MeasuredSide::Log(log.per_gpu),
        rows,
        residual,
        warnings,
    }
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
        peak_allocated_difference: match (m.peaks.peak_allocated, e.peaks.peak_allocated) {
            (Some(a), Some(b)) => Some(diff(a, b)),
            _ => None,
        },
        unattributed: m.components.unattributed,
        allocator_reserve_estimated: e.components.allocator_reserve,
        allocator_reserve_measured: m
            .peaks
            .peak_reserved
            .map(|_| m.components.base.allocator_reserve),
        cuda_context_not_measured: e.components.cuda_context,
    };
    let mut warnings = report.warnings;
    warnings.extend(measured.warnings);
    Comparison {
        source: None,
        estimate: report.per_gpu,
        measured: MeasuredSide::Record(measured.per_gpu),
        rows,
        residual,
        warnings,
    }
}
