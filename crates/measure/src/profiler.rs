//! torch.profiler memory records: `prof.export_memory_timeline(path)` (`.json` = `[times,
//! sizes]`, `.raw.json.gz` = `[[t_ns, action, bytes, category], ...]`, either gzipped) and the
//! `[memory]` instant events of `prof.export_chrome_trace`. Layouts:
//! `torch/profiler/_memory_profiler.py` (`export_memory_timeline*`, `_coalesce_timeline`) and
//! notes/formats.md §2.2–§2.3.

use crate::analysis::{assemble, cat_index, Analysis, Point, SourceInfo, Timeline, NCAT};
use crate::attribute::{self, Fate, Phase, Signals};
use crate::replay::{self, Life, Lifetimes, Moment};
use crate::snapshot::{Frame, ProfCategory};
use crate::MeasureError;
use serde_json::Value;
use std::collections::HashMap;

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
        Some("chrome_trace") => chrome(v),
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
    assemble(
        SourceInfo {
            kind: kind.into(),
            pickle_protocol: None,
            device: None,
            events: points.len(),
        },
        points,
        None,
        Vec::new(),
        None,
        Vec::new(),
        vec![
            "a profiler timeline holds category totals only: no per-allocation sites, no \
             reserved bytes"
                .into(),
        ],
    )
}

/// One `[memory]` event of a Chrome trace.
struct Mem {
    ts: f64,
    tid: String,
    bytes: i64,
    addr: u64,
    reserved: Option<u64>,
    dev: (i64, i64),
}

/// One op (`ph: "X"`) of a Chrome trace.
struct Op {
    ts: f64,
    end: f64,
    tid: String,
    name: String,
}

/// The `[memory]` events and the ops of a Chrome trace, in file order.
fn chrome_events(v: &Value) -> Result<(Vec<Mem>, Vec<Op>), MeasureError> {
    let events = match v {
        Value::Object(m) => m
            .get("traceEvents")
            .and_then(|e| e.as_array())
            .ok_or_else(|| bad("chrome trace: traceEvents is not a list"))?,
        Value::Array(a) => a,
        _ => return Err(bad("chrome trace: not an object")),
    };
    let mut mems = Vec::new();
    let mut ops = Vec::new();
    for e in events {
        let ts = e.get("ts").and_then(|t| t.as_f64()).unwrap_or(0.0);
        let tid = e.get("tid").map(|t| t.to_string()).unwrap_or_default();
        let name = e.get("name").and_then(|n| n.as_str()).unwrap_or("");
        if name == "[memory]" {
            let args = e.get("args");
            let arg = |k: &str| args.and_then(|a| a.get(k));
            let Some(bytes) = arg("Bytes").and_then(|b| b.as_i64()) else {
                continue;
            };
            mems.push(Mem {
                ts,
                tid,
                bytes,
                addr: arg("Addr").and_then(|a| a.as_u64()).unwrap_or(0),
                reserved: arg("Total Reserved").and_then(|a| a.as_u64()),
                dev: (
                    arg("Device Type").and_then(|a| a.as_i64()).unwrap_or(0),
                    arg("Device Id").and_then(|a| a.as_i64()).unwrap_or(-1),
                ),
            });
        } else if e.get("ph").and_then(|p| p.as_str()) == Some("X") {
            let dur = e.get("dur").and_then(|d| d.as_f64()).unwrap_or(0.0);
            ops.push(Op {
                ts,
                end: ts + dur,
                tid,
                name: name.to_string(),
            });
        }
    }
    Ok((mems, ops))
}

/// The device: CUDA with the most bytes allocated, else the host.
fn busiest_device(mems: &[Mem]) -> (i64, i64) {
    let mut per_dev: HashMap<(i64, i64), u64> = HashMap::new();
    for m in mems {
        let e = per_dev.entry(m.dev).or_default();
        *e = e.saturating_add(m.bytes.max(0) as u64);
    }
    per_dev
        .iter()
        .max_by_key(|(d, b)| (d.0 == 1, **b))
        .map(|(d, _)| *d)
        .unwrap_or((0, -1))
}

/// What the ops enclosing a memory event say: its signals and site.
struct Context {
    sig: Signals,
    site: String,
}

