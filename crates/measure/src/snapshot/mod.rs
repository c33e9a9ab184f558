//! The CUDA caching-allocator snapshot, typed: `torch.cuda.memory._snapshot()` (2.x dict with
//! `segments`, `device_traces`, `allocator_settings`, ...) and the torch 1.13 bare list of
//! segments whose blocks carry `history`. Layout: `THCPModule_memorySnapshot` in
//! `torch/csrc/cuda/Module.cpp` and the `_read`/`_block_extra_legacy` branches of
//! `torch/cuda/_memory_viz.py` (notes/formats.md §1.2–§1.4). Every key but `action`, `addr`
//! (or `device_free`), `size` is optional, as older versions lack them.
//!
//! Frames are interned to `u32` ids and stacks (frame-id lists, innermost first) to a table,
//! so a trace of 10^6 entries with 30 frames each holds each distinct stack once.

mod builder;
mod settings;

pub use settings::AllocatorSettings;

use crate::pickle::{Id, Limits, Node, Pickle, Tree};
use builder::Builder;
use std::io::Read;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

/// Block state: the C++ code writes `active_pending_free`; the 2.x docstring says
/// `active_awaiting_free`. Both are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
    Other,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: Option<u64>,
    pub state: BlockState,
    /// Index into [`Snapshot::stacks`] (0 = no frames).
    pub stack: u32,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub segment_type: Option<String>,
    pub pool_id: Option<(i64, i64)>,
    pub is_expandable: bool,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
    Annotate,
    Other,
}

impl Action {
    fn parse(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "oom" => Action::Oom,
            "snapshot" => Action::Snapshot,
            "annotate" => Action::Annotate,
            _ => Action::Other,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TraceEntry {
    pub action: Action,
    /// Block or segment address; for `oom`, 0.
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// For `oom`: the bytes CUDA reported free.
    pub device_free: Option<u64>,
    pub time_us: Option<i64>,
    pub stack: u32,
    /// The profiler's category (only in `_profile_to_snapshot` output, §2.5).
    pub category: Option<ProfCategory>,
    /// Index into [`Snapshot::strings`] (0 = none or empty).
    pub user_metadata: u32,
}

impl TraceEntry {
    /// An entry with only its action, address and size (stream 0, no time, stack, category
    /// or metadata): what a hand-written trace in a test or a placeholder needs.
    pub const fn bare(action: Action, addr: u64, size: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            device_free: None,
            time_us: None,
            stack: 0,
            category: None,
            user_metadata: 0,
        }
    }
}

/// `torch.profiler._memory_profiler.Category`, as `_profile_to_snapshot` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfCategory {
    Parameter,
    OptimizerState,
    Input,
    Temporary,
    Activation,
    Gradient,
    AutogradDetail,
    Unknown,
}

impl ProfCategory {
    pub fn parse(s: &str) -> ProfCategory {
        match s {
            "parameter" => ProfCategory::Parameter,
            "optimizer_state" => ProfCategory::OptimizerState,
            "input" => ProfCategory::Input,
            "temporary" => ProfCategory::Temporary,
            "activation" => ProfCategory::Activation,
            "gradient" => ProfCategory::Gradient,
            "autograd_detail" => ProfCategory::AutogradDetail,
            _ => ProfCategory::Unknown,
        }
    }

    /// `_CATEGORY_TO_INDEX` order (torch/profiler/_memory_profiler.py): PARAMETER 0,
    /// OPTIMIZER_STATE 1, INPUT 2, TEMPORARY 3, ACTIVATION 4, GRADIENT 5, AUTOGRAD_DETAIL 6,
    /// None 7.
    pub fn from_index(i: i64) -> ProfCategory {
        match i {
            0 => ProfCategory::Parameter,
            1 => ProfCategory::OptimizerState,
            2 => ProfCategory::Input,
            3 => ProfCategory::Temporary,
            4 => ProfCategory::Activation,
            5 => ProfCategory::Gradient,
            6 => ProfCategory::AutogradDetail,
            _ => ProfCategory::Unknown,
        }
    }
}

