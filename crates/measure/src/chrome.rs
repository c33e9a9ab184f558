//! Chrome traces (`prof.export_chrome_trace`): the `[memory]` instant events (`args.Bytes`
//! signed, `Addr`, `Device Type` 1 = CUDA / 0 = CPU, `Device Id`, `Total Allocated`, `Total
//! Reserved`; torch/csrc/profiler/kineto_shim / `KinetoEvent` memory records), attributed through
//! the ops (`ph: "X"`) that enclose them on the same thread, through the shared replay.
//!
//! The trace is read as a stream: each event is reduced to what the replay needs as it is
//! parsed (op names interned), so memory grows with the number of events, not the file's text.
//!
//! `Total Allocated` is the allocator's `allocated_bytes` after the event: what it holds beyond
//! the replayed lives was allocated before profiling began and never freed during it. That
//! remainder is reported as its own category, `before_recording`.

use crate::analysis::{Analysis, Record, SourceInfo};
use crate::attribute::{self, Fate, Phase, Signals};
use crate::infer::{self, Facts, RecordFacts};
use crate::replay::{self, Attributed, Life, Lifetimes, Moment, Timeline};
use crate::snapshot::Frame;
use crate::MeasureError;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

fn bad(msg: impl Into<String>) -> MeasureError {
    MeasureError::Format(msg.into())
}

/// One `[memory]` event.
struct Mem {
    ts: f64,
    tid: u32,
    bytes: i64,
    addr: u64,
    reserved: Option<u64>,
    allocated: Option<u64>,
    dev: (i64, i64),
}

/// One op (`ph: "X"`); `name` indexes the interned names.
struct Op {
    ts: f64,
    end: f64,
    tid: u32,
    name: u32,
}

/// What the parse keeps: memory events, ops, interned names and thread ids.
#[derive(Default)]
struct Collected {
    mems: Vec<Mem>,
    ops: Vec<Op>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    tids: HashMap<String, u32>,
    saw_events: bool,
    /// Elements of the event list, and whether any carried a `ph` (an event's phase type).
    elements: u64,
    saw_ph: bool,
}

impl Collected {
    fn intern(&mut self, name: String) -> u32 {
        if let Some(&id) = self.name_ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.name_ids.insert(name, id);
        id
    }

    fn tid(&mut self, tid: Option<&Value>) -> u32 {
        let key = tid.map(|t| t.to_string()).unwrap_or_default();
        let n = self.tids.len() as u32;
        *self.tids.entry(key).or_insert(n)
    }

    /// Keeps what one event says, if it is a memory event or an op.
    fn add(&mut self, e: RawEvent) {
        self.saw_ph |= e.ph.is_some();
        let ts = e.ts.as_ref().and_then(Value::as_f64).unwrap_or(0.0);
        let name = match e.name {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        if name == "[memory]" {
            let a = e.args.unwrap_or_default();
            let Some(bytes) = a.bytes.as_ref().and_then(Value::as_i64) else {
                return;
            };
            let tid = self.tid(e.tid.as_ref());
            let int = |v: &Option<Value>| v.as_ref().and_then(Value::as_i64);
            let uint = |v: &Option<Value>| v.as_ref().and_then(Value::as_u64);
            self.mems.push(Mem {
                ts,
                tid,
                bytes,
                addr: uint(&a.addr).unwrap_or(0),
                reserved: uint(&a.total_reserved),
                allocated: uint(&a.total_allocated),
                dev: (
                    int(&a.device_type).unwrap_or(0),
                    int(&a.device_id).unwrap_or(-1),
                ),
            });
        } else if e.ph.as_ref().and_then(Value::as_str) == Some("X") {
            let dur = e.dur.as_ref().and_then(Value::as_f64).unwrap_or(0.0);
            let tid = self.tid(e.tid.as_ref());
            let name = self.intern(name);
            self.ops.push(Op {
                ts,
                end: ts + dur,
                tid,
                name,
            });
        }
    }
}

/// The fields of an event the reader uses; others are skipped unparsed.
#[derive(Deserialize, Default)]
struct RawEvent {
    ph: Option<Value>,
    name: Option<Value>,
    ts: Option<Value>,
    dur: Option<Value>,
    tid: Option<Value>,
    args: Option<RawArgs>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(rename = "Bytes")]
    bytes: Option<Value>,
    #[serde(rename = "Addr")]
    addr: Option<Value>,
    #[serde(rename = "Device Type")]
    device_type: Option<Value>,
    #[serde(rename = "Device Id")]
    device_id: Option<Value>,
    #[serde(rename = "Total Reserved")]
    total_reserved: Option<Value>,
    #[serde(rename = "Total Allocated")]
    total_allocated: Option<Value>,
}

