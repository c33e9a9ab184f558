//! The one allocation replay every per-allocation record goes through (snapshots, profiler
//! snapshots, Chrome traces): addresses → lifetimes ([`Lifetimes`]), lifetimes and their
//! categories ([`Attributed`]) → a per-category running sum at every position ([`replay`],
//! folded into a [`Timeline`] that keeps the peak and a few hundred points), what was live at a
//! position ([`live_at`]), and the report at the peak ([`Attributed::report`]). A reader only
//! translates its events into lives and says what each position carries ([`Moment`]).
//!
//! Positions: 0 is "before the first event", `i + 1` is "after event `i`". At one position frees
//! are applied before allocations (an address reused by the same event), each in lifetime order.

use crate::analysis::{assemble, cat_index, Analysis, LiveBlock, Record, MAX_POINTS, NCAT};
use crate::attribute::Phase;
use crate::fxhash::FxMap;
use crate::infer::Inference;
use std::num::NonZeroUsize;
use vramscope_core::report::Category;

/// One allocation's life: bytes, the position it became live at and the one it stopped at.
#[derive(Debug, Clone)]
pub(crate) struct Life<T> {
    pub size: u64,
    /// Position it became live at: 0 = before the first event, i + 1 = at event i.
    pub start: usize,
    /// Position it stopped being live at (None = alive at the end); never 0, and NonZero
    /// keeps the Option at 8 bytes (one life per allocation, millions of them).
    pub end: Option<NonZeroUsize>,
    /// What the reader knows about it (stacks, sites, signals).
    pub info: T,
}

impl<T> Life<T> {
    /// Whether it is live just after position `pos`'s events.
    pub fn live_at(&self, pos: usize) -> bool {
        self.start <= pos && self.end.is_none_or(|e| e.get() > pos)
    }
}

/// Lifetimes built from allocation and free events keyed by address.
pub(crate) struct Lifetimes<T> {
    pub lives: Vec<Life<T>>,
    live: FxMap<u64, usize>,
}

impl<T> Lifetimes<T> {
    pub fn new() -> Self {
        Lifetimes {
            lives: Vec::new(),
            live: FxMap::default(),
        }
    }

    /// An allocation at position `pos`: a block still live at that address ends here (its free
    /// was never recorded). Returns the new life's index.
    pub fn alloc(&mut self, addr: u64, size: u64, pos: usize, info: T) -> usize {
        let idx = self.lives.len();
        if let Some(old) = self.live.insert(addr, idx) {
            self.lives[old].end = NonZeroUsize::new(pos);
        }
        self.lives.push(Life {
            size,
            start: pos,
            end: None,
            info,
        });
        idx
    }

    /// A free at position `pos`: ends the block live at `addr`, if any, and returns its index.
    pub fn free(&mut self, addr: u64, pos: usize) -> Option<usize> {
        let idx = self.live.remove(&addr)?;
        self.lives[idx].end = NonZeroUsize::new(pos);
        Some(idx)
    }

    /// A block live from before the first event until position `end` (None = to the end):
    /// allocated before recording began. It is not entered under its address.
    pub fn before(&mut self, size: u64, end: Option<usize>, info: T) -> usize {
        let idx = self.lives.len();
        self.lives.push(Life {
            size,
            start: 0,
            end: end.and_then(NonZeroUsize::new),
            info,
        });
        idx
    }

    /// Whether a block allocated in the record is live at `addr` now.
    pub fn is_live(&self, addr: u64) -> bool {
        self.live.contains_key(&addr)
    }
}

/// What a position carries besides the lives: the phase in force, reserved bytes, time, and
/// bytes known only as a total from before recording.
pub(crate) struct Moment {
    pub before: u64,
    pub phase: Phase,
    pub reserved: Option<u64>,
    pub time_us: Option<f64>,
}

