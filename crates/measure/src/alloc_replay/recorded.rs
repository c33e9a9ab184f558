//! What the record itself says, before any replay: the settings the allocator ran with,
//! reserved memory at the trace's start and its peak (from the record's own segment events),
//! the memory the allocator could have had (from its OOMs), and the segments and blocks that
//! existed before the trace began.

use crate::snapshot::{Action, BlockState, Snapshot, TraceEntry};
use std::collections::{BTreeMap, HashMap, HashSet};
use vramscope_core::allocator::size::{round_size, SMALL_BUFFER, SMALL_SIZE};
use vramscope_core::allocator::{AllocatorConfig, IntervalBound, RoundupDivisions};

const MIB: u64 = 1 << 20;

/// A segment that existed when the trace began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreSegment {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub small: bool,
}

/// A block live when the trace began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreBlock {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub stream: u64,
}

/// The record's side of the comparison.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorded {
    /// Reserved bytes at the trace's start; `None` when the record is inconsistent.
    pub start_reserved: Option<u64>,
    pub peak_reserved: Option<u64>,
    /// What the allocator could hold (finite only when the trace has an OOM).
    pub capacity: u64,
    pub segment_events: usize,
    pub ooms: usize,
    pub pre_segments: Vec<PreSegment>,
    pub pre_blocks: Vec<PreBlock>,
}

fn is_segment_event(a: Action) -> bool {
    matches!(
        a,
        Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap
    )
}

/// + for a cudaMalloc or map, − for a cudaFree or unmap.
fn reserved_delta(e: &TraceEntry) -> i128 {
    match e.action {
        Action::SegmentAlloc | Action::SegmentMap => e.size as i128,
        Action::SegmentFree | Action::SegmentUnmap => -(e.size as i128),
        _ => 0,
    }
}

/// The settings the allocator ran with: the typed `allocator_settings` when the file has them,
/// else `PYTORCH_CUDA_ALLOC_CONF` as written, else PyTorch's defaults (said in `notes`).
pub(crate) fn config_of(snap: &Snapshot, notes: &mut Vec<String>) -> AllocatorConfig {
    let Some(s) = &snap.allocator_settings else {
        if let Some(conf) = &snap.alloc_conf {
            return AllocatorConfig::parse(conf).unwrap_or_else(|e| {
                notes.push(format!("{e}; PyTorch's defaults assumed"));
                AllocatorConfig::default()
            });
        }
        notes.push("no allocator_settings in the file: PyTorch's defaults assumed".into());
        return AllocatorConfig::default();
    };
    let mut config = AllocatorConfig {
        expandable_segments: s.expandable_segments.unwrap_or(false),
        ..AllocatorConfig::default()
    };
    if let Some(max) = s.max_split_size.filter(|&m| m > 0 && m as u64 != u64::MAX) {
        config.max_split_size_mb = Some(max as u64 / MIB);
    }
    config.garbage_collection_threshold = s.garbage_collection_threshold.filter(|&t| t > 0.0);
    if s.roundup_power2_divisions.iter().any(|&(_, d)| d > 0) {
        let list = s
            .roundup_power2_divisions
            .iter()
            .map(|&(mb, d)| (IntervalBound::Mb(mb), d))
            .collect();
        config.roundup_power2_divisions = Some(RoundupDivisions::Intervals(list));
    }
    if let Err(e) = config.validate() {
        notes.push(format!("{e}; PyTorch's defaults assumed"));
        return AllocatorConfig::default();
    }
    config
}

/// Everything the record says on its own about device `device`'s trace.
pub(crate) fn analyse(
    snap: &Snapshot,
    device: usize,
    config: &AllocatorConfig,
    notes: &mut Vec<String>,
) -> Recorded {
    let trace = &snap.traces[device];
    let dump = snap.reserved_at_dump(device as i64) as i128;
    let net: i128 = trace.iter().map(reserved_delta).sum();
    let mut rec = Recorded {
        capacity: u64::MAX,
        segment_events: trace.iter().filter(|e| is_segment_event(e.action)).count(),
        ooms: trace.iter().filter(|e| e.action == Action::Oom).count(),
        ..Recorded::default()
    };
    let start = dump - net;
    if start < 0 {
        notes.push(format!(
            "the trace's segment events add up to more than the dump holds ({} B): reserved at \
             its start unknown, taken as 0",
            -start
        ));
        rec.start_reserved = None;
    } else {
        rec.start_reserved = Some(start as u64);
    }
    let (peak, capacity) = running_reserved(trace, start.max(0) as u64);
    rec.peak_reserved = Some(peak).filter(|_| start >= 0);
    if let Some(c) = capacity {
        rec.capacity = c;
        notes.push(format!(
            "the record has OOMs: the model may hold {c} B (reserved + free at the tightest OOM)"
        ));
    }
    if start > 0 {
        rec.pre_segments = pre_segments(snap, device, trace, notes);
        rec.pre_blocks = pre_blocks(snap, device, trace, &rec.pre_segments, config, notes);
    }
    rec
}