/// Which layout the file had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// torch 2.x dict.
    Dict,
    /// torch 1.13 bare list of segments.
    Legacy113,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub layout: Layout,
    pub protocol: u8,
    pub frames: Vec<Frame>,
    /// Stack 0 is the empty stack.
    pub stacks: Vec<Box<[u32]>>,
    /// Interned strings (user_metadata); 0 is "".
    pub strings: Vec<String>,
    pub segments: Vec<Segment>,
    pub traces: Vec<Vec<TraceEntry>>,
    pub alloc_conf: Option<String>,
    /// The typed `allocator_settings` (what the allocator ran with), when the file has them.
    pub allocator_settings: Option<AllocatorSettings>,
    /// Trace entries carry the profiler's `category`: the file came from
    /// `torch.cuda._memory_viz._profile_to_snapshot`, not from the allocator.
    pub from_profiler: bool,
    /// Written by `vramscope.trace` (a step run on fake tensors): the device whose behaviour
    /// was traced (`"cuda"`, `"cpu"`), from the root's `"traced": {"device": ...}`.
    pub traced: Option<String>,
    /// The catalog GPU a CUDA trace emulated (`"traced": {"gpu": "h100-80gb"}`), if named.
    pub traced_gpu: Option<String>,
    /// A trace's steps before the recorded one (`"traced": {"warmup": [[action, addr, size,
    /// phase], ...]}`), as the allocator saw them: what they leave cached is where the recorded
    /// step starts. Empty when the record has none.
    pub traced_warmup: Vec<WarmupCall>,
}

/// One allocation or free of a trace's warm-up steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmupCall {
    /// An allocation (`"alloc"`), else a free (`"free"`).
    pub alloc: bool,
    pub addr: u64,
    /// Bytes asked for (rounded as CUDA's allocator rounds them for a CUDA trace).
    pub size: u64,
    /// The phase it ran in (`setup`, `forward`, `backward`, `optimizer`).
    pub phase: String,
}

impl Snapshot {
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &Frame> {
        self.stacks[id as usize]
            .iter()
            .map(|&f| &self.frames[f as usize])
    }

    /// What the dump's segments on `device` hold: the sum of their `total_size`
    /// (`torch.cuda.memory._snapshot()`'s `segments`, whose sizes add up to
    /// `torch.cuda.memory_reserved` at the dump), exact.
    pub fn reserved_at_dump(&self, device: i64) -> u128 {
        let on = self.segments.iter().filter(|s| s.device == device);
        on.map(|s| s.total_size as u128).sum()
    }
}

fn bad(msg: impl Into<String>) -> crate::MeasureError {
    crate::MeasureError::Format(msg.into())
}

/// A trace entry that moved out of the streaming table (never read).
const TAKEN: TraceEntry = TraceEntry::bare(Action::Other, 0, 0);

/// Reads the typed snapshot out of a parsed pickle.
pub fn from_pickle(p: &Pickle) -> Result<Snapshot, crate::MeasureError> {
    finish(Builder::new(false), p)
}

/// Parses and types a snapshot in one pass: trace entries and blocks are typed as the VM
/// completes them and their generic values dropped, so peak memory stays near the typed
/// size rather than the value tree's (~2.8× the file).
pub fn read_streaming<R: Read>(
    r: R,
    len: u64,
    limits: Limits,
) -> Result<Snapshot, crate::MeasureError> {
    let mut b = Builder::new(true);
    let p = crate::pickle::parse_reader_compacting(r, len, limits, &mut b)?;
    finish(b, &p)
}

