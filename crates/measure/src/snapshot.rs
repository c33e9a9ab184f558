//! The CUDA caching-allocator snapshot, typed: `torch.cuda.memory._snapshot()` (2.x dict with
//! `segments`, `device_traces`, `allocator_settings`, ...) and the torch 1.13 bare list of
//! segments whose blocks carry `history`. Layout: `THCPModule_memorySnapshot` in
//! `torch/csrc/cuda/Module.cpp` and the `_read`/`_block_extra_legacy` branches of
//! `torch/cuda/_memory_viz.py` (notes/formats.md §1.2–§1.4). Every key but `action`, `addr`
//! (or `device_free`), `size` is optional, as older versions lack them.
//!
//! Frames are interned to `u32` ids and stacks (frame-id lists, innermost first) to a table,
//! so a trace of 10^6 entries with 30 frames each holds each distinct stack once.

use crate::pickle::{Id, Node, Pickle};
use std::collections::HashMap;

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
    /// Trace entries carry the profiler's `category`: the file came from
    /// `torch.cuda._memory_viz._profile_to_snapshot`, not from the allocator.
    pub from_profiler: bool,
}

impl Snapshot {
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &Frame> {
        self.stacks[id as usize]
            .iter()
            .map(|&f| &self.frames[f as usize])
    }
}

struct Builder<'a> {
    p: &'a Pickle,
    frames: Vec<Frame>,
    frame_by_node: HashMap<Id, u32>,
    frame_by_value: HashMap<Frame, u32>,
    stacks: Vec<Box<[u32]>>,
    stack_by_node: HashMap<Id, u32>,
    stack_by_value: HashMap<Box<[u32]>, u32>,
    strings: Vec<String>,
    string_by_value: HashMap<String, u32>,
}

fn bad(msg: impl Into<String>) -> crate::MeasureError {
    crate::MeasureError::Format(msg.into())
}

impl<'a> Builder<'a> {
    fn new(p: &'a Pickle) -> Self {
        let empty: Box<[u32]> = Box::new([]);
        let mut stack_by_value = HashMap::new();
        stack_by_value.insert(empty.clone(), 0);
        let mut string_by_value = HashMap::new();
        string_by_value.insert(String::new(), 0);
        Builder {
            p,
            frames: Vec::new(),
            frame_by_node: HashMap::new(),
            frame_by_value: HashMap::new(),
            stacks: vec![empty],
            stack_by_node: HashMap::new(),
            stack_by_value,
            strings: vec![String::new()],
            string_by_value,
        }
    }

    fn u64_field(&self, d: Id, key: &str) -> Option<u64> {
        self.p.get(d, key).and_then(|v| self.p.as_u64(v))
    }

    fn i64_field(&self, d: Id, key: &str) -> Option<i64> {
        self.p.get(d, key).and_then(|v| self.p.as_i64(v))
    }

