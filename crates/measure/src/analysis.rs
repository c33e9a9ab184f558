//! From a record to the contract's `analyze` shape: replay the events, find the peak of
//! allocated bytes, say what was live then by category and by stack, and what the segments say
//! about reserved memory and fragmentation.

use crate::attribute::Phase;
use crate::infer::{confidence_at_peak, Confidence, Inference};
pub(crate) use crate::replay::{Point, Timeline};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
pub use vramscope_core::report::PeakFigures;
use vramscope_core::report::{
    Category, CategoryBytes, Components, ModelStates, TimelinePoint, BEFORE_RECORDING,
};

/// The categories a measurement splits allocated bytes into, in table order.
pub const CATS: [Category; 8] = Category::MEASURED;
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
    /// Chrome traces: bytes allocated before profiling began and never freed during it, known
    /// only from the events' `Total Allocated` (usually the model states). Absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub before_recording: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
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
    /// Bytes live at the measured peak, by category, plus what could not be attributed.
    pub components: MeasuredComponents,
    /// Bytes of each model state held over the record (its maximum), whatever the peak moment.
    pub model_states: ModelStates,
    #[serde(flatten)]
    pub peaks: PeakFigures,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceInfo {
    /// `cuda_snapshot`, `cuda_snapshot_1_13`, `profiler_snapshot`, `traced_snapshot`
    /// (`vramscope.trace`), `memory_timeline`,
    /// `memory_timeline_raw`, `chrome_trace`.
    pub kind: String,
    /// The pickle protocol of a snapshot file; null for JSON records.
    pub pickle_protocol: Option<u8>,
    /// The CUDA device the record is of, where it names one.
    pub device: Option<i64>,
    /// How many allocator events (trace entries, profiler or trace events) were read.
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
    /// The allocation site (most telling frame) the group shares, or "".
    pub site: String,
    /// Bytes the group holds at the peak.
    pub bytes: u64,
    /// How many allocations the group holds at the peak.
    pub count: u64,
    /// The category its allocations are in (one site in two categories is two groups).
    pub category: &'static str,
}

/// Final segment state, as `python -m torch.cuda._memory_viz stats` splits it:
/// reserved = allocated + pending free + internal + external... (internal is inside allocated
/// blocks: `size − requested_size`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fragmentation {
    /// Segments (`cudaMalloc` calls) the allocator holds at the end.
    pub segments: u64,
    /// Bytes of those segments.
    pub reserved: u64,
    /// Bytes of their blocks that are allocated.
    pub allocated: u64,
    /// Freed blocks still waiting on a stream's event before reuse.
    pub active_pending_free: u64,
    /// Inside allocated blocks: rounding (`size − requested_size`).
    pub internal_free: u64,
    /// Inactive blocks: cached, free, reusable only by requests that fit.
    pub external_free: u64,
    /// The largest inactive block: the largest request served without a new segment.
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
    /// The most telling frame of the failed request's stack, or "".
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
    /// What was inferred about blocks allocated before recording (crate::infer).
    pub inferences: Vec<Inference>,
    /// How sure each category at the peak is: "high" (allocation stacks, metadata, the
    /// profiler's categories, or exact size matches), "medium", "low".
    pub confidence: BTreeMap<&'static str, Confidence>,
    /// A CUDA snapshot with an allocation trace: the trace replayed through the allocator
    /// model and under other settings (`crate::allocator_section`). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator: Option<crate::allocator_section::AllocatorSection>,
}

impl Analysis {
    /// Adds the inferences: their lines lead the warnings, and the confidence at the peak is
    /// recomputed.
    pub(crate) fn attach_inferences(&mut self, inferences: Vec<Inference>) {
        let lines = inferences.iter().map(Inference::describe);
        self.warnings.splice(0..0, lines);
        self.inferences = inferences;
        self.confidence = self.confidence_now();
    }

    fn confidence_now(&self) -> BTreeMap<&'static str, Confidence> {
        let c = &self.per_gpu.components;
        let at_peak: Vec<(Category, u64)> = CATS.iter().map(|&k| (k, c.get(k))).collect();
        confidence_at_peak(&at_peak, &self.inferences)
    }
}

/// What a record says besides its allocations: where it came from, the reserved bytes at its
/// peak, its segments, its OOMs and what its reader warns about.
pub(crate) struct Record {
    pub source: SourceInfo,
    pub peak_reserved: Option<u64>,
    pub fragmentation: Option<Fragmentation>,
    pub ooms: Vec<Oom>,
    pub warnings: Vec<String>,
}