fn finish(mut b: Builder, p: &Pickle) -> Result<Snapshot, crate::MeasureError> {
    let t = p.tree();
    let root = p.root;
    let (layout, seg_list, traces_list) = layout_of(t, root)?;
    let mut segments = Vec::new();
    for &s in seg_list.unwrap_or(&[]) {
        segments.push(b.segment(t, s, layout == Layout::Legacy113)?);
    }
    let traced = traced_device(t, root);
    let traced_gpu = traced.as_ref().and_then(|_| traced_str(t, root, "gpu"));
    let mut traced_warmup = match traced {
        Some(_) => warmup(t, root)?,
        None => Vec::new(),
    };
    let (mut traces, from_profiler) = match traces_list {
        None => (Vec::new(), false),
        Some(tl) => {
            let devices = t
                .as_seq(tl)
                .ok_or_else(|| bad("\"device_traces\" is not a list"))?;
            match in_order(t, devices, &b.entry_nodes) {
                Some(split) => (traces_in_place(&mut b, &split), b.any_category),
                None => traces_by_reference(&mut b, t, devices)?,
            }
        }
    };
    if traced.as_deref() == Some("cuda") {
        round_as_cuda(&mut traces);
        for w in &mut traced_warmup {
            w.size = vramscope_core::estimate::round_size(w.size);
        }
    }
    Ok(Snapshot {
        layout,
        protocol: p.protocol,
        frames: b.frames,
        stacks: b.stacks,
        strings: b.strings,
        segments,
        traces,
        alloc_conf: alloc_conf(t, root),
        allocator_settings: settings::read(t, root),
        from_profiler,
        traced,
        traced_gpu,
        traced_warmup,
    })
}

/// The warm-up steps of a `vramscope.trace` record (`"traced": {"warmup": [...]}`), each
/// `[action, addr, size, phase]`; none when absent.
fn warmup(t: Tree<'_>, root: Id) -> Result<Vec<WarmupCall>, crate::MeasureError> {
    let Some(list) = t.get(root, "traced").and_then(|d| t.get(d, "warmup")) else {
        return Ok(Vec::new());
    };
    let items = t
        .as_seq(list)
        .ok_or_else(|| bad("\"traced\".\"warmup\" is not a list"))?;
    let one = |item: Id| -> Option<WarmupCall> {
        let [action, addr, size, phase] = t.as_seq(item)? else {
            return None;
        };
        let alloc = match t.as_str(*action)? {
            "alloc" => true,
            "free" => false,
            _ => return None,
        };
        Some(WarmupCall {
            alloc,
            addr: t.as_u64(*addr)?,
            size: t.as_u64(*size)?,
            phase: t.as_str(*phase)?.to_string(),
        })
    };
    items
        .iter()
        .map(|&i| {
            one(i).ok_or_else(|| {
                bad("a \"traced\".\"warmup\" event is not [\"alloc\" or \"free\", address, size, phase]")
            })
        })
        .collect()
}

/// The traced device of a `vramscope.trace` record (`"traced": {"device": "cuda"}`); a
/// device it does not write (`cuda`, `cpu`) is not a trace's.
fn traced_device(t: Tree<'_>, root: Id) -> Option<String> {
    traced_str(t, root, "device").filter(|d| matches!(d.as_str(), "cuda" | "cpu"))
}

/// A string field of the root's `"traced"` dict.
fn traced_str(t: Tree<'_>, root: Id, key: &str) -> Option<String> {
    if !matches!(t.node(root), Node::Dict(_)) {
        return None;
    }
    t.get(root, "traced")
        .and_then(|d| t.get(d, key))
        .and_then(|v| t.as_str(v))
        .map(str::to_string)
}

/// A trace of a CUDA step's tensors, each entry the bytes its tensor asked for: every block
/// rounded as CUDA's caching allocator gives it (`round_size`, c10/cuda/CUDACachingAllocator.cpp;
/// `torch.cuda.memory_allocated` counts the rounded block).
fn round_as_cuda(traces: &mut [Vec<TraceEntry>]) {
    for e in traces.iter_mut().flatten() {
        if matches!(
            e.action,
            Action::Alloc | Action::FreeRequested | Action::FreeCompleted
        ) {
            e.size = vramscope_core::estimate::round_size(e.size);
        }
    }
}

