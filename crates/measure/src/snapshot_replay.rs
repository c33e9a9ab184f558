//! A CUDA allocator snapshot (`torch.cuda.memory._dump_snapshot`, or one derived from the
//! profiler) through the shared replay ([`crate::replay`]): its trace events become lifetimes,
//! each is classified from its stacks ([`crate::attribute`]), and the segments say what was live
//! before the trace began, what is reserved and how fragmented it is.

use crate::alloc_replay::{replay_device, traced_devices, AllocReplay};
use crate::analysis::{site_of, Analysis, Fragmentation, Oom, Record, SourceInfo};
use crate::attribute::{self, Fate, Phase, Signals};
use crate::fxhash::{FxMap, FxSet};
use crate::infer::{self, Facts, RecordFacts};
use crate::replay::{self, Attributed, Life, Lifetimes, Moment, Timeline};
use crate::snapshot::{
    Action, BlockState, ProfCategory, Segment, Snapshot, TraceEntry, WarmupCall,
};
use crate::traced_device::{traced_device, TracedDevice};
use std::num::NonZeroUsize;
use vramscope_core::allocator::size::round_size;
use vramscope_core::allocator::AllocatorConfig;
use vramscope_core::report::Category;

/// What a snapshot says about one allocation besides its bytes and lifetime.
#[derive(Debug, Clone)]
pub(crate) struct SnapInfo {
    /// Size for matching shapes: the requested size (a segment block's `size` is rounded up).
    pub key: u64,
    pub stack: u32,
    pub free_stack: Option<u32>,
    pub hint: Option<ProfCategory>,
    pub meta: u32,
    /// profiler data: the allocation that replaced this one in place (version bump); always
    /// after the ghost it replaces, so never 0.
    pub successor: Option<NonZeroUsize>,
}

impl SnapInfo {
    fn new(key: u64, stack: u32, hint: Option<ProfCategory>, meta: u32) -> Self {
        SnapInfo {
            key,
            stack,
            free_stack: None,
            hint,
            meta,
            successor: None,
        }
    }
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
    let mut best: Option<(i64, u64, Analysis, Option<AllocReplay>)> = None;
    for dev in devices {
        let mut warnings = Vec::new();
        let (a, replay) = analyze_device(snap, dev, &mut warnings);
        let peak = a.per_gpu.peaks.peak_allocated.unwrap_or(0);
        if best.as_ref().is_none_or(|(_, b, _, _)| peak > *b) {
            best = Some((dev, peak, a, replay));
        }
    }
    match best {
        Some((dev, _, mut a, replay)) => {
            a.allocator = replay.as_ref().map(crate::allocator_section::from_replay);
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
        None => analyze_device(snap, 0, &mut Vec::new()).0,
    }
}

/// The block the caching allocator gave each of a trace's allocations, where a replay through
/// its model (`vramscope_core::allocator`) knows it: a CUDA allocator's own record, its trace
/// replayed against its segment events ([`crate::alloc_replay`]). `max_memory_allocated`
/// counts blocks (`alloc_found_block` adds `block->size`, c10/cuda/CUDACachingAllocator.cpp),
/// not the sizes the trace records (the request), so an allocation's bytes are its block's.
///
/// A CUDA trace of `vramscope.trace` is replayed too ([`crate::traced_device`]: its reserve
/// and device total), but its allocations keep their rounded requests: the remainder a block
/// keeps unsplit depends on what the cache held, and the record starts from the last step's
/// live state without the segments earlier steps left cached, so those remainders would be
/// the model's guess, not the step's tensors.
#[derive(Default)]
struct Blocks {
    replay: Option<AllocReplay>,
    traced: Option<TracedDevice>,
}

impl Blocks {
    /// A CUDA allocator's record with allocation calls in `dev`'s trace: replayed; a CUDA
    /// trace: replayed, and again with its workspaces where its phases first run a forward and
    /// a backward; anything else (profiler-derived, a CPU trace, no trace): nothing.
    fn of(
        snap: &Snapshot,
        dev: i64,
        trace: &[TraceEntry],
        phases: &[Phase],
        warnings: &mut Vec<String>,
    ) -> Self {
        let Ok(d) = usize::try_from(dev) else {
            return Blocks::default();
        };
        if snap.traced.as_deref() == Some("cuda") {
            let config = traced_config(snap, warnings);
            let warmup = &snap.traced_warmup;
            let handles = handle_entries(warmup, trace, phases);
            let gpu = snap.traced_gpu.as_deref();
            let traced = traced_device(trace, warmup, &config, gpu, &handles);
            return Blocks {
                replay: None,
                traced: Some(traced),
            };
        }
        if snap.from_profiler || snap.traced.is_some() || !traced_devices(snap).contains(&d) {
            return Blocks::default();
        }
        Blocks {
            replay: replay_device(snap, d),
            traced: None,
        }
    }

