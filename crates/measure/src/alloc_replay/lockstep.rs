//! The replay proper: the trace's calls run through the model one by one, the segment events
//! recorded before each call compared with those the model produces for it (see the module
//! doc for the inferred `empty_cache`).

use super::recorded::Recorded;
use super::{AllocReplay, Call, ReplayResult};
use crate::snapshot::{Action, TraceEntry};
use std::collections::HashMap;
use vramscope_core::allocator::{
    Allocator, AllocatorConfig, BlockId, SegmentEvent, SegmentEventKind,
};

/// A segment event of the record, with the trace entry it came from.
#[derive(Debug, Clone, Copy)]
struct Expected {
    kind: SegmentEventKind,
    addr: u64,
    size: u64,
    entry: usize,
}

struct Lockstep {
    model: Allocator,
    ids: HashMap<u64, BlockId>,
    pending: Vec<Expected>,
    calls: Vec<Call>,
    matched: usize,
    first_mismatch: Option<String>,
    address_mismatches: usize,
    empty_cache_calls: usize,
    replayed_ooms: usize,
    unknown_frees: usize,
    trials: usize,
}

/// Most trial runs (a copy of the model each) one replay makes.
const MAX_TRIALS: usize = 10_000;

fn kind_of(a: Action) -> Option<SegmentEventKind> {
    match a {
        Action::SegmentAlloc => Some(SegmentEventKind::SegmentAlloc),
        Action::SegmentFree => Some(SegmentEventKind::SegmentFree),
        Action::SegmentMap => Some(SegmentEventKind::SegmentMap),
        Action::SegmentUnmap => Some(SegmentEventKind::SegmentUnmap),
        _ => None,
    }
}

fn same(m: &SegmentEvent, r: &Expected) -> bool {
    m.kind == r.kind && m.addr == r.addr && m.size == r.size
}

fn describe_kind(k: SegmentEventKind) -> &'static str {
    match k {
        SegmentEventKind::SegmentAlloc => "segment_alloc",
        SegmentEventKind::SegmentFree => "segment_free",
        SegmentEventKind::SegmentMap => "segment_map",
        SegmentEventKind::SegmentUnmap => "segment_unmap",
        SegmentEventKind::Oom => "oom",
    }
}

/// The model at the trace's start: the record's capacity, event log on, the pre-trace
/// segments and blocks placed (see the module doc), peaks from there.
fn seeded_model(
    rec: &Recorded,
    config: &AllocatorConfig,
    notes: &mut Vec<String>,
) -> (Allocator, HashMap<u64, BlockId>) {
    let mut model = Allocator::new(config, rec.capacity);
    model.set_event_log(true);
    let mut ids = HashMap::new();
    let mut overlapping = Vec::new();
    for s in &rec.pre_segments {
        if let Err(e) = model.seed_segment(s.addr, s.size, s.stream, s.small) {
            overlapping.push(e);
        }
    }
    if let Some(first) = overlapping.first() {
        notes.push(format!(
            "{} pre-trace segments not seeded (first: {first})",
            overlapping.len()
        ));
    }
    let mut unplaced = 0usize;
    for b in &rec.pre_blocks {
        match model.seed_allocation(b.addr, b.size, b.requested, b.stream) {
            Some(id) => {
                ids.insert(b.addr, id);
            }
            None => unplaced += 1,
        }
    }
    if unplaced > 0 {
        notes.push(format!(
            "{unplaced} pre-trace blocks lie in no known segment: left out"
        ));
    }
    model.reset_peak();
    (model, ids)
}