/// An element of `traceEvents`: an event object, or anything else (skipped).
#[derive(Deserialize)]
#[serde(untagged)]
enum Element {
    Event(Box<RawEvent>),
    #[allow(dead_code)]
    Other(IgnoredAny),
}

/// A seed that fills the collection it borrows is its own `Visitor`, handed whatever value
/// comes (serde's `DeserializeSeed` / `Deserializer::deserialize_any`).
macro_rules! seeded_by_visitor {
    ($seed:ident) => {
        impl<'de> DeserializeSeed<'de> for $seed<'_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

/// Reads a list of events into the collection, one at a time.
struct Events<'c>(&'c mut Collected);
seeded_by_visitor!(Events);

impl<'de> Visitor<'de> for Events<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.saw_events = true;
        while let Some(e) = seq.next_element::<Element>()? {
            self.0.elements += 1;
            if let Element::Event(e) = e {
                self.0.add(*e);
            }
        }
        Ok(())
    }
}

/// The whole file: an object with `traceEvents` (other keys skipped), or a bare event list.
struct File<'c>(&'c mut Collected);
seeded_by_visitor!(File);

impl<'de> Visitor<'de> for File<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<String>()? {
            if k == "traceEvents" {
                map.next_value_seed(Events(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Events(self.0).visit_seq(seq)
    }
}

/// Reads and analyzes a Chrome trace from a reader (the JSON text is never held whole).
pub fn analyze_reader<R: std::io::Read>(r: R) -> Result<Analysis, MeasureError> {
    let mut c = Collected::default();
    let mut de = serde_json::Deserializer::from_reader(r);
    File(&mut c).deserialize(&mut de).map_err(|e| {
        if e.is_data() {
            bad("chrome trace: traceEvents is not a list")
        } else {
            bad(format!("JSON: {e}"))
        }
    })?;
    de.end().map_err(|e| bad(format!("JSON: {e}")))?;
    if !c.saw_events || (c.elements > 0 && !c.saw_ph) {
        return Err(bad(
            "JSON is neither a memory timeline ([times, sizes] or raw events) nor a Chrome trace",
        ));
    }
    Ok(analyze(c))
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

/// What the ops enclosing a memory event say: its signals and site (a name index).
struct Context {
    sig: Signals,
    site: Option<u32>,
}

/// The enclosing ops of each memory event (both sorted by time): per-thread stacks swept in
/// time order.
fn enclosing(mems: &[Mem], ops: &[Op], names: &[String]) -> Vec<Context> {
    let mut stacks: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut next_op = 0;
    let mut out = Vec::with_capacity(mems.len());
    for m in mems {
        while next_op < ops.len() && ops[next_op].ts <= m.ts {
            let o = &ops[next_op];
            let st = stacks.entry(o.tid).or_default();
            while st.last().is_some_and(|&k| ops[k].end < o.ts) {
                st.pop();
            }
            st.push(next_op);
            next_op += 1;
        }
        let st = stacks.entry(m.tid).or_default();
        while st.last().is_some_and(|&k| ops[k].end < m.ts) {
            st.pop();
        }
        let open: Vec<u32> = st
            .iter()
            .rev()
            .filter(|&&k| ops[k].end >= m.ts)
            .map(|&k| ops[k].name)
            .collect();
        out.push(context_of(&open, names));
    }
    out
}

/// Signals and site of the ops open at an event, innermost first.
fn context_of(open: &[u32], names: &[String]) -> Context {
    let frames: Vec<Frame> = open
        .iter()
        .map(|&n| Frame {
            filename: String::new(),
            line: 0,
            name: names[n as usize].clone(),
        })
        .collect();
    let site = open
        .iter()
        .rev()
        .find(|&&n| {
            let s = &names[n as usize];
            !s.starts_with("aten::") && !s.starts_with("[memory]")
        })
        .or(open.first())
        .copied();
    Context {
        sig: attribute::signals(frames.iter()),
        site,
    }
}

/// What a Chrome trace says about one allocation.
struct ChromeInfo {
    sig: Signals,
    free_sig: Option<Signals>,
    site: Option<u32>,
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
                site: cx[i].site,
            };
            lives.alloc(m.addr, m.bytes as u64, pos, info);
        } else if m.bytes < 0 {
            if let Some(k) = lives.free(m.addr, pos) {
                lives.lives[k].info.free_sig = Some(cx[i].sig);
            } else {
                let info = ChromeInfo {
                    sig: Signals::default(),
                    free_sig: Some(cx[i].sig),
                    site: None,
                };
                lives.before(m.bytes.unsigned_abs(), Some(pos), info);
            }
        }
    }
    lives.lives
}