/// The largest running reserved sum from `start`, and the tightest reserved + `device_free`
/// over the OOM entries.
fn running_reserved(trace: &[TraceEntry], start: u64) -> (u64, Option<u64>) {
    let (mut now, mut peak) = (start as i128, start as i128);
    let mut capacity: Option<u64> = None;
    for e in trace {
        now += reserved_delta(e);
        peak = peak.max(now);
        if e.action == Action::Oom {
            if let Some(free) = e.device_free {
                let c = (now.max(0) as u64).saturating_add(free);
                capacity = Some(capacity.map_or(c, |old| old.min(c)));
            }
        }
    }
    (peak.max(0) as u64, capacity)
}

/// The segments at the trace's start: the dump's, less those the trace allocated, plus those
/// it freed, walking the trace backwards. Expandable segments are left out (their pre-trace
/// pages are unknown).
fn pre_segments(
    snap: &Snapshot,
    device: usize,
    trace: &[TraceEntry],
    notes: &mut Vec<String>,
) -> Vec<PreSegment> {
    let mut segs: BTreeMap<u64, PreSegment> = BTreeMap::new();
    let mut expandable = 0usize;
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        if s.is_expandable {
            expandable += 1;
            continue;
        }
        let small = match s.segment_type.as_deref() {
            Some(t) => t == "small",
            None => s.total_size <= SMALL_BUFFER,
        };
        segs.insert(
            s.address,
            PreSegment {
                addr: s.address,
                size: s.total_size,
                stream: s.stream,
                small,
            },
        );
    }
    for e in trace.iter().rev() {
        match e.action {
            Action::SegmentAlloc => {
                segs.remove(&e.addr);
            }
            Action::SegmentFree => {
                let seg = PreSegment {
                    addr: e.addr,
                    size: e.size,
                    stream: e.stream,
                    small: e.size <= SMALL_BUFFER,
                };
                segs.insert(e.addr, seg);
            }
            Action::SegmentMap | Action::SegmentUnmap => expandable += 1,
            _ => {}
        }
    }
    if expandable > 0 {
        notes.push("expandable segments before the trace are not seeded (pages unknown)".into());
    }
    segs.into_values().collect()
}

/// The blocks live at the trace's start: those freed in it before any allocation at their
/// address, and those allocated at the dump at an address the trace never allocated.
fn pre_blocks(
    snap: &Snapshot,
    device: usize,
    trace: &[TraceEntry],
    segs: &[PreSegment],
    config: &AllocatorConfig,
    notes: &mut Vec<String>,
) -> Vec<PreBlock> {
    let mut live: HashSet<u64> = HashSet::new();
    let mut ever: HashSet<u64> = HashSet::new();
    let mut blocks: BTreeMap<u64, PreBlock> = BTreeMap::new();
    let mut inferred: HashMap<u64, u64> = HashMap::new();
    for e in trace {
        match e.action {
            Action::Alloc => {
                live.insert(e.addr);
                ever.insert(e.addr);
            }
            Action::FreeCompleted if !live.remove(&e.addr) && !ever.contains(&e.addr) => {
                ever.insert(e.addr);
                let rounded = round_size(e.size, &config.divisions_table());
                inferred.insert(e.addr, rounded);
                blocks.insert(
                    e.addr,
                    PreBlock {
                        addr: e.addr,
                        size: rounded,
                        requested: e.size,
                        stream: e.stream,
                    },
                );
            }
            _ => {}
        }
    }
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        for b in &s.blocks {
            let active = matches!(
                b.state,
                BlockState::ActiveAllocated | BlockState::ActivePendingFree
            );
            if active && !ever.contains(&b.address) {
                let block = PreBlock {
                    addr: b.address,
                    size: b.size,
                    requested: b.requested_size.unwrap_or(b.size),
                    stream: s.stream,
                };
                blocks.insert(b.address, block);
            }
        }
    }
    let grown = grow_unsplit(&mut blocks, &inferred, segs);
    notes.push(format!(
        "the trace starts mid-run: {} segments and {} blocks live before it seeded; {} block \
         sizes inferred from their request ({} grown to the next block, unsplit)",
        segs.len(),
        blocks.len(),
        inferred.len(),
        grown
    ));
    blocks.into_values().collect()
}

/// A pre-trace block whose size was inferred from its request, in a large-pool segment, is
/// grown to the next known block (or the segment's end) when 1 MiB or less lies between:
/// `should_split` would not have split that off. Returns how many grew.
fn grow_unsplit(
    blocks: &mut BTreeMap<u64, PreBlock>,
    inferred: &HashMap<u64, u64>,
    segs: &[PreSegment],
) -> usize {
    let starts: Vec<u64> = blocks.keys().copied().collect();
    let mut grown = 0;
    for (k, &addr) in starts.iter().enumerate() {
        if !inferred.contains_key(&addr) {
            continue;
        }
        let Some(seg) = segs
            .iter()
            .find(|s| s.addr <= addr && addr < s.addr + s.size)
        else {
            continue;
        };
        if seg.small {
            continue;
        }
        let seg_end = seg.addr + seg.size;
        let next = starts.get(k + 1).copied().filter(|&n| n < seg_end);
        let boundary = next.unwrap_or(seg_end);
        let b = blocks.get_mut(&addr).expect("listed");
        let end = b.addr + b.size;
        if boundary > end && boundary - end <= SMALL_SIZE {
            b.size = boundary - b.addr;
            grown += 1;
        }
    }
    grown
}