/// Runs the trace; `rec` carries the pre-trace state and the capacity.
pub(super) fn run(
    trace: &[TraceEntry],
    rec: &Recorded,
    config: AllocatorConfig,
    mut notes: Vec<String>,
) -> AllocReplay {
    let (model, ids) = seeded_model(rec, &config, &mut notes);
    let pre_trace = rec
        .pre_blocks
        .iter()
        .map(|b| (b.addr, b.size, b.stream))
        .collect();
    let mut ls = Lockstep {
        model,
        ids,
        pending: Vec::new(),
        calls: Vec::new(),
        matched: 0,
        first_mismatch: None,
        address_mismatches: 0,
        empty_cache_calls: 0,
        replayed_ooms: 0,
        unknown_frees: 0,
        trials: 0,
    };
    for (entry, e) in trace.iter().enumerate() {
        if let Some(kind) = kind_of(e.action) {
            ls.pending.push(Expected {
                kind,
                addr: e.addr,
                size: e.size,
                entry,
            });
            continue;
        }
        let call = match e.action {
            Action::Alloc => Call::Malloc {
                size: e.size,
                stream: e.stream,
                addr: e.addr,
            },
            Action::FreeCompleted => Call::Free { addr: e.addr },
            Action::Oom => Call::Oom {
                size: e.size,
                stream: e.stream,
            },
            _ => continue,
        };
        ls.step(call, entry);
    }
    if !ls.pending.is_empty() {
        ls.step(Call::EmptyCache, trace.len());
    }
    if ls.unknown_frees > 0 {
        notes.push(format!(
            "{} frees of blocks the replay does not know (allocated before the trace)",
            ls.unknown_frees
        ));
    }
    ls.finish(rec, config, notes, pre_trace)
}

impl Lockstep {
    /// One call, with the record's segment events gathered before it.
    fn step(&mut self, call: Call, entry: usize) {
        let pending = std::mem::take(&mut self.pending);
        self.model.clear_supplied_addresses();
        for p in &pending {
            let new_expandable =
                p.kind == SegmentEventKind::SegmentMap && !self.model.in_expandable_segment(p.addr);
            if p.kind == SegmentEventKind::SegmentAlloc || new_expandable {
                self.model.supply_segment_address(p.addr);
            }
        }
        let releases_first = pending.first().is_some_and(|p| {
            matches!(
                p.kind,
                SegmentEventKind::SegmentFree | SegmentEventKind::SegmentUnmap
            )
        });
        let mut events = Vec::new();
        // Only a malloc that fails can release memory itself (a retry, garbage collection),
        // and with unlimited memory none fails: then the release is an `empty_cache`. Trials
        // copy the model: a budget bounds them on long, hostile records.
        let may_release = self.model.capacity() != u64::MAX
            && matches!(call, Call::Malloc { .. } | Call::Oom { .. });
        if releases_first && may_release && self.trials < MAX_TRIALS {
            self.trials += 1;
            // Does the call itself release that first?
            let mut trial = self.model.clone();
            let outcome = apply(&mut trial, &call, &self.ids);
            let trial_events = trial.take_events();
            if trial_events.first().is_some_and(|m| same(m, &pending[0])) {
                self.model = trial;
                self.commit(call, outcome, entry);
                self.compare(&trial_events, &pending);
                return;
            }
        }
        if releases_first && call != Call::EmptyCache {
            self.model.empty_cache();
            self.calls.push(Call::EmptyCache);
            self.empty_cache_calls += 1;
            events = self.model.take_events();
        }
        if call == Call::EmptyCache {
            self.empty_cache_calls += 1;
        }
        let outcome = apply(&mut self.model, &call, &self.ids);
        events.extend(self.model.take_events());
        self.commit(call, outcome, entry);
        self.compare(&events, &pending);
    }

    /// Records a call's outcome: the block handle of an allocation, a free's handle dropped.
    fn commit(&mut self, call: Call, outcome: Outcome, entry: usize) {
        self.calls.push(call);
        match (call, outcome) {
            (Call::Malloc { addr, .. }, Outcome::Block(id)) => {
                if self.model.block(id).map(|b| b.0) != Some(addr) {
                    self.address_mismatches += 1;
                }
                self.ids.insert(addr, id);
            }
            (Call::Malloc { size, .. }, Outcome::Oom) => {
                self.mismatch(format!(
                    "trace entry {entry}: the record allocated {size} B, the model ran out of memory"
                ));
            }
            (Call::Free { addr }, Outcome::Freed) => {
                self.ids.remove(&addr);
            }
            (Call::Free { .. }, _) => self.unknown_frees += 1,
            (Call::Oom { .. }, Outcome::Oom) => self.replayed_ooms += 1,
            (Call::Oom { size, .. }, _) => {
                self.mismatch(format!(
                    "trace entry {entry}: the record ran out of memory for {size} B, the model did not"
                ));
            }
            _ => {}
        }
    }

