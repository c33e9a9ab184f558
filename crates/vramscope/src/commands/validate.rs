//! `vramscope validate FILE`: runs every case of a validation file (the format of
//! `../shared/validation/README.md`) through the estimator in-process and compares the case's
//! metric with the published figure, by the same rules as `../shared/validation/score.py`.

use super::estimate::estimate_job;
use super::jobargs::JobError;
use super::CmdResult;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, short_count};
use anstyle::{AnsiColor, Color, Style};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use vramscope_core::job::Job;

/// Case files hold a few hundred cases of a few KiB each; refuse anything far larger unread.
const MAX_CASES_BYTES: u64 = 64 << 20;

const PASS: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Green)));
const FAIL: Style = Style::new()
    .bold()
    .fg_color(Some(Color::Ansi(AnsiColor::Red)));

/// One case as read from the file.
struct Case {
    id: String,
    job: Value,
    metric: String,
    expected: f64,
    tolerance: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Pass,
    Fail,
    Error,
}

/// One case's outcome (`validate --json` lists these).
#[derive(Debug, Serialize)]
struct CaseResult {
    id: String,
    metric: String,
    expected: f64,
    got: Option<f64>,
    /// (got − expected) / expected.
    error: Option<f64>,
    tolerance: f64,
    status: Status,
    /// Why the case did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Serialize)]
struct Summary {
    cases: usize,
    passed: usize,
    failed: usize,
    errored: usize,
    /// Median |error| over the cases that ran.
    median_abs_error: Option<f64>,
    worst_abs_error: Option<f64>,
    worst_case: Option<String>,
}

#[derive(Serialize)]
struct Output<'a> {
    file: String,
    cases: &'a [CaseResult],
    summary: &'a Summary,
}

fn read_cases(path: &Path) -> Result<Vec<Case>, JobError> {
    let shown = path.display().to_string();
    let err = |m: String| JobError(format!("{shown}: {m}"));
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.is_dir() {
        return Err(err("is a directory, not a cases file".into()));
    }
    if meta.len() > MAX_CASES_BYTES {
        return Err(err(format!(
            "{} bytes is too large for a cases file (limit {MAX_CASES_BYTES})",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| err(format!("invalid JSON: {e}")))?;
    let Value::Array(list) = v else {
        return Err(err("expected a JSON list of cases".into()));
    };
    let mut cases = Vec::with_capacity(list.len());
    for (i, c) in list.into_iter().enumerate() {
        let Value::Object(mut o) = c else {
            return Err(err(format!("case {} is not an object", i + 1)));
        };
        let id = match o.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => format!("#{}", i + 1),
        };
        let lacks = |k: &str| err(format!("case {id} lacks '{k}'"));
        let job = o.remove("job").ok_or_else(|| lacks("job"))?;
        let job = vramscope_core::job::merge_if_supported(&job, o.get("job_if_supported"));
        let metric = match o.get("metric") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(err(format!("case {id}: 'metric' must be a string"))),
            None => return Err(lacks("metric")),
        };
        let number = |k: &str| -> Result<f64, JobError> {
            match o.get(k) {
                None | Some(Value::Null) => Err(lacks(k)),
                Some(v) => v
                    .as_f64()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| err(format!("case {id}: '{k}' must be a number (got {v})"))),
            }
        };
        let expected = number("expected_bytes")?;
        let tolerance = number("tolerance")?;
        if tolerance < 0.0 {
            return Err(err(format!("case {id}: 'tolerance' must not be negative")));
        }
        if !o.contains_key("id") {
            return Err(lacks("id"));
        }
        cases.push(Case {
            id,
            job,
            metric,
            expected,
            tolerance,
        });
    }
    Ok(cases)
}

/// The number at a dotted path of the report; missing, null or non-numeric is an error.
fn lookup(report: &Value, dotted: &str) -> Result<f64, String> {
    let mut node = report;
    for part in dotted.split('.') {
        node = node
            .as_object()
            .and_then(|o| o.get(part))
            .ok_or_else(|| format!("missing {dotted}"))?;
    }
    match node {
        Value::Null => Err(format!("null {dotted}")),
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("not a number at {dotted}")),
        other => {
            let mut s = other.to_string();
            s.truncate(40);
            Err(format!("not a number at {dotted}: {s}"))
        }
    }
}

/// The metric's value: a dotted path, or `sum:` of `+`-separated dotted paths.
fn metric_value(report: &Value, metric: &str) -> Result<f64, String> {
    match metric.strip_prefix("sum:") {
        Some(paths) => paths.split('+').map(|p| lookup(report, p.trim())).sum(),
        None => lookup(report, metric.trim()),
    }
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

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn run_case(c: &Case) -> CaseResult {
    let outcome = (|| -> Result<f64, String> {
        if c.expected == 0.0 {
            return Err("expected_bytes is 0: no relative error".into());
        }
        let job: Job =
            serde_json::from_value(c.job.clone()).map_err(|e| format!("invalid job: {e}"))?;
        // A panic is a bug in the estimator; one case's bug must not hide the other results.
        let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| estimate_job(&job)))
            .map_err(|p| format!("estimator panicked: {}", panic_text(p.as_ref())))?
            .map_err(|e| e.to_string().replace('\n', " "))?;
        let v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        metric_value(&v, &c.metric)
    })();
    match outcome {
        Ok(got) => {
            let error = (got - c.expected) / c.expected;
            let ok = error.abs() <= c.tolerance + 1e-12;
            CaseResult {
                id: c.id.clone(),
                metric: c.metric.clone(),
                expected: c.expected,
                got: Some(got),
                error: Some(error),
                tolerance: c.tolerance,
                status: if ok { Status::Pass } else { Status::Fail },
                message: None,
            }
        }
        Err(m) => CaseResult {
            id: c.id.clone(),
            metric: c.metric.clone(),
            expected: c.expected,
            got: None,
            error: None,
            tolerance: c.tolerance,
            status: Status::Error,
            message: Some(m),
        },
    }
}

