//! `validate`: every case of a validation file (the format of `../shared/validation/README.md`)
//! run through the estimator in this process, its metric compared with the published figure by
//! the same rules as `../shared/validation/score.py`. A case measured on the CPU
//! (`"measured_on": "cpu"`, validation/README.md) has its `per_gpu.peak_allocated` compared net
//! of the BLAS workspaces the estimate counts and a CPU run does not have.

use super::job::prepare;
use super::{AppError, Session};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use vramscope_core::estimate::activations::job_blas_workspaces_bytes;
use vramscope_core::job::Job;

/// Case files hold a few hundred cases of a few KiB each; refuse anything far larger unread.
const MAX_CASES_BYTES: u64 = 64 << 20;

/// `validate`'s input: the cases file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidateInput {
    pub cases: PathBuf,
}

/// One case as read from the file.
struct Case {
    id: String,
    job: Value,
    metric: String,
    expected: f64,
    tolerance: f64,
    /// `measured_on`: where the figure was measured (`cpu`, `cuda`); absent when not stated.
    measured_on: Option<String>,
}

/// The metric a CPU-measured case is compared on net of the BLAS workspaces.
const NETTED_METRIC: &str = "per_gpu.peak_allocated";

/// A case's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Error,
}

/// One case's outcome (`validate --json` lists these).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub metric: String,
    pub expected: f64,
    pub got: Option<f64>,
    /// (got − expected) / expected.
    pub error: Option<f64>,
    pub tolerance: f64,
    pub status: Status,
    /// The BLAS workspace bytes taken off the estimate before comparing: the case was measured
    /// on the CPU, which has none (`activations::job_blas_workspaces_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netted: Option<u64>,
    /// Why the case did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Counts and the |error| over the cases that ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub cases: usize,
    pub passed: usize,
    pub failed: usize,
    pub errored: usize,
    /// Median |error| over the cases that ran.
    pub median_abs_error: Option<f64>,
    pub worst_abs_error: Option<f64>,
    pub worst_case: Option<String>,
}

/// What `validate FILE --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validation {
    pub file: String,
    pub cases: Vec<CaseResult>,
    pub summary: Summary,
}

/// `validate` of a cases file: exit 0 whenever the file could be read (the result is a report);
/// an error only when it cannot.
pub fn validate(session: &Session, input: &ValidateInput) -> Result<Validation, AppError> {
    let cases = read_cases(&input.cases)?;
    let results: Vec<CaseResult> = cases.iter().map(|c| run_case(session, c)).collect();
    let summary = summarize(&results);
    Ok(Validation {
        file: input.cases.display().to_string(),
        cases: results,
        summary,
    })
}

/// The file's text, refused unread when it is a directory or far too large.
fn read_text(path: &Path) -> Result<String, String> {
    vramscope_formats::files::read_regular_text(path, MAX_CASES_BYTES, "a cases file")
        .map_err(|e| e.to_string())
}

fn read_cases(path: &Path) -> Result<Vec<Case>, AppError> {
    let shown = path.display().to_string();
    let err = |m: String| AppError::bad(format!("{shown}: {m}"));
    let text = read_text(path).map_err(err)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| err(format!("invalid JSON: {e}")))?;
    let Value::Array(list) = v else {
        return Err(err("expected a JSON list of cases".into()));
    };
    list.into_iter()
        .enumerate()
        .map(|(i, c)| read_case(i, c).map_err(err))
        .collect()
}

/// Case `i` (0-based) of the file.
fn read_case(i: usize, c: Value) -> Result<Case, String> {
    let Value::Object(mut o) = c else {
        return Err(format!("case {} is not an object", i + 1));
    };
    let id = match o.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => format!("#{}", i + 1),
    };
    let lacks = |k: &str| format!("case {id} lacks '{k}'");
    let job = o.remove("job").ok_or_else(|| lacks("job"))?;
    let job = vramscope_core::job::merge_if_supported(&job, o.get("job_if_supported"));
    let metric = match o.get("metric") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(format!("case {id}: 'metric' must be a string")),
        None => return Err(lacks("metric")),
    };
    let number = |k: &str| -> Result<f64, String> {
        match o.get(k) {
            None | Some(Value::Null) => Err(lacks(k)),
            Some(v) => v
                .as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(|| format!("case {id}: '{k}' must be a number (got {v})")),
        }
    };
    let expected = number("expected_bytes")?;
    let tolerance = number("tolerance")?;
    if tolerance < 0.0 {
        return Err(format!("case {id}: 'tolerance' must not be negative"));
    }
    if !o.contains_key("id") {
        return Err(lacks("id"));
    }
    let measured_on = match o.get("measured_on") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(format!("case {id}: 'measured_on' must be a string")),
    };
    Ok(Case {
        id,
        job,
        metric,
        expected,
        tolerance,
        measured_on,
    })
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

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Whether the case's metric is compared net of the BLAS workspaces: a peak measured on the CPU.
fn nets_workspaces(c: &Case) -> bool {
    c.measured_on.as_deref() == Some("cpu") && c.metric.trim() == NETTED_METRIC
}

/// The case's metric from its job's estimate and the workspace bytes taken off it, or why it
/// did not run.
fn case_value(session: &Session, c: &Case) -> Result<(f64, Option<u64>), String> {
    if c.expected == 0.0 {
        return Err("expected_bytes is 0: no relative error".into());
    }
    let job: Job =
        serde_json::from_value(c.job.clone()).map_err(|e| format!("invalid job: {e}"))?;
    // A panic is a bug in the estimator; one case's bug must not hide the other results.
    let (report, workspaces) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<_, String> {
            let p = prepare(session, &job).map_err(|e| e.message)?;
            let report = p.report().map_err(|e| e.message)?;
            let workspaces = if nets_workspaces(c) {
                let spec = p.model.spec.as_ref();
                Some(job_blas_workspaces_bytes(spec, &p.resolved).map_err(|e| e.to_string())?)
            } else {
                None
            };
            Ok((report, workspaces))
        }))
        .map_err(|p| format!("estimator panicked: {}", panic_text(p.as_ref())))??;
    let v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    let got = metric_value(&v, &c.metric)?;
    Ok((got - workspaces.unwrap_or(0) as f64, workspaces))
}

fn run_case(session: &Session, c: &Case) -> CaseResult {
    let (got, error, status, netted, message) = match case_value(session, c) {
        Ok((got, netted)) => {
            let error = (got - c.expected) / c.expected;
            let ok = error.abs() <= c.tolerance + 1e-12;
            let status = if ok { Status::Pass } else { Status::Fail };
            (Some(got), Some(error), status, netted, None)
        }
        Err(m) => (None, None, Status::Error, None, Some(m)),
    };
    CaseResult {
        id: c.id.clone(),
        metric: c.metric.clone(),
        expected: c.expected,
        got,
        error,
        tolerance: c.tolerance,
        status,
        netted,
        message,
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
            netted: None,
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
    }
}