    /// Compares the model's segment events with the record's, in order.
    fn compare(&mut self, model: &[SegmentEvent], recorded: &[Expected]) {
        let model: Vec<&SegmentEvent> = model
            .iter()
            .filter(|m| m.kind != SegmentEventKind::Oom)
            .collect();
        for k in 0..model.len().max(recorded.len()) {
            match (model.get(k), recorded.get(k)) {
                (Some(m), Some(r)) if same(m, r) => {
                    if self.first_mismatch.is_none() {
                        self.matched += 1;
                    }
                }
                (m, r) => {
                    let said = |kind, size, addr| {
                        format!("{} of {size} B at {addr:#x}", describe_kind(kind))
                    };
                    let rec = r.map_or("nothing".to_string(), |r| said(r.kind, r.size, r.addr));
                    let got = m.map_or("nothing".to_string(), |m| said(m.kind, m.size, m.addr));
                    let at = r.map_or(String::new(), |r| format!("trace entry {}: ", r.entry));
                    self.mismatch(format!("{at}recorded {rec}, model {got}"));
                    return;
                }
            }
        }
    }

    fn mismatch(&mut self, what: String) {
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some(what);
        }
    }

    fn finish(
        self,
        rec: &Recorded,
        config: AllocatorConfig,
        notes: Vec<String>,
        pre_trace: Vec<(u64, u64, u64)>,
    ) -> AllocReplay {
        let stats = self.model.stats();
        let (peak_reserved, peak_allocated) =
            (stats.reserved_bytes.peak, stats.allocated_bytes.peak);
        let fragmentation = if peak_reserved == 0 {
            0.0
        } else {
            1.0 - peak_allocated as f64 / peak_reserved as f64
        };
        let result = ReplayResult {
            device: 0,
            replayed_peak_reserved: peak_reserved,
            recorded_peak_reserved: rec.peak_reserved,
            peak_allocated,
            fragmentation,
            segment_events_matched: self.matched,
            segment_events_recorded: rec.segment_events,
            first_mismatch: self.first_mismatch,
            address_mismatches: self.address_mismatches,
            complete_history: rec.start_reserved == Some(0) && self.unknown_frees == 0,
            empty_cache_calls: self.empty_cache_calls,
            recorded_ooms: rec.ooms,
            replayed_ooms: self.replayed_ooms,
            num_alloc_retries: stats.num_alloc_retries,
            alloc_conf: config.to_conf_string(),
            notes,
        };
        AllocReplay {
            result,
            calls: self.calls,
            pre_trace,
            config,
        }
    }
}

/// What a call did in the model.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Block(BlockId),
    Oom,
    Freed,
    Unknown,
    Done,
}

fn apply(model: &mut Allocator, call: &Call, ids: &HashMap<u64, BlockId>) -> Outcome {
    match *call {
        Call::Malloc { size, stream, .. } => match model.malloc(size, stream) {
            Ok(id) => Outcome::Block(id),
            Err(_) => Outcome::Oom,
        },
        Call::Oom { size, stream } => match model.malloc(size, stream) {
            Ok(id) => {
                model.free(id);
                Outcome::Done
            }
            Err(_) => Outcome::Oom,
        },
        Call::Free { addr } => match ids.get(&addr) {
            Some(&id) => {
                model.free(id);
                Outcome::Freed
            }
            None => Outcome::Unknown,
        },
        Call::EmptyCache => {
            model.empty_cache();
            Outcome::Done
        }
    }
}
