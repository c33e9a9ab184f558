//! From a record to the contract's `analyze` shape: replay the events, find the peak of
//! allocated bytes, say what was live then by category and by stack, and what the segments say
//! about reserved memory and fragmentation.

use crate::attribute::{self, Fate, Phase, Signals};
use crate::fxhash::{FxMap, FxSet};
use crate::snapshot::{Action, BlockState, ProfCategory, Snapshot};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use vramscope_core::report::{Category, Components, ModelStates, TimelinePoint};

/// The categories a measurement splits allocated bytes into, in table order.
pub const CATS: [Category; 8] = [
    Category::Parameters,
    Category::Gradients,
    Category::OptimizerStates,
    Category::MasterWeights,
    Category::Activations,
    Category::KvCache,
    Category::Temporaries,
    Category::Unattributed,
];
pub const NCAT: usize = 8;
const UNATTRIBUTED: usize = 7;

pub fn cat_index(c: Option<Category>) -> usize {
    c.and_then(|c| CATS.iter().position(|&k| k == c))
        .unwrap_or(UNATTRIBUTED)
}

/// At most this many points in `timeline` (the peak is always one of them).
pub const MAX_POINTS: usize = 240;

/// `per_gpu.components` of a measurement: the Report's components plus `unattributed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MeasuredComponents {
    #[serde(flatten)]
    pub base: Components,
    pub unattributed: u64,
}

impl MeasuredComponents {
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Unattributed => self.unattributed,
            _ => self.base.get(c),
        }
    }
}

/// `per_gpu` of a measurement, field for field the Report's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredPerGpu {
    pub components: MeasuredComponents,
    pub model_states: ModelStates,
    pub activation_bytes_per_layer: Option<u64>,
    pub peak_allocated: Option<u64>,
    pub peak_reserved: Option<u64>,
    /// A record of the allocator never sees the CUDA context: null.
    pub device_total: Option<u64>,
    pub peak_phase: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceInfo {
    /// `cuda_snapshot`, `cuda_snapshot_1_13`, `profiler_snapshot`, `memory_timeline`,
    /// `memory_timeline_raw`, `chrome_trace`.
    pub kind: String,
    pub pickle_protocol: Option<u8>,
    pub device: Option<i64>,
    pub events: usize,
}

/// One allocation live at the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopAllocation {
    pub bytes: u64,
    pub category: &'static str,
    pub phase: &'static str,
    /// The most telling frame of its stack (first user or module frame), or "".
    pub site: String,
}

/// Bytes live at the peak grouped by allocation site.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameGroup {
    pub site: String,
    pub bytes: u64,
    pub count: u64,
    pub category: &'static str,
}

/// Final segment state, as `python -m torch.cuda._memory_viz stats` splits it:
/// reserved = allocated + pending free + internal + external... (internal is inside allocated
/// blocks: `size − requested_size`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fragmentation {
    pub segments: u64,
    pub reserved: u64,
    pub allocated: u64,
    pub active_pending_free: u64,
    /// Inside allocated blocks: rounding (`size − requested_size`).
    pub internal_free: u64,
    /// Inactive blocks: cached, free, reusable only by requests that fit.
    pub external_free: u64,
    pub largest_free_block: u64,
    /// external_free / reserved.
    pub external_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Oom {
    /// Bytes the failed request asked for.
    pub requested: u64,
    /// Bytes CUDA reported free at that moment.
    pub device_free: Option<u64>,
    pub site: String,
}

/// The whole measured report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub source: SourceInfo,
    pub per_gpu: MeasuredPerGpu,
    pub timeline: Vec<TimelinePoint>,
    pub top_allocations: Vec<TopAllocation>,
    pub top_frames: Vec<FrameGroup>,
    pub fragmentation: Option<Fragmentation>,
    pub ooms: Vec<Oom>,
    pub warnings: Vec<String>,
}

/// One moment of the replay: bytes per category after the events at that moment.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub cats: [u64; NCAT],
    pub phase: Phase,
    pub reserved: Option<u64>,
    pub time_us: Option<f64>,
}

