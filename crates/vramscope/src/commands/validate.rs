//! `vramscope validate FILE`: the validation cases scored by `app::validate`, as a table or as
//! JSON.

use super::CmdResult;
use crate::app::validate::{CaseResult, Status, Summary};
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, short_count};
use anstyle::{AnsiColor, Color, Style};
use std::path::Path;

const PASS: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Green)));
const FAIL: Style = Style::new()
    .bold()
    .fg_color(Some(Color::Ansi(AnsiColor::Red)));

/// Exit 1 when a case is outside its tolerance or did not run (unless `report_only`), 0 when
/// every case passed; 2 when the file cannot be read.
pub fn run(
    s: &crate::app::Session,
    file: &Path,
    json: bool,
    tolerance_only: bool,
    report_only: bool,
) -> CmdResult {
    let v = crate::app::validate(
        s,
        &crate::app::ValidateInput {
            cases: file.to_path_buf(),
        },
    )?;
    if json {
        print_json(&v)?;
    } else {
        let mut out = table(&v.cases, tolerance_only);
        if tolerance_only && v.summary.failed + v.summary.errored == 0 {
            out.push_str(&paint(DIM, "(every case within its tolerance)\n"));
        }
        out.push('\n');
        out.push_str(&summary_lines(&v.summary));
        print(&out)?;
    }
    let failed = v.summary.failed + v.summary.errored > 0;
    Ok(if failed && !report_only { 1 } else { 0 })
}

/// One row per case (only those outside their tolerance with `tolerance_only`).
fn table(results: &[CaseResult], tolerance_only: bool) -> String {
    let idw = results
        .iter()
        .map(|r| r.id.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    let mw = results
        .iter()
        .map(|r| short_metric(&r.metric).chars().count())
        .max()
        .unwrap_or(6)
        .clamp(6, 28);
    let mut out = String::new();
    let header = format!(
        "{:<idw$}  {:<mw$}  {:>11}  {:>11}  {:>9}  {:>5}  result",
        "case", "metric", "expected", "got", "error", "tol"
    );
    out.push_str(&paint(BOLD, &header));
    out.push('\n');
    out.push_str(&"─".repeat(header.chars().count()));
    out.push('\n');
    for r in results {
        if tolerance_only && r.status == Status::Pass {
            continue;
        }
        out.push_str(&format!(
            "{:<idw$}  {:<mw$}  {:>11}  {:>11}  {:>9}  {:>4}%  {}\n",
            r.id,
            short_metric(&r.metric),
            show(&r.metric, r.expected),
            r.got.map_or_else(|| "-".into(), |g| show(&r.metric, g)),
            r.error.map_or_else(|| "-".into(), pct),
            format!("{}", r.tolerance * 100.0),
            result_cell(r),
        ));
    }
    out
}

fn result_cell(r: &CaseResult) -> String {
    match r.status {
        Status::Pass => paint(PASS, "pass") + &netted_marker(r),
        Status::Fail => paint(FAIL, "FAIL") + &netted_marker(r),
        Status::Error => format!(
            "{}  {}",
            paint(FAIL, "ERROR"),
            r.message.as_deref().unwrap_or("")
        ),
    }
}

/// The marker of a case compared net of the BLAS workspaces (measured on the CPU): `got` is
/// the estimate less them.
fn netted_marker(r: &CaseResult) -> String {
    r.netted.map_or_else(String::new, |ws| {
        paint(
            DIM,
            &format!("  (cpu: net of {} BLAS workspaces)", bytes(ws)),
        )
    })
}

/// The summary in the plain form scripts look for: "N passed, M failed[, K errored]", then the
/// median and worst |error|.
fn summary_lines(summary: &Summary) -> String {
    let mut out = format!("{} passed, {} failed", summary.passed, summary.failed);
    if summary.errored > 0 {
        out.push_str(&format!(", {} errored", summary.errored));
    }
    out.push('\n');
    let ran = summary.passed + summary.failed;
    match (
        summary.median_abs_error,
        summary.worst_abs_error,
        &summary.worst_case,
    ) {
        (Some(m), Some(w), Some(id)) => out.push_str(&format!(
            "median |error| {:.1}%, worst {:.1}% ({id}), over {ran} of {} cases that ran\n",
            m * 100.0,
            w * 100.0,
            summary.cases
        )),
        _ => out.push_str(&format!(
            "median |error| n/a: none of {} cases ran\n",
            summary.cases
        )),
    }
    out
}

/// A short name for the table: the last part of each path; the four model states as one.
fn short_metric(metric: &str) -> String {
    match metric.strip_prefix("sum:") {
        Some(paths) => {
            let parts: Vec<&str> = paths.split('+').map(str::trim).collect();
            if parts.iter().all(|p| p.starts_with("per_gpu.model_states.")) && parts.len() == 4 {
                "model_states (sum)".into()
            } else {
                parts
                    .iter()
                    .map(|p| p.rsplit('.').next().unwrap_or(p))
                    .collect::<Vec<_>>()
                    .join("+")
            }
        }
        None => metric.rsplit('.').next().unwrap_or(metric).to_string(),
    }
}

fn show(metric: &str, v: f64) -> String {
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return format!("{v}");
    }
    if metric.ends_with("params_total") || metric.ends_with("params_trainable") {
        short_count(v.round() as u64)
    } else {
        bytes(v.round() as u64)
    }
}

fn pct(e: f64) -> String {
    if e != 0.0 && e.abs() < 1e-4 {
        format!("{:+.1e}%", e * 100.0)
    } else {
        format!("{:+.2}%", e * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_metric_names() {
        assert_eq!(short_metric("sum:per_gpu.model_states.parameters+per_gpu.model_states.gradients+per_gpu.model_states.optimizer_states+per_gpu.model_states.master_weights"), "model_states (sum)");
        assert_eq!(short_metric("per_gpu.components.kv_cache"), "kv_cache");
    }
}
