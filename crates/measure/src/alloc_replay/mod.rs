//! A snapshot's allocation trace replayed through the caching-allocator model
//! (`vramscope_core::allocator`): the user-level calls the record shows — `alloc` (the size
//! asked for, as `record_trace` writes it in `alloc_found_block`), `free_completed` (when the
//! block really went back to the pool, `free_block`) and the `oom`s — run through the model with
//! the snapshot's own allocator settings, and the model's segment events (`segment_alloc`,
//! `segment_free`, `segment_map`, `segment_unmap`) compared one by one with the record's, at the
//! same point (between the same two calls), with the same address and size.
//!
//! **`empty_cache`** leaves no entry of its own in a trace. A call is inferred where the record
//! shows a `segment_free` (or `segment_unmap`) before a call that the model, running that call,
//! would not produce first: the model then empties its cache at that point, and the inferred
//! calls are counted in [`ReplayResult::empty_cache_calls`]. The same goes for frees left at the
//! end of the trace.
//!
//! **Addresses.** The model is given each new segment's address from the record (the
//! `segment_alloc` events, and for expandable segments the first `segment_map` outside every
//! segment it has), so ties in best fit break as they did on the GPU.
//!
//! **Records that start mid-run** (history turned on after the model was built, or a trace
//! ring buffer that wrapped): reserved memory at the trace's start is the dump-time segments
//! less the trace's own segment events; the segments that existed then (the dump's, less those
//! allocated in the trace, plus those freed in it) are seeded as cached segments, and the blocks
//! live then (freed in the trace before any allocation at their address — their size is the
//! request rounded, grown to the next known block when `should_split` would not have split it
//! — and those still allocated at the dump that the trace never allocated) are placed at their
//! addresses. What stays unknown (a pre-trace block's exact size, cached blocks inside
//! pre-trace segments that were split, expandable segments' pre-trace pages) is said in
//! [`ReplayResult::notes`].
//!
//! **What-ifs** ([`AllocReplay::peak_reserved_under`]) run the same calls (inferred
//! `empty_cache`s included; the record's OOMs left out, as those requests never got memory)
//! under other settings, on the model's own addresses and unlimited memory. Addresses break
//! best-fit ties, so the default settings on the model's own addresses need not give the
//! record's peak exactly (on the SmolLM2 H200 record: 2 MiB, 0.04 %, below it); compare a
//! what-if with `peak_reserved_under(&AllocatorConfig::default())` for a like-for-like saving.

mod lockstep;
mod recorded;

use crate::snapshot::{Action, Snapshot};
use serde::Serialize;
use vramscope_core::allocator::{Allocator, AllocatorConfig};

/// What the replay found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReplayResult {
    /// The device whose trace this is.
    pub device: usize,
    /// The model's `max_memory_reserved` over the trace.
    pub replayed_peak_reserved: u64,
    /// The record's: the largest running sum of its segment events, from the reserved memory at
    /// its start (the dump's segments less the trace's events). `None` without dump-time
    /// segments on a trace that does not start empty.
    pub recorded_peak_reserved: Option<u64>,
    /// The model's `max_memory_allocated`.
    pub peak_allocated: u64,
    /// 1 − peak allocated / peak reserved (the model's).
    pub fragmentation: f64,
    /// Segment events that came out as recorded (same point, kind, address, size), up to the
    /// first that did not.
    pub segment_events_matched: usize,
    /// Segment events in the record.
    pub segment_events_recorded: usize,
    /// The first difference, in words; `None` when every segment event matched.
    pub first_mismatch: Option<String>,
    /// Allocations the model placed at another address than the record.
    pub address_mismatches: usize,
    /// The trace starts with nothing reserved: every segment and block is in it.
    pub complete_history: bool,
    /// `empty_cache` calls inferred (see the module doc).
    pub empty_cache_calls: usize,
    /// The record's `oom` entries, and how many the model also failed.
    pub recorded_ooms: usize,
    pub replayed_ooms: usize,
    /// The model's `num_alloc_retries`.
    pub num_alloc_retries: u64,
    /// The settings the replay ran with (`PYTORCH_CUDA_ALLOC_CONF` syntax, "" for defaults).
    pub alloc_conf: String,
    /// What was assumed or is unknown.
    pub notes: Vec<String>,
}