    /// The block of the allocation of `requested` bytes at trace entry `entry` (a CUDA
    /// allocator's record only). Where the replay did not follow the record segment for
    /// segment, the remainder a block keeps is the model's guess: the request rounded as the
    /// allocator rounds every request (`round_size`) is what is certain.
    fn size(&self, entry: usize, requested: u64) -> Option<u64> {
        let r = self.replay.as_ref()?;
        if r.result.first_mismatch.is_none() {
            return r.block_size(entry);
        }
        Some(round_size(
            requested,
            &r.recorded_config().divisions_table(),
        ))
    }

    /// The block live at `addr` when the trace began, as the replay seeded it.
    fn pre_trace(&self, addr: u64) -> Option<u64> {
        self.replay.as_ref()?.pre_trace_block(addr)
    }
}

/// The allocator settings of a CUDA trace: the `PYTORCH_ALLOC_CONF` the tracing process had
/// (`allocator_settings.PYTORCH_CUDA_ALLOC_CONF` in the record, as `vramscope.trace` writes
/// it), else typed `allocator_settings`, else PyTorch's defaults. A setting PyTorch would
/// refuse is said in a warning and the defaults replayed.
fn traced_config(snap: &Snapshot, warnings: &mut Vec<String>) -> AllocatorConfig {
    if let Some(conf) = &snap.alloc_conf {
        return match AllocatorConfig::parse(conf) {
            Ok(c) => c,
            Err(e) => {
                warnings.push(format!("{e}; the trace replayed under PyTorch's defaults"));
                AllocatorConfig::default()
            }
        };
    }
    if snap.allocator_settings.is_some() {
        return crate::alloc_replay::snapshot_config(snap).0;
    }
    AllocatorConfig::default()
}

/// Where a CUDA trace's cuBLAS handles first run, one per handle, as positions in its replay
/// (its warm-up calls, then its entries): the main thread's at the first allocation of a
/// forward, the autograd thread's at the first of a backward (when a step has one). A handle
/// is created, with its workspace, by the first GEMM on its thread
/// (aten/src/ATen/cuda/CublasHandlePool.cpp `getCurrentCUDABlasHandle`); the phase's first
/// allocation stands for that GEMM. A trace with no forward allocation gets its one handle at
/// the start.
fn handle_entries(warmup: &[WarmupCall], trace: &[TraceEntry], phases: &[Phase]) -> Vec<usize> {
    let first = |want: Phase| {
        let name = want.name();
        warmup
            .iter()
            .position(|w| w.alloc && w.phase == name)
            .or_else(|| {
                (0..trace.len())
                    .find(|&i| trace[i].action == Action::Alloc && phases[i + 1] == want)
                    .map(|i| warmup.len() + i)
            })
    };
    let mut at = vec![first(Phase::Forward).unwrap_or(0)];
    if let Some(b) = first(Phase::Backward) {
        at.push(b);
    }
    at
}

/// Lifetimes from the trace's allocs and frees. `allocated_bytes` drops when the user frees
/// (free_requested); the block returns to the pool at free_completed
/// (c10/cuda/CUDACachingAllocator.cpp `free`), so a completed free after a requested one is
/// skipped. Returns the lifetimes and the count of frees without an alloc (ghosts).
fn trace_lives(
    snap: &Snapshot,
    trace: &[TraceEntry],
    blocks: &Blocks,
) -> (Lifetimes<SnapInfo>, u64) {
    let has_completed = trace.iter().any(|e| e.action == Action::FreeCompleted);
    let mut lives = Lifetimes::new();
    let mut pending: FxSet<u64> = FxSet::default();
    let mut ghost_at: FxMap<u64, usize> = FxMap::default();
    let mut ghosts = 0u64;
    for (i, e) in trace.iter().enumerate() {
        let pos = i + 1;
        match e.action {
            Action::Alloc => {
                let info = SnapInfo::new(e.size, e.stack, e.category, e.user_metadata);
                let bytes = blocks.size(i, e.size).unwrap_or(e.size);
                let idx = lives.alloc(e.addr, bytes, pos, info);
                if let Some(g) = ghost_at.remove(&e.addr) {
                    if snap.from_profiler && lives.lives[g].size == e.size {
                        lives.lives[g].info.successor = NonZeroUsize::new(idx);
                    }
                }
            }
            Action::FreeRequested | Action::FreeCompleted => {
                if e.action == Action::FreeCompleted && pending.remove(&e.addr) {
                    continue;
                }
                if let Some(idx) = lives.free(e.addr, pos) {
                    lives.lives[idx].info.free_stack = Some(e.stack);
                } else {
                    // Freed but never allocated in the trace: allocated before recording
                    // started (or dropped from the ring buffer), live from the start.
                    ghosts += 1;
                    let mut info = SnapInfo::new(e.size, e.stack, None, 0);
                    info.free_stack = Some(e.stack);
                    let bytes = blocks.pre_trace(e.addr).unwrap_or(e.size);
                    let idx = lives.before(bytes, Some(pos), info);
                    ghost_at.insert(e.addr, idx);
                }
                if e.action == Action::FreeRequested && has_completed {
                    pending.insert(e.addr);
                }
            }
            _ => {}
        }
    }
    (lives, ghosts)
}

/// Blocks allocated at the end that the trace never saw allocated: live throughout. Returns
/// their bytes.
fn add_preexisting(lives: &mut Lifetimes<SnapInfo>, segs: &[&Segment]) -> u64 {
    let mut preexisting = 0u64;
    for s in segs {
        for b in &s.blocks {
            if b.state == BlockState::ActiveAllocated && !lives.is_live(b.address) {
                preexisting = preexisting.saturating_add(b.size);
                let key = b.requested_size.unwrap_or(b.size);
                lives.before(b.size, None, SnapInfo::new(key, b.stack, None, 0));
            }
        }
    }
    preexisting
}

/// Each stack's signals and each metadata string's phase and category, computed once.
struct Context {
    signals: Vec<Signals>,
    meta: Vec<(Option<Phase>, Option<Category>)>,
}

impl Context {
    fn new(snap: &Snapshot) -> Self {
        Context {
            signals: snap
                .stacks
                .iter()
                .map(|st| attribute::signals(st.iter().map(|&f| &snap.frames[f as usize])))
                .collect(),
            meta: snap
                .strings
                .iter()
                .map(|s| attribute::parse_metadata(s))
                .collect(),
        }
    }
}

/// The category of each life; a profiler ghost without one takes its successor's.
fn classify(lives: &[Life<SnapInfo>], cx: &Context) -> Vec<Option<Category>> {
    let mut cats: Vec<Option<Category>> = lives
        .iter()
        .map(|el| {
            let fate = match el.info.free_stack {
                None => Fate::AliveAtEnd,
                Some(fs) => Fate::Freed(cx.signals[fs as usize]),
            };
            attribute::classify(
                el.info.hint,
                cx.meta[el.info.meta as usize].1,
                &cx.signals[el.info.stack as usize],
                fate,
            )
        })
        .collect();
    for i in 0..lives.len() {
        if cats[i].is_none() {
            if let Some(s) = lives[i].info.successor {
                cats[i] = cats[s.get()];
            }
        }
    }
    cats
}

/// An allocation no stack explains (user code outside modules, or a record without frames)
/// made before backward and freed while backward runs was saved for it: the autograd engine
/// releases a node's saved tensors once the node has run (torch/csrc/autograd/engine.cpp).
fn saved_for_backward(lives: &[Life<SnapInfo>], phases: &[Phase], cats: &mut [Option<Category>]) {
    for (l, c) in lives.iter().zip(cats.iter_mut()) {
        let Some(end) = l.end.map(NonZeroUsize::get) else {
            continue;
        };
        let before = l.start > 0 && phases[l.start] != Phase::Backward;
        if c.is_none() && before && phases[end] == Phase::Backward {
            *c = Some(Category::Activations);
        }
    }
}

/// Phase of each position: an alloc's user_metadata, else its stack's; carried forward.
fn position_phases(trace: &[TraceEntry], cx: &Context) -> Vec<Phase> {
    let n = trace.len();
    let mut phases = vec![Phase::Unknown; n + 1];
    for (i, e) in trace.iter().enumerate() {
        if matches!(e.action, Action::Alloc) {
            phases[i + 1] = cx.meta[e.user_metadata as usize]
                .0
                .unwrap_or_else(|| attribute::phase_of(&cx.signals[e.stack as usize]));
        }
    }
    for i in 1..=n {
        if phases[i] == Phase::Unknown {
            phases[i] = phases[i - 1];
        }
    }
    phases
}

fn seg_delta(e: &TraceEntry) -> i128 {
    match e.action {
        Action::SegmentAlloc | Action::SegmentMap => e.size as i128,
        Action::SegmentFree | Action::SegmentUnmap => -(e.size as i128),
        _ => 0,
    }
}

/// Reserved bytes before the first event: the final segments minus the segment events.
fn initial_reserved(
    trace: &[TraceEntry],
    reserved_end: u64,
    known: bool,
    warnings: &mut Vec<String>,
) -> i128 {
    let net: i128 = trace.iter().map(seg_delta).sum();
    let reserved = reserved_end as i128 - net;
    if reserved < 0 && known {
        warnings.push(
            "segment events exceed the final segments: reserved bytes are a lower bound".into(),
        );
        return 0;
    }
    reserved
}

/// The replay of one device: the timeline and the peak of reserved bytes.
fn run_replay(
    trace: &[TraceEntry],
    att: &Attributed<SnapInfo>,
    phases: &[Phase],
    mut reserved: i128,
    reserved_known: bool,
) -> (Timeline, u64) {
    let mut peak_reserved: u64 = 0;
    let timeline = att.replay(trace.len(), |pos| {
        if pos > 0 {
            reserved += seg_delta(&trace[pos - 1]);
        }
        let r = u64::try_from(reserved.max(0)).unwrap_or(u64::MAX);
        peak_reserved = peak_reserved.max(r);
        Moment {
            before: 0,
            phase: phases[pos],
            reserved: reserved_known.then_some(r),
            time_us: if pos > 0 {
                trace[pos - 1].time_us.map(|t| t as f64)
            } else {
                None
            },
        }
    });
    (timeline, peak_reserved)
}

/// The site of each stack that holds a block live at the peak, formatted once (hundreds of
/// thousands of allocations share a few thousand stacks); None for the others.
fn stack_sites(snap: &Snapshot, lives: &[Life<SnapInfo>], peak: usize) -> Vec<Option<String>> {
    let mut sites = vec![None; snap.stacks.len()];
    for (_, el) in replay::live_at(lives, peak) {
        if let Some(slot @ None) = sites.get_mut(el.info.stack as usize) {
            *slot = Some(site_of(snap.stack(el.info.stack)));
        }
    }
    sites
}

/// Final segment state, as `python -m torch.cuda._memory_viz stats` splits it.
fn fragmentation(segs: &[&Segment], reserved_end: u64) -> Fragmentation {
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
    for b in segs.iter().flat_map(|s| s.blocks.iter()) {
        match b.state {
            BlockState::ActiveAllocated => {
                f.allocated = f.allocated.saturating_add(b.size);
                f.internal_free = f
                    .internal_free
                    .saturating_add(b.size.saturating_sub(b.requested_size.unwrap_or(b.size)));
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
    if f.reserved > 0 {
        f.external_fraction = f.external_free as f64 / f.reserved as f64;
    }
    f
}

fn ooms(snap: &Snapshot, trace: &[TraceEntry]) -> Vec<Oom> {
    trace
        .iter()
        .filter(|e| e.action == Action::Oom)
        .map(|e| Oom {
            requested: e.size,
            device_free: e.device_free,
            site: site_of(snap.stack(e.stack)),
        })
        .collect()
}

/// Warnings about lifetimes the trace does not show whole.
fn lifetime_warnings(
    snap: &Snapshot,
    trace: &[TraceEntry],
    ghosts: u64,
    preexisting: u64,
    warnings: &mut Vec<String>,
) {
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
}

/// Warnings about what the record lacks, and the OOMs it holds.
fn record_warnings(
    snap: &Snapshot,
    trace: &[TraceEntry],
    segs: &[&Segment],
    ooms: &[Oom],
    warnings: &mut Vec<String>,
) {
    if let Some(device) = &snap.traced {
        warnings.push(if device == "cuda" {
            "traced on fake tensors (CUDA's behaviour): the step's allocations and frees \
             replayed through the caching-allocator model (PyTorch's defaults unless the record \
             names settings): blocks and reserved bytes are the model's (no fragmentation \
             figure)"
                .to_string()
        } else {
            format!(
                "traced on fake tensors ({device}'s behaviour): no allocator segments, so \
                 reserved bytes and fragmentation are unknown; bytes as the tensors asked for them"
            )
        });
    } else if snap.from_profiler {
        warnings.push(
            "profiler-derived snapshot: segments are not the allocator's, so reserved bytes and \
             fragmentation are unknown"
                .into(),
        );
    }
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
}

fn source_info(snap: &Snapshot, dev: i64, events: usize) -> SourceInfo {
    let kind = match (snap.layout, snap.from_profiler) {
        _ if snap.traced.is_some() => "traced_snapshot",
        (crate::snapshot::Layout::Legacy113, _) => "cuda_snapshot_1_13",
        (_, true) => "profiler_snapshot",
        _ => "cuda_snapshot",
    };
    SourceInfo {
        kind: kind.into(),
        pickle_protocol: Some(snap.protocol),
        device: Some(dev),
        events,
    }
}

/// The analysis of device `dev`, and its trace replayed through the allocator model when it
/// is a CUDA allocator's record with allocation calls.
fn analyze_device(
    snap: &Snapshot,
    dev: i64,
    warnings: &mut Vec<String>,
) -> (Analysis, Option<AllocReplay>) {
    let empty = Vec::new();
    let trace = usize::try_from(dev)
        .ok()
        .and_then(|d| snap.traces.get(d))
        .unwrap_or(&empty);
    let cx = Context::new(snap);
    let phases = position_phases(trace, &cx);
    let blocks = Blocks::of(snap, dev, trace, &phases, warnings);
    let (mut lives, ghosts) = trace_lives(snap, trace, &blocks);
    let segs: Vec<&Segment> = snap.segments.iter().filter(|s| s.device == dev).collect();
    let preexisting = add_preexisting(&mut lives, &segs);
    lifetime_warnings(snap, trace, ghosts, preexisting, warnings);
    let att = attribute_lives(snap, lives.lives, &phases, &cx);

    let reserved_end = u64::try_from(snap.reserved_at_dump(dev)).unwrap_or(u64::MAX);
    let reserved_known = !snap.from_profiler;
    let reserved0 = initial_reserved(trace, reserved_end, reserved_known, warnings);
    let (timeline, peak_reserved) = run_replay(trace, &att, &phases, reserved0, reserved_known);

    let sites = stack_sites(snap, &att.lives, timeline.peak_index().unwrap_or(0));
    let ooms = ooms(snap, trace);
    record_warnings(snap, trace, &segs, &ooms, warnings);
    let record = Record {
        source: source_info(snap, dev, trace.len()),
        peak_reserved: reserved_known.then_some(peak_reserved),
        fragmentation: (reserved_known && !segs.is_empty())
            .then(|| fragmentation(&segs, reserved_end)),
        ooms,
        warnings: std::mem::take(warnings),
    };
    let mut analysis = att.report(timeline, record, |el| {
        let phase = if el.start == 0 {
            Phase::Unknown
        } else {
            phases[el.start]
        };
        let site = sites
            .get(el.info.stack as usize)
            .and_then(|s| s.as_deref())
            .unwrap_or("");
        (phase, site)
    });
    if let Some(d) = &blocks.traced {
        with_traced_device(&mut analysis, d, snap.traced_gpu.as_deref());
    }
    (analysis, blocks.replay)
}

/// A CUDA trace's reserved bytes from its replay through the allocator model and its CUDA
/// context from the estimator's model (`crate::traced_device`), and the device total when the
/// trace names its GPU.
fn with_traced_device(a: &mut Analysis, d: &TracedDevice, gpu: Option<&str>) {
    let g = &mut a.per_gpu;
    g.peaks.peak_reserved = Some(d.peak_reserved);
    // The trace's allocations are its rounded requests: the reserve holds every byte the
    // replay's blocks keep beyond them.
    let allocated = g.peaks.peak_allocated.unwrap_or(d.peak_allocated);
    g.components.base.allocator_reserve = d.peak_reserved.saturating_sub(allocated);
    if let (Some(ctx), Some(total)) = (d.cuda_context, d.device_total) {
        g.components.base.cuda_context = ctx;
        g.peaks.device_total = Some(total);
        a.warnings.push(format!(
            "device total: the traced blocks and {} of cuBLAS workspaces (not in the step's \
             allocated bytes) replayed through the caching-allocator model, plus the CUDA \
             context of {}",
            vramscope_core::text::bytes(d.workspaces),
            gpu.unwrap_or_default()
        ));
    } else if let Some(id) = gpu {
        a.warnings.push(format!(
            "the trace names the GPU {id:?}, which the catalog does not know: no CUDA context"
        ));
    }
}

/// Categories from stacks, metadata and the profiler's hints; a block saved for backward;
/// then what the inference says of blocks from before the trace (allocator records only).
fn attribute_lives(
    snap: &Snapshot,
    lives: Vec<Life<SnapInfo>>,
    phases: &[Phase],
    cx: &Context,
) -> Attributed<SnapInfo> {
    let mut cats = classify(&lives, cx);
    saved_for_backward(&lives, phases, &mut cats);
    let (inferences, by_life) = if snap.from_profiler {
        (Vec::new(), Vec::new())
    } else {
        let rec = record_facts(&lives, phases, cx);
        infer_before(snap, &lives, cx, &mut cats, rec)
    };
    Attributed {
        lives,
        cats,
        inferences,
        by_life,
    }
}

/// What the inference needs about each life.
fn facts(snap: &Snapshot, l: &Life<SnapInfo>, cx: &Context) -> Facts {
    Facts {
        key: l.info.key,
        size: l.size,
        pre: l.start == 0,
        freed_by: l.info.free_stack.map(|s| cx.signals[s as usize]),
        stackless: snap.stack(l.info.stack).next().is_none(),
        workspace: cx.signals[l.info.stack as usize].blas_workspace,
    }
}

/// The inference ([`infer::infer`]) over the lives it looks at — those from before the trace,
/// the gradients and the cuBLAS workspaces — so that a trace of millions of allocations is not copied whole.
/// Returns the inferences and, per life, the one that set its category.
fn infer_before(
    snap: &Snapshot,
    lives: &[Life<SnapInfo>],
    cx: &Context,
    cats: &mut [Option<Category>],
    rec: RecordFacts,
) -> (Vec<infer::Inference>, Vec<u8>) {
    let idx: Vec<usize> = (0..lives.len())
        .filter(|&i| {
            lives[i].start == 0
                || cats[i] == Some(Category::Gradients)
                || cx.signals[lives[i].info.stack as usize].blas_workspace
        })
        .collect();
    let facts: Vec<Facts> = idx.iter().map(|&i| facts(snap, &lives[i], cx)).collect();
    let mut sub: Vec<Option<Category>> = idx.iter().map(|&i| cats[i]).collect();
    let (inferences, sub_by) = infer::infer(&facts, &mut sub, rec);
    let mut by_life = vec![infer::NONE; lives.len()];
    for (j, &i) in idx.iter().enumerate() {
        cats[i] = sub[j];
        by_life[i] = sub_by[j];
    }
    (inferences, by_life)
}

/// Whether the record shows a forward and a backward: the phases of its allocations; a
/// forward also from the stacks of blocks from before the trace that the segments recorded (a
/// backward there ran before the recorded step: a warm-up).
fn record_facts(lives: &[Life<SnapInfo>], phases: &[Phase], cx: &Context) -> RecordFacts {
    let mut r = RecordFacts::default();
    for l in lives {
        let phase = match (l.start, l.info.free_stack) {
            (0, None) => match attribute::phase_of(&cx.signals[l.info.stack as usize]) {
                Phase::Forward => Phase::Forward,
                _ => continue,
            },
            (0, Some(_)) => continue,
            (start, _) => phases[start],
        };
        match phase {
            Phase::Forward => r.has_forward = true,
            Phase::Backward => r.has_backward = true,
            _ => {}
        }
    }
    r
}