/// The enclosing ops of each memory event (both sorted by time): per-thread stacks swept in
/// time order.
fn enclosing(mems: &[Mem], ops: &[Op]) -> Vec<Context> {
    let mut stacks: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut next_op = 0;
    let mut out = Vec::with_capacity(mems.len());
    for m in mems {
        while next_op < ops.len() && ops[next_op].ts <= m.ts {
            let o = &ops[next_op];
            let st = stacks.entry(o.tid.as_str()).or_default();
            while st.last().is_some_and(|&k| ops[k].end < o.ts) {
                st.pop();
            }
            st.push(next_op);
            next_op += 1;
        }
        let st = stacks.entry(m.tid.as_str()).or_default();
        while st.last().is_some_and(|&k| ops[k].end < m.ts) {
            st.pop();
        }
        let frames: Vec<Frame> = st
            .iter()
            .rev()
            .filter(|&&k| ops[k].end >= m.ts)
            .map(|&k| Frame {
                filename: String::new(),
                line: 0,
                name: ops[k].name.clone(),
            })
            .collect();
        out.push(Context {
            sig: attribute::signals(frames.iter()),
            site: frames
                .iter()
                .rev()
                .find(|f| !f.name.starts_with("aten::") && !f.name.starts_with("[memory]"))
                .or(frames.first())
                .map(|f| f.name.clone())
                .unwrap_or_default(),
        });
    }
    out
}

/// What a Chrome trace says about one allocation.
struct ChromeInfo {
    sig: Signals,
    free_sig: Option<Signals>,
    site: String,
}

/// Lifetimes by address: positive `Bytes` allocate, negative free; a free without an alloc
/// was allocated before profiling began.
fn chrome_lives(mems: &[Mem], cx: &[Context]) -> Vec<Life<ChromeInfo>> {
    let mut lives = Lifetimes::new();
    for (i, m) in mems.iter().enumerate() {
        let pos = i + 1;
        if m.bytes > 0 {
            let info = ChromeInfo {
                sig: cx[i].sig,
                free_sig: None,
                site: cx[i].site.clone(),
            };
            lives.alloc(m.addr, m.bytes as u64, pos, info);
        } else if m.bytes < 0 {
            if let Some(k) = lives.free(m.addr, pos) {
                lives.lives[k].info.free_sig = Some(cx[i].sig);
            } else {
                let info = ChromeInfo {
                    sig: Signals::default(),
                    free_sig: Some(cx[i].sig),
                    site: String::new(),
                };
                lives.before(m.bytes.unsigned_abs(), Some(pos), info);
            }
        }
    }
    lives.lives
}

/// Chrome trace: `[memory]` instant events (`args.Bytes` signed, `Addr`, `Device Type` 1 =
/// CUDA / 0 = CPU, `Total Reserved`), attributed through the ops (`ph: "X"`) that enclose
/// them on the same thread.
fn chrome(v: &Value) -> Result<Analysis, MeasureError> {
    let (mut mems, mut ops) = chrome_events(v)?;
    let dev = busiest_device(&mems);
    mems.retain(|m| m.dev == dev);
    mems.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    ops.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.end.total_cmp(&a.end)));
    let cx = enclosing(&mems, &ops);
    let lives = chrome_lives(&mems, &cx);
    let cats: Vec<_> = lives
        .iter()
        .map(|e| {
            let fate = e.info.free_sig.map_or(Fate::AliveAtEnd, Fate::Freed);
            attribute::classify(None, None, &e.info.sig, fate)
        })
        .collect();
    let n = mems.len();
    let mut phase = Phase::Unknown;
    let mut peak_reserved: Option<u64> = None;
    let points = replay::replay(&lives, &cats, n, |pos| {
        let mut reserved = None;
        if pos > 0 {
            let m = &mems[pos - 1];
            let p = attribute::phase_of(&cx[pos - 1].sig);
            if p != Phase::Unknown && m.bytes > 0 {
                phase = p;
            }
            if dev.0 == 1 {
                reserved = m.reserved;
                peak_reserved = peak_reserved.max(m.reserved);
            }
        }
        Moment {
            phase,
            reserved,
            time_us: (pos > 0).then(|| mems[pos - 1].ts),
        }
    });
    let peak = points.peak_index().unwrap_or(0);
    let live_at_peak = replay::live_at(&lives, peak)
        .map(|(k, e)| {
            let ph = attribute::phase_of(&e.info.sig);
            (e.size, cats[k], ph, e.info.site.as_str())
        })
        .collect();
    let mut warnings = Vec::new();
    if dev.0 != 1 {
        warnings.push("host (CPU) memory events only: no CUDA device in this trace".into());
    }
    Ok(assemble(
        SourceInfo {
            kind: "chrome_trace".into(),
            pickle_protocol: None,
            device: Some(dev.1),
            events: n,
        },
        points,
        peak_reserved,
        live_at_peak,
        None,
        Vec::new(),
        warnings,
    ))
}