impl Point {
    fn total(&self) -> u64 {
        self.cats.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// A sliding-window minimum fed one value at a time, keeping the best (largest) window minimum:
/// a monotonic queue of candidate minima (positions, values increasing), O(1) amortized per
/// value and O(window) memory, so a replay of millions of events never holds the series.
#[derive(Debug, Clone)]
struct SustainedMax {
    window: usize,
    queue: std::collections::VecDeque<(usize, u64)>,
    seen: usize,
    best: u64,
    min_all: u64,
}

impl SustainedMax {
    fn new(window: usize) -> Self {
        let window = window.max(1);
        SustainedMax {
            window,
            queue: std::collections::VecDeque::with_capacity(window + 1),
            seen: 0,
            best: 0,
            min_all: u64::MAX,
        }
    }

    fn push(&mut self, v: u64) {
        let i = self.seen;
        self.seen += 1;
        self.min_all = self.min_all.min(v);
        while self.queue.back().is_some_and(|&(_, b)| b >= v) {
            self.queue.pop_back();
        }
        self.queue.push_back((i, v));
        while self
            .queue
            .front()
            .is_some_and(|&(j, _)| j + self.window <= i)
        {
            self.queue.pop_front();
        }
        if i + 1 >= self.window {
            if let Some(&(_, m)) = self.queue.front() {
                self.best = self.best.max(m);
            }
        }
    }

    /// The best window minimum; a series shorter than the window gives its minimum.
    fn finish(&self) -> u64 {
        match self.seen {
            0 => 0,
            n if n < self.window => self.min_all,
            _ => self.best,
        }
    }
}

/// The highest level a series holds for at least `window` consecutive points: "bytes held over
/// the step", without one-event transients such as the profiler's version bookkeeping (an
/// in-place update briefly counts a parameter twice, notes/formats.md §3.2).
#[cfg(test)]
pub(crate) fn sustained_max(values: &[u64], window: usize) -> u64 {
    let mut s = SustainedMax::new(window);
    values.iter().for_each(|&v| s.push(v));
    s.finish()
}

pub(crate) fn window_for(n: usize) -> usize {
    (n / 100).clamp(1, 64)
}

/// The replay's points, folded as they come: the peak (first point with the most allocated
/// bytes), the phase in force at it, the sustained model-state levels and one point per
/// timeline bucket. A replay of millions of events keeps a few hundred points, not millions
/// (a 503 MB snapshot's 3.3 M points were 343 MB of the analysis's memory).
pub(crate) struct Timeline {
    bucket: usize,
    seen: usize,
    t0: Option<f64>,
    last_phase: Phase,
    peak: Option<(usize, Point, Phase)>,
    states: [SustainedMax; 4],
    /// One point per finished bucket (its highest, first on ties), and the open bucket's.
    samples: Vec<(usize, Point)>,
    open: Option<(usize, Point)>,
}

impl Timeline {
    /// A timeline that will receive `expected` points (the bucket width and the sustained
    /// window depend on it, as they would over the whole series).
    pub(crate) fn new(expected: usize) -> Self {
        let w = window_for(expected);
        Timeline {
            bucket: expected.div_ceil(MAX_POINTS).max(1),
            seen: 0,
            t0: None,
            last_phase: Phase::Unknown,
            peak: None,
            states: std::array::from_fn(|_| SustainedMax::new(w)),
            samples: Vec::with_capacity(MAX_POINTS + 1),
            open: None,
        }
    }

    pub(crate) fn push(&mut self, p: Point) {
        let i = self.seen;
        self.seen += 1;
        if self.t0.is_none() {
            self.t0 = p.time_us;
        }
        if p.phase != Phase::Unknown {
            self.last_phase = p.phase;
        }
        let total = p.total();
        for (k, s) in self.states.iter_mut().enumerate() {
            s.push(p.cats[k]);
        }
        if self.peak.as_ref().is_none_or(|(_, q, _)| total > q.total()) {
            self.peak = Some((i, p.clone(), self.last_phase));
        }
        if i.is_multiple_of(self.bucket) {
            if let Some(done) = self.open.take() {
                self.samples.push(done);
            }
        }
        if self.open.as_ref().is_none_or(|(_, q)| total > q.total()) {
            self.open = Some((i, p));
        }
    }

    /// Index of the first point with the most allocated bytes.
    pub(crate) fn peak_index(&self) -> Option<usize> {
        self.peak.as_ref().map(|(i, _, _)| *i)
    }

    pub(crate) fn len(&self) -> usize {
        self.seen
    }
}

/// Assembles the report from the replayed timeline and what the caller knows about the peak.
pub(crate) fn assemble(
    source: SourceInfo,
    timeline: Timeline,
    peak_reserved: Option<u64>,
    live: Vec<(u64, Option<Category>, Phase, &str)>,
    fragmentation: Option<Fragmentation>,
    ooms: Vec<Oom>,
    mut warnings: Vec<String>,
) -> Analysis {
    let mut comps = MeasuredComponents::default();
    let mut peak_allocated = None;
    let mut peak_phase = None;
    if let Some((_, p, phase)) = &timeline.peak {
        for (k, &c) in CATS.iter().enumerate() {
            match c {
                Category::Unattributed => comps.unattributed = p.cats[k],
                _ => {
                    if let Some(slot) = comps.base.get_mut(c) {
                        *slot = p.cats[k];
                    }
                }
            }
        }
        peak_allocated = Some(p.total());
        // The phase of the peak: its own, else the last known one before it.
        peak_phase = (*phase != Phase::Unknown).then(|| phase.name().to_string());
        if let Some(r) = p.reserved {
            comps.base.allocator_reserve = r.saturating_sub(p.total());
        }
    }
    let model_states = ModelStates {
        parameters: timeline.states[0].finish(),
        gradients: timeline.states[1].finish(),
        optimizer_states: timeline.states[2].finish(),
        master_weights: timeline.states[3].finish(),
    };
    if comps.unattributed > 0 {
        if let Some(total) = peak_allocated.filter(|&t| t > 0) {
            warnings.push(format!(
                "{:.1}% of the bytes live at the peak could not be attributed to a category",
                comps.unattributed as f64 * 100.0 / total as f64
            ));
        }
    }
    if timeline.seen == 0 || peak_allocated == Some(0) {
        warnings.push(
            "the record holds no allocations: was memory history recording on \
             (torch.cuda.memory._record_memory_history) before the step?"
                .into(),
        );
    }

    // Top allocations and top sites at the peak.
    let mut live = live;
    live.sort_by_key(|l| std::cmp::Reverse(l.0));
    let top_allocations = live
        .iter()
        .take(10)
        .map(|(bytes, c, ph, site)| TopAllocation {
            bytes: *bytes,
            category: c.unwrap_or(Category::Unattributed).name(),
            phase: ph.name(),
            site: site.to_string(),
        })
        .collect();
    let mut groups: HashMap<(&str, usize), (u64, u64)> = HashMap::new();
    for (bytes, c, _, site) in &live {
        let g = groups.entry((*site, cat_index(*c))).or_default();
        g.0 = g.0.saturating_add(*bytes);
        g.1 += 1;
    }
    let mut top_frames: Vec<FrameGroup> = groups
        .into_iter()
        .map(|((site, k), (bytes, count))| FrameGroup {
            site: site.to_string(),
            bytes,
            count,
            category: CATS[k].name(),
        })
        .collect();
    top_frames.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    top_frames.truncate(10);

    Analysis {
        source,
        per_gpu: MeasuredPerGpu {
            components: comps,
            model_states,
            activation_bytes_per_layer: None,
            peak_allocated,
            peak_reserved,
            device_total: None,
            peak_phase,
        },
        timeline: downsample(timeline),
        top_allocations,
        top_frames,
        fragmentation,
        ooms,
        warnings,
    }
}

/// One timeline point per bucket of events: the bucket's highest.
fn downsample(timeline: Timeline) -> Vec<TimelinePoint> {
    let t0 = timeline.t0;
    let mut samples = timeline.samples;
    samples.extend(timeline.open);
    samples
        .into_iter()
        .map(|(idx, p)| {
            let label = match (p.time_us, t0) {
                (Some(t), Some(t0)) => format!("event {idx}, +{:.3} ms", (t - t0) / 1000.0),
                _ => format!("event {idx}"),
            };
            let mut by_category = BTreeMap::new();
            for (k, &c) in CATS.iter().enumerate() {
                if p.cats[k] > 0 {
                    by_category.insert(c.name(), p.cats[k]);
                }
            }
            TimelinePoint {
                phase: p.phase.name().to_string(),
                label,
                allocated: p.total(),
                by_category,
            }
        })
        .collect()
}

/// A short, telling name for a stack: the first frame outside torch internals and the C++
/// allocator (the user's line), else the first Python frame, else the first frame.
pub(crate) fn site_of<'a>(frames: impl Iterator<Item = &'a crate::snapshot::Frame>) -> String {
    let mut first = None;
    let mut first_py = None;
    for f in frames {
        let text = if f.filename == "none" || f.filename.is_empty() {
            f.name.clone()
        } else {
            format!("{}:{} {}", f.filename, f.line, f.name)
        };
        if first.is_none() {
            first = Some(text.clone());
        }
        let file = if f.filename == "none" {
            f.name.as_str()
        } else {
            f.filename.as_str()
        };
        let is_py = file.contains(".py");
        if is_py && first_py.is_none() {
            first_py = Some(text.clone());
        }
        let internal = file.contains("torch/")
            || file.contains("site-packages/")
            || file.contains("dist-packages/")
            || !is_py;
        if !internal {
            return text;
        }
    }
    first_py.or(first).unwrap_or_default()
}

/// One allocation's life in the replay.
struct Elem {
    size: u64,
    stack: u32,
    free_stack: Option<u32>,
    hint: Option<ProfCategory>,
    meta: u32,
    /// Position it became live at: 0 = before the first event, i + 1 = at event i.
    start: usize,
    /// Position it stopped being live at (None = alive at the end); never 0, and NonZero
    /// keeps the Option at 8 bytes (one element per allocation, millions of them).
    end: Option<NonZeroUsize>,
    /// profiler data: the allocation that replaced this one in place (version bump); always
    /// after the ghost it replaces, so never 0.
    successor: Option<NonZeroUsize>,
}

/// Replays one device of a snapshot.
pub fn analyze_snapshot(snap: &Snapshot) -> Analysis {
    // The device: the trace with the most allocated bytes, else the one with segments.
    let devices: Vec<i64> = {
        let mut d: Vec<i64> = (0..snap.traces.len() as i64).collect();
        for s in &snap.segments {
            if !d.contains(&s.device) {
                d.push(s.device);
            }
        }
        d
    };
    let mut best: Option<(i64, u64, Analysis)> = None;
    for dev in devices {
        let mut warnings = Vec::new();
        let a = analyze_device(snap, dev, &mut warnings);
        let peak = a.per_gpu.peak_allocated.unwrap_or(0);
        if best.as_ref().is_none_or(|(_, b, _)| peak > *b) {
            best = Some((dev, peak, a));
        }
    }
    match best {
        Some((dev, _, mut a)) => {
            if snap.traces.iter().filter(|t| !t.is_empty()).count() > 1
                || snap.segments.iter().any(|s| s.device != dev)
            {
                a.warnings.insert(
                    0,
                    format!("several devices recorded: showing device {dev}, the most loaded"),
                );
            }
            a
        }
        None => analyze_device(snap, 0, &mut Vec::new()),
    }
}

fn analyze_device(snap: &Snapshot, dev: i64, warnings: &mut Vec<String>) -> Analysis {
    let empty = Vec::new();
    let trace = usize::try_from(dev)
        .ok()
        .and_then(|d| snap.traces.get(d))
        .unwrap_or(&empty);
    let has_completed = trace.iter().any(|e| e.action == Action::FreeCompleted);

    let mut elems: Vec<Elem> = Vec::new();
    let mut live: FxMap<u64, usize> = FxMap::default();
    let mut pending: FxSet<u64> = FxSet::default();
    let mut ghost_at: FxMap<u64, usize> = FxMap::default();
    let mut ghosts = 0u64;
    for (i, e) in trace.iter().enumerate() {
        let pos = i + 1;
        match e.action {
            Action::Alloc => {
                if let Some(old) = live.remove(&e.addr) {
                    elems[old].end = NonZeroUsize::new(pos);
                }
                let idx = elems.len();
                elems.push(Elem {
                    size: e.size,
                    stack: e.stack,
                    free_stack: None,
                    hint: e.category,
                    meta: e.user_metadata,
                    start: pos,
                    end: None,
                    successor: None,
                });
                if let Some(g) = ghost_at.remove(&e.addr) {
                    if snap.from_profiler && elems[g].size == e.size {
                        elems[g].successor = NonZeroUsize::new(idx);
                    }
                }
                live.insert(e.addr, idx);
            }
            // `allocated_bytes` drops when the user frees (free_requested); the block returns
            // to the pool at free_completed (c10/cuda/CUDACachingAllocator.cpp `free`).
            Action::FreeRequested | Action::FreeCompleted => {
                if e.action == Action::FreeCompleted && pending.remove(&e.addr) {
                    continue;
                }
                if let Some(idx) = live.remove(&e.addr) {
                    elems[idx].end = NonZeroUsize::new(pos);
                    elems[idx].free_stack = Some(e.stack);
                } else {
                    // Freed but never allocated in the trace: allocated before recording
                    // started (or dropped from the ring buffer), live from the start.
                    ghosts += 1;
                    let idx = elems.len();
                    elems.push(Elem {
                        size: e.size,
                        stack: e.stack,
                        free_stack: Some(e.stack),
                        hint: None,
                        meta: 0,
                        start: 0,
                        end: NonZeroUsize::new(pos),
                        successor: None,
                    });
                    ghost_at.insert(e.addr, idx);
                }
                if e.action == Action::FreeRequested && has_completed {
                    pending.insert(e.addr);
                }
            }
            _ => {}
        }
    }
    // Blocks allocated at the end that the trace never saw allocated: live throughout.
    let segs: Vec<_> = snap.segments.iter().filter(|s| s.device == dev).collect();
    let mut preexisting = 0u64;
    for s in &segs {
        for b in &s.blocks {
            if b.state == BlockState::ActiveAllocated && !live.contains_key(&b.address) {
                preexisting = preexisting.saturating_add(b.size);
                elems.push(Elem {
                    size: b.size,
                    stack: b.stack,
                    free_stack: None,
                    hint: None,
                    meta: 0,
                    start: 0,
                    end: None,
                    successor: None,
                });
            }
        }
    }
    if ghosts > 0 && !snap.from_profiler {
        warnings.push(format!(
            "{ghosts} frees have no matching alloc in the trace (allocated before recording \
             started, or the ring buffer dropped them): counted as live from the start"
        ));
    }
    if preexisting > 0 && !trace.is_empty() {
        warnings.push(format!(
            "{} allocated before the trace began are counted as live throughout",
            vramscope_core::text::bytes(preexisting)
        ));
    }

    // Classify.
    let signals: Vec<Signals> = snap
        .stacks
        .iter()
        .map(|st| attribute::signals(st.iter().map(|&f| &snap.frames[f as usize])))
        .collect();
    let meta: Vec<(Option<Phase>, Option<Category>)> = snap
        .strings
        .iter()
        .map(|s| attribute::parse_metadata(s))
        .collect();
    let mut cats: Vec<Option<Category>> = elems
        .iter()
        .map(|el| {
            let fate = match el.free_stack {
                None => Fate::AliveAtEnd,
                Some(fs) => Fate::Freed(signals[fs as usize]),
            };
            attribute::classify(
                el.hint,
                meta[el.meta as usize].1,
                &signals[el.stack as usize],
                fate,
            )
        })
        .collect();
    for i in 0..elems.len() {
        if cats[i].is_none() {
            if let Some(s) = elems[i].successor {
                cats[i] = cats[s.get()];
            }
        }
    }

    // Phase of each event: user_metadata, else the allocation stack's.
    let n = trace.len();
    let mut phases = vec![Phase::Unknown; n + 1];
    for (i, e) in trace.iter().enumerate() {
        if matches!(e.action, Action::Alloc) {
            phases[i + 1] = meta[e.user_metadata as usize]
                .0
                .unwrap_or_else(|| attribute::phase_of(&signals[e.stack as usize]));
        }
    }
    for i in 1..=n {
        if phases[i] == Phase::Unknown {
            phases[i] = phases[i - 1];
        }
    }

    // Reserved bytes over time: the final segments minus the segment events still to come.
    let reserved_end: u64 = segs
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.total_size));
    let mut net: i128 = 0;
    let seg_delta = |e: &crate::snapshot::TraceEntry| -> i128 {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => e.size as i128,
            Action::SegmentFree | Action::SegmentUnmap => -(e.size as i128),
            _ => 0,
        }
    };
    for e in trace {
        net += seg_delta(e);
    }
    let reserved_known = !snap.from_profiler;
    let mut reserved = reserved_end as i128 - net;
    if reserved < 0 && reserved_known {
        warnings.push(
            "segment events exceed the final segments: reserved bytes are a lower bound".into(),
        );
        reserved = 0;
    }

    // Replay.
    // The elements starting (true) and ending (false) at each position, in element order, in
    // one flat array: `deltas[first[pos]..first[pos + 1]]` (no allocation per position).
    let mut first = vec![0usize; n + 3];
    for el in &elems {
        first[el.start + 1] += 1;
        if let Some(e) = el.end.map(NonZeroUsize::get) {
            first[e + 1] += 1;
        }
    }
    for i in 1..first.len() {
        first[i] += first[i - 1];
    }
    // Each item is `2k + 1` for element k starting, `2k` for it ending (k < isize::MAX: it
    // indexes a Vec of 72-byte elements, so 2k + 1 cannot overflow).
    let mut deltas = vec![0usize; first[n + 2]];
    {
        let mut fill = first.clone();
        for (k, el) in elems.iter().enumerate() {
            deltas[fill[el.start]] = 2 * k + 1;
            fill[el.start] += 1;
            if let Some(e) = el.end.map(NonZeroUsize::get) {
                deltas[fill[e]] = 2 * k;
                fill[e] += 1;
            }
        }
    }
    let mut cur = [0u64; NCAT];
    let mut timeline = Timeline::new(n + 1);
    let mut peak_reserved: u64 = 0;
    for pos in 0..=n {
        // Frees before allocs at one position (an address reused by the same event).
        let at = &deltas[first[pos]..first[pos + 1]];
        for k in at.iter().filter(|&&d| d % 2 == 0).map(|&d| d / 2) {
            let c = cat_index(cats[k]);
            cur[c] = cur[c].saturating_sub(elems[k].size);
        }
        for k in at.iter().filter(|&&d| d % 2 == 1).map(|&d| d / 2) {
            let c = cat_index(cats[k]);
            cur[c] = cur[c].saturating_add(elems[k].size);
        }
        if pos > 0 {
            reserved += seg_delta(&trace[pos - 1]);
        }
        let r = u64::try_from(reserved.max(0)).unwrap_or(u64::MAX);
        peak_reserved = peak_reserved.max(r);
        timeline.push(Point {
            cats: cur,
            phase: phases[pos],
            reserved: reserved_known.then_some(r),
            time_us: if pos > 0 {
                trace[pos - 1].time_us.map(|t| t as f64)
            } else {
                None
            },
        });
    }

    // What was live at the peak.
    let peak = timeline.peak_index().unwrap_or(0);
    // One site per stack live at the peak (formatted once: hundreds of thousands of
    // allocations share a few thousand stacks).
    let is_live = |el: &Elem| el.start <= peak && el.end.is_none_or(|e| e.get() > peak);
    let mut sites: Vec<Option<String>> = vec![None; snap.stacks.len()];
    for el in elems.iter().filter(|el| is_live(el)) {
        if let Some(slot @ None) = sites.get_mut(el.stack as usize) {
            *slot = Some(site_of(snap.stack(el.stack)));
        }
    }
    let live_at_peak: Vec<_> = elems
        .iter()
        .enumerate()
        .filter(|(_, el)| is_live(el))
        .map(|(k, el)| {
            let ph = if el.start == 0 {
                Phase::Unknown
            } else {
                phases[el.start]
            };
            let site = sites
                .get(el.stack as usize)
                .and_then(|s| s.as_deref())
                .unwrap_or("");
            (el.size, cats[k], ph, site)
        })
        .collect();

    let fragmentation = if reserved_known && !segs.is_empty() {
        let mut f = Fragmentation {
            segments: segs.len() as u64,
            reserved: reserved_end,
            allocated: 0,
            active_pending_free: 0,
            internal_free: 0,
            external_free: 0,
            largest_free_block: 0,
            external_fraction: 0.0,
        };
        for s in &segs {
            for b in &s.blocks {
                match b.state {
                    BlockState::ActiveAllocated => {
                        f.allocated = f.allocated.saturating_add(b.size);
                        f.internal_free = f.internal_free.saturating_add(
                            b.size.saturating_sub(b.requested_size.unwrap_or(b.size)),
                        );
                    }
                    BlockState::ActivePendingFree => {
                        f.active_pending_free = f.active_pending_free.saturating_add(b.size)
                    }
                    BlockState::Inactive => {
                        f.external_free = f.external_free.saturating_add(b.size);
                        f.largest_free_block = f.largest_free_block.max(b.size);
                    }
                    BlockState::Other => {}
                }
            }
        }
        if f.reserved > 0 {
            f.external_fraction = f.external_free as f64 / f.reserved as f64;
        }
        Some(f)
    } else {
        None
    };
    if snap.from_profiler {
        warnings.push(
            "profiler-derived snapshot: segments are not the allocator's, so reserved bytes and \
             fragmentation are unknown"
                .into(),
        );
    }
    let ooms = trace
        .iter()
        .filter(|e| e.action == Action::Oom)
        .map(|e| Oom {
            requested: e.size,
            device_free: e.device_free,
            site: site_of(snap.stack(e.stack)),
        })
        .collect::<Vec<_>>();
    if !ooms.is_empty() {
        warnings.push(format!(
            "{} out-of-memory event(s) in the trace",
            ooms.len()
        ));
    }
    if trace.is_empty() && !segs.is_empty() {
        warnings.push(
            "no allocation trace (recorded with enabled=\"state\", or a 1.13 snapshot): \
             the peak is the snapshot moment"
                .into(),
        );
    }

    let kind = match (snap.layout, snap.from_profiler) {
        (crate::snapshot::Layout::Legacy113, _) => "cuda_snapshot_1_13",
        (_, true) => "profiler_snapshot",
        _ => "cuda_snapshot",
    };
    assemble(
        SourceInfo {
            kind: kind.into(),
            pickle_protocol: Some(snap.protocol),
            device: Some(dev),
            events: n,
        },
        timeline,
        reserved_known.then_some(peak_reserved),
        live_at_peak,
        fragmentation,
        ooms,
        std::mem::take(warnings),
    )
}