/// Categories from the enclosing ops, then what the inference says of blocks from before.
fn categorize(
    lives: Vec<Life<ChromeInfo>>,
    mems: &[Mem],
    cx: &[Context],
) -> Attributed<ChromeInfo> {
    let mut cats: Vec<_> = lives
        .iter()
        .map(|e| {
            let fate = e.info.free_sig.map_or(Fate::AliveAtEnd, Fate::Freed);
            attribute::classify(None, None, &e.info.sig, fate)
        })
        .collect();
    let facts: Vec<Facts> = lives
        .iter()
        .map(|l| Facts {
            key: l.size,
            size: l.size,
            pre: l.start == 0,
            freed_by: l.info.free_sig,
            stackless: l.info.site.is_none(),
            workspace: false,
        })
        .collect();
    let mut rec = RecordFacts::default();
    for (m, c) in mems.iter().zip(cx) {
        match attribute::phase_of(&c.sig) {
            Phase::Forward if m.bytes > 0 => rec.has_forward = true,
            Phase::Backward if m.bytes > 0 => rec.has_backward = true,
            _ => {}
        }
    }
    let (inferences, by_life) = infer::infer(&facts, &mut cats, rec);
    Attributed {
        lives,
        cats,
        inferences,
        by_life,
    }
}

/// Bytes the allocator held beyond the replayed lives at every event: allocated before
/// profiling and never freed in it. The least over the events (the part held throughout);
/// None when the events carry no `Total Allocated`.
fn before_recording<T>(lives: &[Life<T>], mems: &[Mem]) -> Option<u64> {
    let sums = replay::live_totals(lives, mems.len());
    mems.iter()
        .enumerate()
        .filter_map(|(i, m)| Some(m.allocated?.saturating_sub(sums[i + 1])))
        .min()
}

/// The replay of the device's events: the phase of the ops around each allocation, carried
/// forward; on CUDA the events' `Total Reserved`. Returns the timeline and the peak of
/// reserved bytes.
fn replay_events(
    att: &Attributed<ChromeInfo>,
    mems: &[Mem],
    cx: &[Context],
    cuda: bool,
    before: Option<u64>,
) -> (Timeline, Option<u64>) {
    let mut phase = Phase::Unknown;
    let mut peak_reserved: Option<u64> = None;
    let timeline = att.replay(mems.len(), |pos| {
        let mut reserved = None;
        if pos > 0 {
            let m = &mems[pos - 1];
            let p = attribute::phase_of(&cx[pos - 1].sig);
            if p != Phase::Unknown && m.bytes > 0 {
                phase = p;
            }
            if cuda {
                reserved = m.reserved;
                peak_reserved = peak_reserved.max(m.reserved);
            }
        }
        Moment {
            before: before.unwrap_or(0),
            phase,
            reserved,
            time_us: (pos > 0).then(|| mems[pos - 1].ts),
        }
    });
    (timeline, peak_reserved)
}

fn analyze(mut c: Collected) -> Analysis {
    let dev = busiest_device(&c.mems);
    c.mems.retain(|m| m.dev == dev);
    c.mems.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    c.ops
        .sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.end.total_cmp(&a.end)));
    let cx = enclosing(&c.mems, &c.ops, &c.names);
    drop(std::mem::take(&mut c.ops));
    let att = categorize(chrome_lives(&c.mems, &cx), &c.mems, &cx);
    let cuda = dev.0 == 1;
    let before = cuda
        .then(|| before_recording(&att.lives, &c.mems))
        .flatten();
    let (timeline, peak_reserved) = replay_events(&att, &c.mems, &cx, cuda, before);
    let record = Record {
        source: SourceInfo {
            kind: "chrome_trace".into(),
            pickle_protocol: None,
            device: Some(dev.1),
            events: c.mems.len(),
        },
        peak_reserved,
        fragmentation: None,
        ooms: Vec::new(),
        warnings: chrome_warnings(cuda, before, &c.mems),
    };
    let names = &c.names;
    att.report(timeline, record, |e| {
        let site = e.info.site.map_or("", |n| names[n as usize].as_str());
        (attribute::phase_of(&e.info.sig), site)
    })
}

fn chrome_warnings(cuda: bool, before: Option<u64>, mems: &[Mem]) -> Vec<String> {
    let mut warnings = Vec::new();
    if !cuda {
        warnings.push("host (CPU) memory events only: no CUDA device in this trace".into());
    }
    match before {
        Some(b) if b > 0 => warnings.push(format!(
            "{} were allocated before profiling began and never freed during it (the events' \
             Total Allocated beyond their own allocations): reported as before_recording",
            infer::human(b)
        )),
        None if cuda && !mems.is_empty() => warnings.push(
            "the memory events carry no Total Allocated: what was allocated before profiling \
             began is not counted"
                .into(),
        ),
        _ => {}
    }
    warnings
}