    fn str_field(&self, d: Id, key: &str) -> Option<&'a str> {
        self.p.get(d, key).and_then(|v| self.p.as_str(v))
    }

    fn frame(&mut self, id: Id) -> Option<u32> {
        if let Some(&f) = self.frame_by_node.get(&id) {
            return Some(f);
        }
        if !matches!(self.p.node(id), Node::Dict(_)) {
            return None;
        }
        let frame = Frame {
            filename: self.str_field(id, "filename").unwrap_or("").to_string(),
            line: self.i64_field(id, "line").unwrap_or(0),
            name: self.str_field(id, "name").unwrap_or("").to_string(),
        };
        let next = self.frames.len() as u32;
        let f = *self.frame_by_value.entry(frame.clone()).or_insert(next);
        if f == next {
            self.frames.push(frame);
        }
        self.frame_by_node.insert(id, f);
        Some(f)
    }

    fn stack(&mut self, list: Option<Id>) -> u32 {
        let Some(list) = list else { return 0 };
        if let Some(&s) = self.stack_by_node.get(&list) {
            return s;
        }
        let Some(items) = self.p.as_seq(list) else {
            return 0;
        };
        let ids: Box<[u32]> = items.iter().filter_map(|&f| self.frame(f)).collect();
        let next = self.stacks.len() as u32;
        let s = *self.stack_by_value.entry(ids.clone()).or_insert(next);
        if s == next {
            self.stacks.push(ids);
        }
        self.stack_by_node.insert(list, s);
        s
    }

    fn string(&mut self, v: Option<&str>) -> u32 {
        let Some(v) = v else { return 0 };
        if let Some(&i) = self.string_by_value.get(v) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(v.to_string());
        self.string_by_value.insert(v.to_string(), i);
        i
    }

    fn segment(&mut self, s: Id, legacy: bool) -> Result<Segment, crate::MeasureError> {
        if !matches!(self.p.node(s), Node::Dict(_)) {
            return Err(bad("a segment is not a dict"));
        }
        let address = self.u64_field(s, "address").unwrap_or(0);
        let total_size = self
            .u64_field(s, "total_size")
            .ok_or_else(|| bad("a segment has no integer total_size"))?;
        let pool_id = self.p.get(s, "segment_pool_id").and_then(|t| {
            let items = self.p.as_seq(t)?;
            Some((
                self.p.as_i64(*items.first()?)?,
                self.p.as_i64(*items.get(1)?)?,
            ))
        });
        let mut blocks = Vec::new();
        let mut running = address;
        if let Some(list) = self.p.get(s, "blocks").and_then(|b| self.p.as_seq(b)) {
            blocks.reserve(list.len());
            for &b in list {
                let size = self
                    .u64_field(b, "size")
                    .ok_or_else(|| bad("a block has no integer size"))?;
                // Blocks tile the segment in address order; before 2.1 they had no address.
                let block_addr = self.u64_field(b, "address").unwrap_or(running);
                running = block_addr.saturating_add(size);
                let state = match self.str_field(b, "state") {
                    Some("active_allocated") => BlockState::ActiveAllocated,
                    Some("active_pending_free") | Some("active_awaiting_free") => {
                        BlockState::ActivePendingFree
                    }
                    Some("inactive") => BlockState::Inactive,
                    _ => BlockState::Other,
                };
                let (stack, requested) = if legacy || self.p.get(b, "history").is_some() {
                    // 1.13/2.0: history[0] is the most recent allocation of this block.
                    let h0 = self
                        .p
                        .get(b, "history")
                        .and_then(|h| self.p.as_seq(h))
                        .and_then(|h| h.first().copied());
                    let frames = h0.and_then(|h| self.p.get(h, "frames"));
                    let real = h0.and_then(|h| self.u64_field(h, "real_size"));
                    (self.stack(frames), real)
                } else {
                    let frames = self.p.get(b, "frames");
                    (self.stack(frames), self.u64_field(b, "requested_size"))
                };
                blocks.push(Block {
                    address: block_addr,
                    size,
                    requested_size: requested,
                    state,
                    stack,
                });
            }
        }
        Ok(Segment {
            device: self.i64_field(s, "device").unwrap_or(0),
            address,
            total_size,
            stream: self.u64_field(s, "stream").unwrap_or(0),
            segment_type: self.str_field(s, "segment_type").map(str::to_string),
            pool_id,
            is_expandable: self
                .p
                .get(s, "is_expandable")
                .and_then(|v| self.p.as_bool(v))
                .unwrap_or(false),
            blocks,
        })
    }

    fn trace_entry(&mut self, e: Id) -> Result<TraceEntry, crate::MeasureError> {
        let action = self
            .str_field(e, "action")
            .ok_or_else(|| bad("a trace entry has no action string"))?;
        let action = Action::parse(action);
        let device_free = self.u64_field(e, "device_free");
        let addr = self.u64_field(e, "addr").unwrap_or(0);
        let size = self.u64_field(e, "size").unwrap_or(0);
        let frames = self.p.get(e, "frames");
        let stack = self.stack(frames);
        let meta = self.str_field(e, "user_metadata");
        let user_metadata = self.string(meta);
        Ok(TraceEntry {
            action,
            addr,
            size,
            stream: self.u64_field(e, "stream").unwrap_or(0),
            device_free,
            time_us: self.i64_field(e, "time_us"),
            stack,
            category: self.str_field(e, "category").map(ProfCategory::parse),
            user_metadata,
        })
    }
}

/// Reads the typed snapshot out of a parsed pickle.
pub fn from_pickle(p: &Pickle) -> Result<Snapshot, crate::MeasureError> {
    let mut b = Builder::new(p);
    let root = p.root;
    let (layout, seg_list, traces_list) = match p.node(root) {
        Node::List(items) => (Layout::Legacy113, Some(items.as_slice()), None),
        Node::Dict(_) => {
            let segs = match p.get(root, "segments") {
                Some(s) => Some(
                    p.as_seq(s)
                        .ok_or_else(|| bad("\"segments\" is not a list"))?,
                ),
                None => None,
            };
            let traces = p.get(root, "device_traces");
            if segs.is_none() && traces.is_none() {
                return Err(bad(
                    "not a memory snapshot: the dict has neither \"segments\" nor \"device_traces\"",
                ));
            }
            (Layout::Dict, segs, traces)
        }
        _ => {
            return Err(bad(
                "not a memory snapshot: the pickle holds neither a dict nor a list of segments",
            ))
        }
    };
    let mut segments = Vec::new();
    for &s in seg_list.unwrap_or(&[]) {
        segments.push(b.segment(s, layout == Layout::Legacy113)?);
    }
    let mut traces = Vec::new();
    let mut from_profiler = false;
    if let Some(t) = traces_list {
        let devices = p
            .as_seq(t)
            .ok_or_else(|| bad("\"device_traces\" is not a list"))?;
        for &dev in devices {
            let entries = p
                .as_seq(dev)
                .ok_or_else(|| bad("a device trace is not a list"))?;
            let mut out = Vec::with_capacity(entries.len());
            for &e in entries {
                let te = b.trace_entry(e)?;
                from_profiler |= te.category.is_some();
                out.push(te);
            }
            traces.push(out);
        }
    }
    let alloc_conf = p
        .get(root, "allocator_settings")
        .and_then(|s| p.get(s, "PYTORCH_CUDA_ALLOC_CONF"))
        .and_then(|v| p.as_str(v))
        .map(str::to_string);
    Ok(Snapshot {
        layout,
        protocol: p.protocol,
        frames: b.frames,
        stacks: b.stacks,
        strings: b.strings,
        segments,
        traces,
        alloc_conf,
        from_profiler,
    })
}