#[cfg(test)]
mod tests {
    use super::{sustained_max, Phase, Point, Timeline, MAX_POINTS, NCAT};

    fn point(params: u64, phase: Phase) -> Point {
        let mut cats = [0u64; NCAT];
        cats[0] = params;
        Point {
            cats,
            phase,
            reserved: None,
            time_us: None,
        }
    }

    #[test]
    fn timeline_keeps_each_buckets_highest_and_the_first_peak() {
        // 2·MAX_POINTS points → buckets of two. Point i holds (i % 7) bytes, except that
        // points 100 and 300 both hold 50 (the peak: the first of them), and only point 10 has
        // a phase (forward), so the peak's phase is forward, carried from point 10.
        let n = 2 * MAX_POINTS;
        let mut t = Timeline::new(n);
        for i in 0..n {
            let bytes = if i == 100 || i == 300 {
                50
            } else {
                (i % 7) as u64
            };
            let phase = if i == 10 {
                Phase::Forward
            } else {
                Phase::Unknown
            };
            t.push(point(bytes, phase));
        }
        assert_eq!(t.peak_index(), Some(100));
        assert_eq!(t.len(), n);
        let a = super::assemble(
            super::SourceInfo {
                kind: "test".into(),
                pickle_protocol: None,
                device: None,
                events: n,
            },
            t,
            None,
            Vec::new(),
            None,
            Vec::new(),
            Vec::new(),
        );
        assert_eq!(a.per_gpu.peak_allocated, Some(50));
        assert_eq!(a.per_gpu.peak_phase.as_deref(), Some("forward"));
        assert_eq!(a.timeline.len(), MAX_POINTS);
        // Bucket 3 is points 6 and 7: 6 % 7 = 6 and 7 % 7 = 0 → point 6, 6 bytes.
        assert_eq!(a.timeline[3].label, "event 6");
        assert_eq!(a.timeline[3].allocated, 6);
        // Bucket 50 is points 100 and 101: the peak.
        assert_eq!(a.timeline[50].allocated, 50);
    }

    #[test]
    fn sustained_max_is_the_best_window_minimum() {
        // Windows of 3 over [5, 1, 4, 4, 4, 2, 3]: minima 1, 1, 4, 2, 2 (by hand), best 4.
        assert_eq!(sustained_max(&[5, 1, 4, 4, 4, 2, 3], 3), 4);
        // A one-point spike does not count with a window of 2: minima 1, 1, 1, 2, best 2.
        assert_eq!(sustained_max(&[1, 9, 1, 2, 2], 2), 2);
        // Shorter than the window: the minimum of all.
        assert_eq!(sustained_max(&[7, 3], 5), 3);
    }
}
