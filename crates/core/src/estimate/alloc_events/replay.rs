//! Running a stream through a caching-allocator model.

use super::{Event, Outcome, Phase, Stream};

/// A caching allocator as the stream drives it (`crate::allocator::Allocator` implements it).
pub trait Sim {
    type Handle: Copy;
    /// `malloc` of `bytes`; `None` when the device is out of memory even after freeing the
    /// cache.
    fn malloc(&mut self, bytes: u64) -> Option<Self::Handle>;
    fn free(&mut self, h: Self::Handle);
    fn empty_cache(&mut self);
    fn reset_peak(&mut self);
    fn outcome(&self) -> Outcome;
}

/// Runs `stream` through `sim`; the peaks are reset when the first step begins (the process's
/// steady state is what `max_memory_reserved` reports after the model is built and the cache
/// emptied, as `run_one.py` measures). An allocation that fails marks the outcome OOM and is
/// skipped.
pub fn replay<S: Sim>(sim: &mut S, stream: &Stream) -> Outcome {
    let mut handles: Vec<Option<S::Handle>> = vec![None; stream.ids()];
    let mut oom = false;
    for e in &stream.events {
        match *e {
            Event::Alloc { id, bytes } => {
                let h = sim.malloc(bytes);
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
            Event::Phase(Phase::ZeroGrad(0)) => sim.reset_peak(),
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

    fn malloc(&mut self, bytes: u64) -> Option<Self::Handle> {
        crate::allocator::Allocator::malloc(self, bytes, 0).ok()
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
            segments: s.segments.peak,
            largest_free_block: s.largest_free_block,
            num_alloc_retries: s.num_alloc_retries,
            oom: false,
        }
    }
}
