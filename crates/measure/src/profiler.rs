//! torch.profiler memory records: `prof.export_memory_timeline(path)` (`.json` = `[times,
//! sizes]`, `.raw.json.gz` = `[[t_ns, action, bytes, category], ...]`, either gzipped); Chrome
//! traces are read by [`crate::chrome`]. Layouts:
//! `torch/profiler/_memory_profiler.py` (`export_memory_timeline*`, `_coalesce_timeline`) and
//! notes/formats.md §2.2–§2.3.

use crate::analysis::{assemble, cat_index, Analysis, Point, Record, SourceInfo, Timeline, NCAT};
use crate::attribute::{self, Phase};
use crate::snapshot::ProfCategory;
use crate::MeasureError;
use serde_json::Value;

fn bad(msg: impl Into<String>) -> MeasureError {
    MeasureError::Format(msg.into())
}

/// Which profiler layout a JSON value is, if any.
pub fn detect(v: &Value) -> Option<&'static str> {
    match v {
        Value::Object(m) if m.contains_key("traceEvents") => Some("chrome_trace"),
        Value::Array(a) if a.len() == 2 && a[0].is_array() && a[1].is_array() => {
            Some("memory_timeline")
        }
        Value::Array(a)
            if a.first()
                .is_some_and(|r| r.as_array().is_some_and(|r| r.len() == 4)) =>
        {
            Some("memory_timeline_raw")
        }
        Value::Array(a) if a.is_empty() => Some("memory_timeline_raw"),
        Value::Array(a) if a.first().is_some_and(|e| e.get("ph").is_some()) => Some("chrome_trace"),
        _ => None,
    }
}

pub fn analyze_json(v: &Value) -> Result<Analysis, MeasureError> {
    match detect(v) {
        Some("memory_timeline") => timeline(v),
        Some("memory_timeline_raw") => raw(v),
        Some("chrome_trace") => {
            let text = serde_json::to_vec(v).map_err(|e| bad(format!("JSON: {e}")))?;
            crate::chrome::analyze_reader(text.as_slice())
        }
        _ => Err(bad(
            "JSON is neither a memory timeline ([times, sizes] or raw events) nor a Chrome trace",
        )),
    }
}

/// Shared category column (0..8) of a timeline column 1..=8 (`_CATEGORY_TO_INDEX + 1`).
fn column_cat(col: usize) -> usize {
    cat_index(attribute::from_profiler(ProfCategory::from_index(
        col as i64 - 1,
    )))
}

/// Phase of a timeline row from which profiler columns moved (the export has no markers):
/// activations or inputs grow → forward; gradients or autograd details grow → backward;
/// optimizer states or parameters change → optimizer step.
fn row_phase(prev: &[i64; 9], row: &[i64; 9]) -> Phase {
    let d = |c: usize| row[c] as i128 - prev[c] as i128;
    if d(2) != 0 || d(1) != 0 {
        Phase::Optimizer
    } else if d(6) > 0 || d(7) > 0 {
        Phase::Backward
    } else if d(5) > 0 || d(3) > 0 {
        Phase::Forward
    } else {
        Phase::Unknown
    }
}

fn rows_to_points(rows: &[[i64; 9]], times: &[f64]) -> Timeline {
    let mut points = Timeline::new(rows.len());
    let mut phase = Phase::Setup;
    let mut prev = [0i64; 9];
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            let p = row_phase(&prev, row);
            if p != Phase::Unknown {
                phase = p;
            }
        }
        let mut cats = [0u64; NCAT];
        for (col, &v) in row.iter().enumerate().skip(1) {
            let k = column_cat(col);
            cats[k] = cats[k].saturating_add(u64::try_from(v.max(0)).unwrap_or(0));
        }
        points.push(Point {
            cats,
            before: 0,
            phase,
            reserved: None,
            time_us: times.get(i).copied(),
        });
        prev = *row;
    }
    points
}

fn timeline(v: &Value) -> Result<Analysis, MeasureError> {
    let a = v.as_array().ok_or_else(|| bad("timeline: not a list"))?;
    let times: Vec<f64> = a[0]
        .as_array()
        .ok_or_else(|| bad("timeline: times is not a list"))?
        .iter()
        .map(|t| {
            t.as_f64()
                .ok_or_else(|| bad("timeline: a time is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let sizes = a[1]
        .as_array()
        .ok_or_else(|| bad("timeline: sizes is not a list"))?;
    if sizes.len() != times.len() {
        return Err(bad(format!(
            "timeline: {} times but {} rows of sizes",
            times.len(),
            sizes.len()
        )));
    }
    let mut rows = Vec::with_capacity(sizes.len());
    for (i, r) in sizes.iter().enumerate() {
        let r = r
            .as_array()
            .filter(|r| r.len() == 9)
            .ok_or_else(|| bad(format!("timeline: row {i} is not a list of 9 sizes")))?;
        let mut row = [0i64; 9];
        for (c, x) in r.iter().enumerate() {
            row[c] = x
                .as_i64()
                .ok_or_else(|| bad(format!("timeline: row {i} column {c} is not an integer")))?;
        }
        rows.push(row);
    }
    let points = rows_to_points(&rows, &times);
    Ok(finish("memory_timeline", points))
}

fn raw(v: &Value) -> Result<Analysis, MeasureError> {
    let events = v
        .as_array()
        .ok_or_else(|| bad("raw timeline: not a list"))?;
    // Coalesce by microsecond as `_coalesce_timeline` does; PREEXISTING (t = -1) rows take
    // the first real time.
    let mut rows: Vec<[i64; 9]> = Vec::new();
    let mut times: Vec<i64> = Vec::new();
    let mut cur = [0i64; 9];
    for (i, e) in events.iter().enumerate() {
        let e = e.as_array().filter(|e| e.len() == 4).ok_or_else(|| {
            bad(format!(
                "raw timeline: event {i} is not [t, action, bytes, category]"
            ))
        })?;
        let num = |k: usize| {
            e[k].as_i64().ok_or_else(|| {
                bad(format!(
                    "raw timeline: event {i} field {k} is not an integer"
                ))
            })
        };
        let (t_ns, bytes, cat) = (num(0)?, num(2)?, num(3)?);
        let t = if t_ns == -1 { -1 } else { t_ns / 1000 };
        if times.last() != Some(&t) {
            if !times.is_empty() {
                rows.push(cur);
            }
            times.push(t);
        }
        let col = (cat.clamp(0, 7) + 1) as usize;
        cur[col] = cur[col].saturating_add(bytes);
    }
    if !times.is_empty() {
        rows.push(cur);
    }
    let t_min = times.iter().copied().filter(|&t| t >= 0).min().unwrap_or(0);
    let times: Vec<f64> = times
        .iter()
        .map(|&t| if t < 0 { t_min as f64 } else { t as f64 })
        .collect();
    let points = rows_to_points(&rows, &times);
    Ok(finish("memory_timeline_raw", points))
}

fn finish(kind: &str, points: Timeline) -> Analysis {
    let record = Record {
        source: SourceInfo {
            kind: kind.into(),
            pickle_protocol: None,
            device: None,
            events: points.len(),
        },
        peak_reserved: None,
        fragmentation: None,
        ooms: Vec::new(),
        warnings: vec![
            "a profiler timeline holds category totals only: no per-allocation sites, no \
             reserved bytes"
                .into(),
        ],
    };
    assemble(record, points, Vec::new())
}