/// The lives starting and ending at each position, in one flat array:
/// `items[first[pos]..first[pos + 1]]`, each `2k + 1` for life k starting, `2k` for it ending
/// (no allocation per position; k indexes a Vec, so 2k + 1 cannot overflow).
fn index_by_position<T>(lives: &[Life<T>], n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut first = vec![0usize; n + 3];
    for el in lives {
        first[el.start + 1] += 1;
        if let Some(e) = el.end.map(NonZeroUsize::get) {
            first[e + 1] += 1;
        }
    }
    for i in 1..first.len() {
        first[i] += first[i - 1];
    }
    let mut items = vec![0usize; first[n + 2]];
    let mut fill = first.clone();
    for (k, el) in lives.iter().enumerate() {
        items[fill[el.start]] = 2 * k + 1;
        fill[el.start] += 1;
        if let Some(e) = el.end.map(NonZeroUsize::get) {
            items[fill[e]] = 2 * k;
            fill[e] += 1;
        }
    }
    (first, items)
}

/// Replays positions `0..=n`: the running sum of live bytes per category (`cats[k]` is life k's
/// category), with `moment(pos)` giving each position's phase, reserved bytes and time.
pub(crate) fn replay<T>(
    lives: &[Life<T>],
    cats: &[Option<Category>],
    n: usize,
    mut moment: impl FnMut(usize) -> Moment,
) -> Timeline {
    let (first, items) = index_by_position(lives, n);
    let mut cur = [0u64; NCAT];
    let mut timeline = Timeline::new(n + 1);
    for pos in 0..=n {
        let at = &items[first[pos]..first[pos + 1]];
        for k in at.iter().filter(|&&d| d % 2 == 0).map(|&d| d / 2) {
            let c = cat_index(cats[k]);
            cur[c] = cur[c].saturating_sub(lives[k].size);
        }
        for k in at.iter().filter(|&&d| d % 2 == 1).map(|&d| d / 2) {
            let c = cat_index(cats[k]);
            cur[c] = cur[c].saturating_add(lives[k].size);
        }
        let m = moment(pos);
        timeline.push(Point {
            cats: cur,
            before: m.before,
            phase: m.phase,
            reserved: m.reserved,
            time_us: m.time_us,
        });
    }
    timeline
}

/// The lives live just after position `pos`, with their indices.
pub(crate) fn live_at<T>(lives: &[Life<T>], pos: usize) -> impl Iterator<Item = (usize, &Life<T>)> {
    lives
        .iter()
        .enumerate()
        .filter(move |(_, l)| l.live_at(pos))
}

/// Live bytes after each position `0..=n`, all categories together: the replay without
/// categories (a Chrome trace compares it with the allocator's own `Total Allocated`).
pub(crate) fn live_totals<T>(lives: &[Life<T>], n: usize) -> Vec<u64> {
    let mut delta = vec![0i128; n + 2];
    for l in lives {
        delta[l.start] += l.size as i128;
        if let Some(e) = l.end {
            delta[e.get()] -= l.size as i128;
        }
    }
    let mut cur: i128 = 0;
    delta[..=n]
        .iter()
        .map(|d| {
            cur += d;
            u64::try_from(cur.max(0)).unwrap_or(u64::MAX)
        })
        .collect()
}

/// What a reader made of its record's allocations: their lives, each one's category, and what
/// the inference ([`crate::infer`]) said of the blocks it looked at.
pub(crate) struct Attributed<T> {
    pub lives: Vec<Life<T>>,
    pub cats: Vec<Option<Category>>,
    pub inferences: Vec<Inference>,
    /// Per life, the inference that set its category (`infer::NONE` when none did); may be
    /// empty when nothing was inferred.
    pub by_life: Vec<u8>,
}

impl<T> Attributed<T> {
    /// Replays positions `0..=n` (see [`replay`]).
    pub fn replay(&self, n: usize, moment: impl FnMut(usize) -> Moment) -> Timeline {
        replay(&self.lives, &self.cats, n, moment)
    }

    /// The report at the timeline's peak: each inference credited with the bytes it explains
    /// there, and the lives live there, whose phase and site `describe` tells.
    pub fn report<'a>(
        mut self,
        timeline: Timeline,
        record: Record,
        describe: impl Fn(&Life<T>) -> (Phase, &'a str),
    ) -> Analysis {
        let peak = timeline.peak_index().unwrap_or(0);
        self.credit_inferences(peak);
        let live = live_at(&self.lives, peak)
            .map(|(k, el)| {
                let (phase, site) = describe(el);
                LiveBlock {
                    bytes: el.size,
                    category: self.cats[k],
                    phase,
                    site,
                }
            })
            .collect();
        let mut a = assemble(record, timeline, live);
        a.attach_inferences(self.inferences);
        a
    }