/// The layout of the root, its list of segments and its list of device traces.
#[allow(clippy::type_complexity)]
fn layout_of(
    t: Tree<'_>,
    root: Id,
) -> Result<(Layout, Option<&[Id]>, Option<Id>), crate::MeasureError> {
    match t.node(root) {
        Node::List(items) => Ok((Layout::Legacy113, Some(items.as_slice()), None)),
        Node::Dict(_) => {
            let segs = match t.get(root, "segments") {
                Some(s) => Some(
                    t.as_seq(s)
                        .ok_or_else(|| bad("\"segments\" is not a list"))?,
                ),
                None => None,
            };
            let traces = t.get(root, "device_traces");
            if segs.is_none() && traces.is_none() {
                return Err(bad(
                    "not a memory snapshot: the dict has neither \"segments\" nor \"device_traces\"",
                ));
            }
            Ok((Layout::Dict, segs, traces))
        }
        _ => Err(bad(
            "not a memory snapshot: the pickle holds neither a dict nor a list of segments",
        )),
    }
}

/// The usual file: every entry streamed, listed once, in order (`split` holds each device's
/// count). The table is handed out in place rather than copied (which held it twice at the
/// peak): later devices split off the end (a copy of their own entries only); the first device
/// keeps the table itself (`split_off(0)` would copy all of it).
fn traces_in_place(b: &mut Builder, split: &[usize]) -> Vec<Vec<TraceEntry>> {
    let mut table = std::mem::take(&mut b.entries);
    let mut tail = Vec::with_capacity(split.len());
    for &n in split.iter().skip(1).rev() {
        tail.push(table.split_off(table.len() - n));
    }
    if !split.is_empty() {
        tail.push(table);
    }
    tail.reverse();
    tail
}

/// Any other file: each device's list read item by item, streamed entries taken from the
/// table and the rest typed now. Returns the traces and whether any entry carries a profiler
/// category.
fn traces_by_reference(
    b: &mut Builder,
    t: Tree<'_>,
    devices: &[Id],
) -> Result<(Vec<Vec<TraceEntry>>, bool), crate::MeasureError> {
    // How often each streamed entry is referenced: the last reference moves it out of the
    // table, earlier ones (a memoized entry listed twice) copy it.
    let mut refs = vec![0u32; b.entries.len()];
    for &dev in devices {
        for &e in t.as_seq(dev).unwrap_or(&[]) {
            if let Node::Entry(i) = t.node(e) {
                if let Some(r) = refs.get_mut(*i as usize) {
                    *r = r.saturating_add(1);
                }
            }
        }
    }
    let mut table = std::mem::take(&mut b.entries);
    let mut traces = Vec::new();
    let mut from_profiler = false;
    for &dev in devices {
        let entries = t
            .as_seq(dev)
            .ok_or_else(|| bad("a device trace is not a list"))?;
        let mut out = Vec::with_capacity(entries.len());
        for &e in entries {
            let te = match t.node(e) {
                Node::Entry(i) => {
                    let i = *i as usize;
                    let r = refs
                        .get_mut(i)
                        .ok_or_else(|| bad("a trace placeholder out of range"))?;
                    *r -= 1;
                    if *r == 0 {
                        std::mem::replace(&mut table[i], TAKEN)
                    } else {
                        table[i].clone()
                    }
                }
                _ => b.trace_entry(t, e)?,
            };
            from_profiler |= te.category.is_some();
            out.push(te);
        }
        traces.push(out);
    }
    Ok((traces, from_profiler))
}

fn alloc_conf(t: Tree<'_>, root: Id) -> Option<String> {
    t.get(root, "allocator_settings")
        .and_then(|s| t.get(s, "PYTORCH_CUDA_ALLOC_CONF"))
        .and_then(|v| t.as_str(v))
        .map(str::to_string)
}

/// The length of each device's list when the lists name exactly the streamed entries, in
/// streaming order (each list a run of `entry_nodes`).
fn in_order(t: Tree<'_>, devices: &[Id], entry_nodes: &[Id]) -> Option<Vec<usize>> {
    let mut next = 0usize;
    let mut lens = Vec::with_capacity(devices.len());
    for &dev in devices {
        let entries = t.as_seq(dev)?;
        if entry_nodes.get(next..next + entries.len())? != entries {
            return None;
        }
        next += entries.len();
        lens.push(entries.len());
    }
    (next == entry_nodes.len()).then_some(lens)
}