fn summarize(results: &[CaseResult]) -> Summary {
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    let mut ran: Vec<(f64, &str)> = results
        .iter()
        .filter_map(|r| r.error.map(|e| (e.abs(), r.id.as_str())))
        .collect();
    ran.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = match ran.len() {
        0 => None,
        n if n % 2 == 1 => Some(ran[n / 2].0),
        n => Some((ran[n / 2 - 1].0 + ran[n / 2].0) / 2.0),
    };
    let worst = ran.last();
    Summary {
        cases: results.len(),
        passed: count(Status::Pass),
        failed: count(Status::Fail),
        errored: count(Status::Error),
        median_abs_error: median,
        worst_abs_error: worst.map(|w| w.0),
        worst_case: worst.map(|w| w.1.to_string()),
    }
}

pub fn run(file: &Path, json: bool, tolerance_only: bool) -> CmdResult {
    let cases = read_cases(file)?;
    let results: Vec<CaseResult> = cases.iter().map(run_case).collect();
    let summary = summarize(&results);
    if json {
        print_json(&Output {
            file: file.display().to_string(),
            cases: &results,
            summary: &summary,
        })?;
        return Ok(0);
    }
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
    for r in &results {
        if tolerance_only && r.status == Status::Pass {
            continue;
        }
        let result = match r.status {
            Status::Pass => paint(PASS, "pass"),
            Status::Fail => paint(FAIL, "FAIL"),
            Status::Error => format!(
                "{}  {}",
                paint(FAIL, "ERROR"),
                r.message.as_deref().unwrap_or("")
            ),
        };
        out.push_str(&format!(
            "{:<idw$}  {:<mw$}  {:>11}  {:>11}  {:>9}  {:>4}%  {result}\n",
            r.id,
            short_metric(&r.metric),
            show(&r.metric, r.expected),
            r.got.map_or_else(|| "-".into(), |g| show(&r.metric, g)),
            r.error.map_or_else(|| "-".into(), pct),
            format!("{}", r.tolerance * 100.0),
        ));
    }
    if tolerance_only && summary.failed + summary.errored == 0 {
        out.push_str(&paint(DIM, "(every case within its tolerance)\n"));
    }
    out.push('\n');
    // The summary line in the plain form scripts look for: "N passed, M failed[, K errored]".
    out.push_str(&format!(
        "{} passed, {} failed",
        summary.passed, summary.failed
    ));
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
    print(&out)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metrics_follow_score_py() {
        let r = json!({"per_gpu": {"model_states": {"parameters": 2, "gradients": 3},
                                   "device_total": null, "peak_phase": "backward"}});
        assert_eq!(
            metric_value(
                &r,
                "sum:per_gpu.model_states.parameters+per_gpu.model_states.gradients"
            ),
            Ok(5.0)
        );
        assert_eq!(
            metric_value(&r, "per_gpu.device_total"),
            Err("null per_gpu.device_total".into())
        );
        assert!(metric_value(&r, "per_gpu.kv_pool")
            .unwrap_err()
            .starts_with("missing"));
        assert!(metric_value(&r, "per_gpu.peak_phase")
            .unwrap_err()
            .starts_with("not a number"));
        assert!(metric_value(&r, "sum:per_gpu.model_states.parameters+per_gpu.x").is_err());
    }

    #[test]
    fn median_and_worst() {
        let mk = |id: &str, e: Option<f64>| CaseResult {
            id: id.into(),
            metric: "m".into(),
            expected: 1.0,
            got: e.map(|e| 1.0 + e),
            error: e,
            tolerance: 0.05,
            status: match e {
                Some(e) if e.abs() <= 0.05 => Status::Pass,
                Some(_) => Status::Fail,
                None => Status::Error,
            },
            message: None,
        };
        let s = summarize(&[
            mk("a", Some(0.01)),
            mk("b", Some(-0.2)),
            mk("c", Some(0.03)),
            mk("d", Some(0.0)),
            mk("e", None),
        ]);
        assert_eq!((s.passed, s.failed, s.errored), (3, 1, 1));
        // |errors| 0, 0.01, 0.03, 0.2 → median (0.01 + 0.03) / 2.
        assert!((s.median_abs_error.unwrap() - 0.02).abs() < 1e-12);
        assert_eq!(s.worst_case.as_deref(), Some("b"));
        assert_eq!(short_metric("sum:per_gpu.model_states.parameters+per_gpu.model_states.gradients+per_gpu.model_states.optimizer_states+per_gpu.model_states.master_weights"), "model_states (sum)");
        assert_eq!(short_metric("per_gpu.components.kv_cache"), "kv_cache");
    }
}