/// One user-level call, as the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Call {
    Malloc { size: u64, stream: u64, addr: u64 },
    Free { addr: u64 },
    Oom { size: u64, stream: u64 },
    EmptyCache,
}

/// A replayed trace: its result, and the calls for what-ifs.
#[derive(Debug, Clone)]
pub struct AllocReplay {
    pub result: ReplayResult,
    calls: Vec<Call>,
    /// Blocks live when the trace began: (address, size, stream), in address order.
    pre_trace: Vec<(u64, u64, u64)>,
    /// The settings the record ran with.
    config: AllocatorConfig,
}

/// The devices whose trace has user-level calls (`alloc`, `free_completed`, `oom`).
pub fn traced_devices(snap: &Snapshot) -> Vec<usize> {
    let is_call = |e: &crate::snapshot::TraceEntry| {
        matches!(
            e.action,
            Action::Alloc | Action::FreeCompleted | Action::Oom
        )
    };
    (0..snap.traces.len())
        .filter(|&d| snap.traces[d].iter().any(is_call))
        .collect()
}

/// Replays the device with the most trace entries among [`traced_devices`] (the others are
/// named in the notes). `None` when no device has calls.
pub fn replay_snapshot(snap: &Snapshot) -> Option<AllocReplay> {
    let devices = traced_devices(snap);
    let device = *devices.iter().max_by_key(|&&d| snap.traces[d].len())?;
    let mut replay = replay_device(snap, device)?;
    if devices.len() > 1 {
        let others: Vec<String> = devices
            .iter()
            .filter(|&&d| d != device)
            .map(|d| d.to_string())
            .collect();
        replay.result.notes.push(format!(
            "device {device} replayed; also traced: {}",
            others.join(", ")
        ));
    }
    Some(replay)
}

/// Replays device `device`'s trace. `None` when there is no such trace.
pub fn replay_device(snap: &Snapshot, device: usize) -> Option<AllocReplay> {
    let trace = snap.traces.get(device)?;
    let mut notes = Vec::new();
    let config = recorded::config_of(snap, &mut notes);
    let rec = recorded::analyse(snap, device, &config, &mut notes);
    let mut replay = lockstep::run(trace, &rec, config, notes);
    replay.result.device = device;
    Some(replay)
}

impl AllocReplay {
    /// Peak reserved bytes of the same calls under `config` (see the module doc).
    pub fn peak_reserved_under(&self, config: &AllocatorConfig) -> u64 {
        let mut model = Allocator::new(config, u64::MAX);
        let mut ids = std::collections::HashMap::new();
        for &(addr, size, stream) in &self.pre_trace {
            if let Ok(id) = model.malloc(size, stream) {
                ids.insert(addr, id);
            }
        }
        for call in &self.calls {
            match *call {
                Call::Malloc { size, stream, addr } => {
                    if let Ok(id) = model.malloc(size, stream) {
                        ids.insert(addr, id);
                    }
                }
                Call::Free { addr } => {
                    if let Some(id) = ids.remove(&addr) {
                        model.free(id);
                    }
                }
                Call::EmptyCache => model.empty_cache(),
                Call::Oom { .. } => {}
            }
        }
        model.stats().reserved_bytes.peak
    }

    /// What `config` would save against the record's own settings, both run the same way
    /// (the model's own addresses): peak reserved under the record's settings minus under
    /// `config`; negative when `config` would reserve more.
    pub fn saving_under(&self, config: &AllocatorConfig) -> i128 {
        self.peak_reserved_under(&self.config) as i128 - self.peak_reserved_under(config) as i128
    }

    /// The settings the record ran with.
    pub fn recorded_config(&self) -> &AllocatorConfig {
        &self.config
    }
}