    /// Adds the bytes live at `pos` to the inference that categorized them.
    fn credit_inferences(&mut self, pos: usize) {
        for (k, el) in live_at(&self.lives, pos) {
            if let Some(x) = self
                .by_life
                .get(k)
                .and_then(|&id| self.inferences.get_mut(id as usize))
            {
                x.bytes_at_peak = x.bytes_at_peak.saturating_add(el.size);
            }
        }
    }
}

/// One moment of the replay: bytes per category after the events at that moment.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub cats: [u64; NCAT],
    /// Bytes allocated before recording began that the record knows only as a total (a
    /// Chrome trace's `Total Allocated` beyond its events).
    pub before: u64,
    pub phase: Phase,
    pub reserved: Option<u64>,
    pub time_us: Option<f64>,
}

impl Point {
    pub(crate) fn total(&self) -> u64 {
        self.cats
            .iter()
            .fold(self.before, |a, &b| a.saturating_add(b))
    }
}

/// A sliding-window minimum fed one value at a time, keeping the best (largest) window minimum:
/// a monotonic queue of candidate minima (positions, values increasing), O(1) amortized per
/// value and O(window) memory, so a replay of millions of events never holds the series.
#[derive(Debug, Clone)]
pub(crate) struct SustainedMax {
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
    pub(crate) fn finish(&self) -> u64 {
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
    pub(crate) bucket: usize,
    pub(crate) seen: usize,
    pub(crate) t0: Option<f64>,
    pub(crate) last_phase: Phase,
    pub(crate) peak: Option<(usize, Point, Phase)>,
    pub(crate) states: [SustainedMax; 4],
    /// One point per finished bucket (its highest, first on ties), and the open bucket's.
    pub(crate) samples: Vec<(usize, Point)>,
    pub(crate) open: Option<(usize, Point)>,
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

#[cfg(test)]
mod tests {
    use super::{live_totals, sustained_max, Life, Point, Timeline};
    use crate::analysis::{MAX_POINTS, NCAT};
    use crate::attribute::Phase;

    fn point(params: u64, phase: Phase) -> Point {
        let mut cats = [0u64; NCAT];
        cats[0] = params;
        Point {
            cats,
            before: 0,
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
        let record = crate::analysis::Record {
            source: crate::analysis::SourceInfo {
                kind: "test".into(),
                pickle_protocol: None,
                device: None,
                events: n,
            },
            peak_reserved: None,
            fragmentation: None,
            ooms: Vec::new(),
            warnings: Vec::new(),
        };
        let a = crate::analysis::assemble(record, t, Vec::new());
        assert_eq!(a.per_gpu.peaks.peak_allocated, Some(50));
        assert_eq!(a.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
        assert_eq!(a.timeline.len(), MAX_POINTS);
        // Bucket 3 is points 6 and 7: 6 % 7 = 6 and 7 % 7 = 0 → point 6, 6 bytes.
        assert_eq!(a.timeline[3].label, "event 6");
        assert_eq!(a.timeline[3].allocated, 6);
        // Bucket 50 is points 100 and 101: the peak.
        assert_eq!(a.timeline[50].allocated, 50);
    }

    #[test]
    fn live_totals_follow_starts_and_ends() {
        // 10 bytes live from before the first event until position 3; 5 bytes from position 1
        // to the end; 7 bytes at position 2 only. After each position 0..=3, by hand:
        // 10, 10 + 5, 10 + 5 + 7, 5.
        let life = |size, start, end: Option<usize>| Life {
            size,
            start,
            end: end.and_then(std::num::NonZeroUsize::new),
            info: (),
        };
        let lives = [life(10, 0, Some(3)), life(5, 1, None), life(7, 2, Some(3))];
        assert_eq!(live_totals(&lives, 3), [10, 15, 22, 5]);
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