/// One allocation live at the peak: bytes, category, the phase it was made in, its site.
pub(crate) struct LiveBlock<'a> {
    pub bytes: u64,
    pub category: Option<Category>,
    pub phase: Phase,
    pub site: &'a str,
}

/// Assembles the report from the replayed timeline, what the record says, and the allocations
/// live at the peak.
pub(crate) fn assemble(record: Record, timeline: Timeline, live: Vec<LiveBlock>) -> Analysis {
    let (components, peak_allocated, peak_phase) = at_peak(&timeline);
    let model_states = ModelStates {
        parameters: timeline.states[0].finish(),
        gradients: timeline.states[1].finish(),
        optimizer_states: timeline.states[2].finish(),
        master_weights: timeline.states[3].finish(),
    };
    let mut warnings = record.warnings;
    peak_warnings(&components, peak_allocated, timeline.seen, &mut warnings);
    let (top_allocations, top_frames) = tops(live);
    let mut a = Analysis {
        source: record.source,
        per_gpu: MeasuredPerGpu {
            components,
            model_states,
            peaks: PeakFigures {
                activation_bytes_per_layer: None,
                peak_allocated,
                peak_reserved: record.peak_reserved,
                device_total: None,
                peak_phase,
            },
        },
        timeline: downsample(timeline),
        top_allocations,
        top_frames,
        fragmentation: record.fragmentation,
        ooms: record.ooms,
        warnings,
        inferences: Vec::new(),
        confidence: BTreeMap::new(),
        allocator: None,
    };
    a.confidence = a.confidence_now();
    a
}

/// The components at the peak (the allocator reserve from the reserved bytes there, when the
/// record knows them), the bytes allocated there and the phase in force.
fn at_peak(timeline: &Timeline) -> (MeasuredComponents, Option<u64>, Option<String>) {
    let mut comps = MeasuredComponents::default();
    let Some((_, p, phase)) = &timeline.peak else {
        return (comps, None, None);
    };
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
    comps.before_recording = p.before;
    if let Some(r) = p.reserved {
        comps.base.allocator_reserve = r.saturating_sub(p.total());
    }
    // The phase of the peak: its own, else the last known one before it.
    let peak_phase = (*phase != Phase::Unknown).then(|| phase.name().to_string());
    (comps, Some(p.total()), peak_phase)
}

/// What the peak itself warns about: bytes no category explains, or no allocations at all.
fn peak_warnings(
    comps: &MeasuredComponents,
    peak_allocated: Option<u64>,
    seen: usize,
    warnings: &mut Vec<String>,
) {
    if comps.unattributed > 0 {
        if let Some(total) = peak_allocated.filter(|&t| t > 0) {
            warnings.push(format!(
                "{:.1}% of the bytes live at the peak could not be attributed to a category",
                comps.unattributed as f64 * 100.0 / total as f64
            ));
        }
    }
    if seen == 0 || peak_allocated == Some(0) {
        warnings.push(
            "the record holds no allocations: was memory history recording on \
             (torch.cuda.memory._record_memory_history) before the step?"
                .into(),
        );
    }
}

/// The largest allocations live at the peak and the sites holding the most, ten each.
fn tops(mut live: Vec<LiveBlock>) -> (Vec<TopAllocation>, Vec<FrameGroup>) {
    live.sort_by_key(|l| std::cmp::Reverse(l.bytes));
    let top_allocations = live
        .iter()
        .take(10)
        .map(|l| TopAllocation {
            bytes: l.bytes,
            category: l.category.unwrap_or(Category::Unattributed).name(),
            phase: l.phase.name(),
            site: l.site.to_string(),
        })
        .collect();
    let mut groups: HashMap<(&str, usize), (u64, u64)> = HashMap::new();
    for l in &live {
        let g = groups.entry((l.site, cat_index(l.category))).or_default();
        g.0 = g.0.saturating_add(l.bytes);
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

    (top_allocations, top_frames)
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
            let mut by_category = CategoryBytes::default();
            for (k, &c) in CATS.iter().enumerate() {
                by_category.set(c, p.cats[k]);
            }
            by_category.insert(BEFORE_RECORDING, p.before);
            TimelinePoint {
                phase: p.phase.name().into(),
                label: label.into(),
                allocated: p.total(),
                by_category,
            }
        })
        .collect()
}

pub(crate) use crate::site::site_of;
pub use crate::snapshot_replay::analyze_snapshot;
