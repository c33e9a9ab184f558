//! Running a stream through a caching-allocator model.

use super::{Event, Outcome, Phase, Sink, Stream};

/// A caching allocator as the stream drives it (`crate::allocator::Allocator` implements it).
pub trait Sim {
    type Handle: Copy;
    /// `malloc` of `bytes` on `stream`; `None` when the device is out of memory even after
    /// freeing the cache.
    fn malloc(&mut self, bytes: u64, stream: u64) -> Option<Self::Handle>;
    fn free(&mut self, h: Self::Handle);
    fn empty_cache(&mut self);
    fn reset_peak(&mut self);
    fn outcome(&self) -> Outcome;
}

/// Runs `stream` through `sim`; the peaks are reset when the first step (or `generate` call)
/// begins (the process's
/// steady state is what `max_memory_reserved` reports after the model is built and the cache
/// emptied, as `run_one.py` measures). An allocation that fails marks the outcome OOM and is
/// skipped.
pub fn replay<S: Sim>(sim: &mut S, stream: &Stream) -> Outcome {
    let mut handles: Vec<Option<S::Handle>> = vec![None; stream.ids()];
    let mut oom = false;
    let mut reset = false;
    let mut on = 0;
    for e in &stream.events {
        match *e {
            Event::Alloc { id, bytes } => {
                let h = sim.malloc(bytes, on);
                oom |= h.is_none();
                if let Some(slot) = handles.get_mut(id as usize) {
                    *slot = h;
                }
            }
            Event::Free { id } => {
                if let Some(h) = handles.get_mut(id as usize).and_then(Option::take) {
                    sim.free(h);
                }
            }
            Event::EmptyCache => sim.empty_cache(),
            Event::Stream(s) => on = s,
            Event::Phase(Phase::ZeroGrad(0) | Phase::Forward(0)) if !reset => {
                sim.reset_peak();
                reset = true;
            }
            Event::Phase(_) => {}
        }
    }
    Outcome {
        oom,
        ..sim.outcome()
    }
}

impl Sim for crate::allocator::Allocator {
    type Handle = crate::allocator::BlockId;

    fn malloc(&mut self, bytes: u64, stream: u64) -> Option<Self::Handle> {
        crate::allocator::Allocator::malloc(self, bytes, stream).ok()
    }

    fn free(&mut self, h: Self::Handle) {
        crate::allocator::Allocator::free(self, h);
    }

    fn empty_cache(&mut self) {
        crate::allocator::Allocator::empty_cache(self);
    }

    fn reset_peak(&mut self) {
        crate::allocator::Allocator::reset_peak(self);
    }

    fn outcome(&self) -> Outcome {
        let s = self.stats();
        Outcome {
            peak_allocated: s.allocated_bytes.peak,
            peak_reserved: s.reserved_bytes.peak,
            // PyTorch's `segment.all` leaves expandable segments out; the report counts the
            // growing ones too, so `expandable_segments:True` does not read as "0 segments".
            segments: s.segments.peak + s.expandable_segments,
            largest_free_block: s.largest_free_block,
            num_alloc_retries: s.num_alloc_retries,
            oom: false,
        }
    }
}

/// One phase's figures, read as `run_one.py` reads them: the peaks reset when the phase
/// begins (`torch.cuda.reset_peak_memory_stats`), read when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseFigures {
    pub phase: Phase,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
}

/// [`replay`], phase by phase.
pub fn replay_by_phase(
    sim: &mut crate::allocator::Allocator,
    stream: &Stream,
) -> Vec<PhaseFigures> {
    let mut handles = vec![None; stream.ids()];
    let mut out: Vec<PhaseFigures> = Vec::new();
    let mut on = 0;
    let close = |sim: &crate::allocator::Allocator, out: &mut Vec<PhaseFigures>| {
        if let Some(last) = out.last_mut() {
            let s = sim.stats();
            last.peak_allocated = s.allocated_bytes.peak;
            last.peak_reserved = s.reserved_bytes.peak;
        }
    };
    for e in &stream.events {
        match *e {
            Event::Alloc { id, bytes } => {
                handles[id as usize] = sim.malloc(bytes, on).ok();
            }
            Event::Free { id } => {
                if let Some(h) = handles[id as usize].take() {
                    sim.free(h);
                }
            }
            Event::EmptyCache => sim.empty_cache(),
            Event::Stream(s) => on = s,
            Event::Phase(p) => {
                close(sim, &mut out);
                sim.reset_peak();
                out.push(PhaseFigures {
                    phase: p,
                    peak_allocated: 0,
                    peak_reserved: 0,
                });
            }
        }
    }
    close(sim, &mut out);
    out
}

