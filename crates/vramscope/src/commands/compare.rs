//! `vramscope compare --job JOB FILE`: the estimate and a measurement side by side, per
//! category, with the difference in peak allocated bytes explained as far as the record allows.

use super::CmdResult;
use crate::output::{paint, print, print_json, warning_line, BOLD, HEADER};
use crate::units::bytes;
use serde::Serialize;
use std::path::Path;
use vramscope_core::report::Category;

#[derive(Serialize)]
struct Row {
    category: &'static str,
    estimated: u64,
    measured: u64,
    difference: i64,
}

#[derive(Serialize)]
struct Residual {
    /// measured − estimated peak allocated.
    peak_allocated_difference: Option<i64>,
    /// Measured bytes no rule could attribute: part of the difference may sit here.
    unattributed: u64,
    /// Reserved but unallocated at the peak, estimated vs measured (null when the record has
    /// no segments).
    allocator_reserve_estimated: u64,
    allocator_reserve_measured: Option<u64>,
    /// The CUDA context and non-PyTorch memory: in the estimate, invisible to the allocator's
    /// record (add it to compare with nvidia-smi).
    cuda_context_not_measured: u64,
}

#[derive(Serialize)]
struct Comparison<'a> {
    estimate: &'a vramscope_core::report::PerGpu,
    measured: &'a vramscope_measure::MeasuredPerGpu,
    rows: Vec<Row>,
    residual: Residual,
    warnings: Vec<String>,
}

fn diff(m: u64, e: u64) -> i64 {
    (m as i128 - e as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

pub fn run(job_path: &Path, file: &Path, json: bool) -> CmdResult {
    let job = super::jobargs::read_job_file(job_path)?;
    let report = super::estimate::estimate_job(&job)?;
    let measured = super::analyze::load(file)?;
    let e = &report.per_gpu;
    let m = &measured.per_gpu;
    let mut rows: Vec<Row> = Category::ALLOCATED
        .iter()
        .map(|&c| Row {
            category: c.name(),
            estimated: e.components.get(c),
            measured: m.components.get(c),
            difference: diff(m.components.get(c), e.components.get(c)),
        })
        .collect();
    rows.push(Row {
        category: Category::Unattributed.name(),
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
    let mut warnings = report.warnings.clone();
    warnings.extend(measured.warnings.iter().cloned());
    let cmp = Comparison {
        estimate: e,
        measured: m,
        rows,
        residual,
        warnings,
    };
    if json {
        print_json(&cmp)?;
    } else {
        print(&render(&cmp, file))?;
    }
    Ok(0)
}

fn signed(v: i64) -> String {
    if v < 0 {
        format!("−{}", bytes(v.unsigned_abs()))
    } else {
        format!("+{}", bytes(v as u64))
    }
}

fn render(c: &Comparison, file: &Path) -> String {
    let mut s = format!(
        "{} estimate vs {}\n\n  {:<18} {:>12} {:>12} {:>13}\n",
        paint(HEADER, "Compare:"),
        file.display(),
        "at the peak",
        "estimated",
        "measured",
        "measured−est"
    );
    for r in &c.rows {
        if r.estimated == 0 && r.measured == 0 {
            continue;
        }
        s.push_str(&format!(
            "  {:<18} {:>12} {:>12} {:>13}\n",
            r.category,
            bytes(r.estimated),
            bytes(r.measured),
            signed(r.difference)
        ));
    }
    let (ea, ma) = (c.estimate.peak_allocated, c.measured.peak_allocated);
    s.push_str(&format!(
        "  {:<18} {:>12} {:>12} {:>13}\n\n",
        paint(BOLD, "peak allocated"),
        ea.map(bytes).unwrap_or_else(|| "?".into()),
        ma.map(bytes).unwrap_or_else(|| "?".into()),
        c.residual
            .peak_allocated_difference
            .map(signed)
            .unwrap_or_default()
    ));
    s.push_str(&paint(HEADER, "The residual:"));
    s.push('\n');
    s.push_str(&format!(
        "  unattributed in the record: {}\n",
        bytes(c.residual.unattributed)
    ));
    s.push_str(&format!(
        "  allocator reserve: estimated {}, measured {}\n",
        bytes(c.residual.allocator_reserve_estimated),
        c.residual
            .allocator_reserve_measured
            .map(bytes)
            .unwrap_or_else(|| "unknown (no allocator segments in the record)".into())
    ));
    s.push_str(&format!(
        "  CUDA context and non-PyTorch memory: estimated {}, not in the record \
         (nvidia-smi shows it)\n",
        bytes(c.residual.cuda_context_not_measured)
    ));
    if !c.warnings.is_empty() {
        s.push('\n');
        for w in &c.warnings {
            s.push_str(&warning_line(w));
        }
    }
    s
}