/// A [`Sink`] that runs each event through the allocator model as it is made (no event list):
/// the estimate's path. The peaks are reset when the first step begins, as [`replay`] does.
pub struct SimSink {
    pub sim: crate::allocator::Allocator,
    handles: Vec<Option<crate::allocator::BlockId>>,
    oom: bool,
    /// The peaks were reset when the first step (or `generate` call) began.
    reset: bool,
    /// The allocator's state at the last [`Sink::repeats`] call.
    last: Option<crate::allocator::CacheSignature>,
    /// The stream allocations are made on ([`Sink::stream`]).
    on: u64,
}

impl SimSink {
    pub fn new(sim: crate::allocator::Allocator) -> Self {
        SimSink {
            sim,
            handles: Vec::with_capacity(1 << 12),
            oom: false,
            reset: false,
            last: None,
            on: 0,
        }
    }

    /// What the model says of the events so far.
    pub fn outcome(&self) -> Outcome {
        Outcome {
            oom: self.oom,
            ..Sim::outcome(&self.sim)
        }
    }

    fn malloc(&mut self, bytes: u64) -> Option<crate::allocator::BlockId> {
        let h = self.sim.malloc(bytes, self.on).ok();
        self.oom |= h.is_none();
        h
    }
}

impl Sink for SimSink {
    fn alloc(&mut self, bytes: u64) -> u32 {
        let id = self.handles.len() as u32;
        let h = if bytes > 0 { self.malloc(bytes) } else { None };
        self.handles.push(h);
        id
    }

    fn alloc_at(&mut self, id: u32, bytes: u64) {
        let live = matches!(self.handles.get(id as usize), Some(Some(_)) | None);
        if live || bytes == 0 {
            return;
        }
        let h = self.malloc(bytes);
        self.handles[id as usize] = h;
    }

    fn free(&mut self, id: u32) {
        if let Some(h) = self.handles.get_mut(id as usize).and_then(Option::take) {
            self.sim.free(h);
        }
    }

    fn reserve(&mut self, n: usize) -> u32 {
        let base = self.handles.len() as u32;
        self.handles.extend(std::iter::repeat_n(None, n));
        base
    }

    fn phase(&mut self, p: Phase) {
        if matches!(p, Phase::ZeroGrad(0) | Phase::Forward(0)) && !self.reset {
            self.sim.reset_peak();
            self.reset = true;
        }
    }

    fn empty_cache(&mut self) {
        self.sim.empty_cache();
    }

    fn stream(&mut self, stream: u64) {
        self.on = stream;
    }

    fn repeats(&mut self, compare: bool) -> bool {
        let now = self.sim.cache_signature();
        let same = compare && now.is_some() && now == self.last;
        self.last = now;
        same
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{Allocator, AllocatorConfig};

    const MIB: u64 = 1 << 20;

    /// A 3 MiB request (large pool, under 10 MiB) makes a 20 MiB segment and splits it
    /// (`CUDACachingAllocator.cpp`: `get_allocation_size`, `should_split`); freeing it merges
    /// the pieces back into one cached 20 MiB block. The first run of "alloc 3 MiB, free"
    /// made a segment, so it does not repeat; the second takes the cached block and leaves the
    /// same 20 MiB free block with no device call, so it does. Under `expandable_segments`
    /// the first maps a 20 MiB page (the large pool's page) and the free keeps it mapped; the
    /// second maps nothing: a repeat too. Under `garbage_collection_threshold` each free
    /// block's age decides: never one.
    #[test]
    fn a_run_that_leaves_the_cache_as_it_found_it_repeats() {
        for (conf, want) in [
            ("", [false, false, true]),
            ("expandable_segments:True", [false, false, true]),
            ("garbage_collection_threshold:0.5", [false; 3]),
        ] {
            let config = AllocatorConfig::parse(conf).unwrap();
            let mut s = SimSink::new(Allocator::new(&config, u64::MAX));
            let mut got = [s.repeats(false), false, false];
            for g in &mut got[1..] {
                let id = s.alloc(3 * MIB);
                s.free(id);
                *g = s.repeats(true);
            }
            assert_eq!(got, want, "{conf:?}");
            assert_eq!(s.outcome().peak_reserved, 20 * MIB, "{conf:?}");
        }
    }
}
