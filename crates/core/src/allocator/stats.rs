//! What the allocator reports: `DeviceStats` (`c10/core/CachingDeviceAllocator.h`, updated by
//! `increase_stat`/`decrease_stat` in `CUDACachingAllocator.cpp`), the out-of-memory error,
//! and the segment events `record_trace` writes (`segment_alloc`, `segment_free`,
//! `segment_map`, `segment_unmap`, `oom`).

use serde::{Deserialize, Serialize};

/// A current value and its peak since the start or the last `reset_peak` (`Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
}

impl Stat {
    /// `increase_stat`.
    pub(crate) fn add(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
    }

    /// `decrease_stat`.
    pub(crate) fn sub(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
    }

    /// `reset_peak_stat`.
    pub(crate) fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// The aggregate figures of `torch.cuda.memory_stats()` the model keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorStats {
    /// `allocated_bytes.all`: sizes of the allocated blocks (rounded, split remainders apart).
    pub allocated_bytes: Stat,
    /// `reserved_bytes.all`: cudaMalloc'd segments plus mapped expandable pages.
    pub reserved_bytes: Stat,
    /// `requested_bytes.all`: the sizes callers asked for.
    pub requested_bytes: Stat,
    /// `allocation.all`: live allocations.
    pub allocations: Stat,
    /// `segment.all`: cudaMalloc'd segments (expandable segments are not counted, as in
    /// PyTorch).
    pub segments: Stat,
    /// Live expandable segments (`expandable_segments_`).
    pub expandable_segments: u64,
    /// The largest free (cached, mapped) block (`cacheInfo`), 0 when none.
    pub largest_free_block: u64,
    /// `num_alloc_retries`: mallocs that freed every cached block and tried again.
    pub num_alloc_retries: u64,
    /// `num_ooms`: mallocs that failed.
    pub num_ooms: u64,
    /// `num_device_alloc`: cudaMallocs and expandable maps.
    pub num_device_alloc: u64,
    /// `num_device_free`: cudaFrees and expandable unmaps.
    pub num_device_free: u64,
}

/// Which segment event (`TraceEntry::Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentEventKind {
    /// `SEGMENT_ALLOC`: a cudaMalloc (`alloc_block`).
    SegmentAlloc,
    /// `SEGMENT_FREE`: a cudaFree (`release_block`).
    SegmentFree,
    /// `SEGMENT_MAP`: pages mapped into an expandable segment (`map_block`).
    SegmentMap,
    /// `SEGMENT_UNMAP`: pages unmapped (`unmap_block`).
    SegmentUnmap,
    /// `OOM`: a malloc failed; `size` is the rounded request, `addr` 0.
    Oom,
}

/// One event of the log (`Allocator::set_event_log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEvent {
    pub kind: SegmentEventKind,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
}

/// A malloc the model could not serve: what PyTorch's "CUDA out of memory" message reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Oom {
    /// The size asked for.
    pub requested: u64,
    /// The size after `round_size`.
    pub rounded: u64,
    /// What the failed cudaMalloc asked for (`get_allocation_size`): "Tried to allocate".
    pub alloc_size: u64,
    pub stream: u64,
    /// `allocated_bytes` at the failure.
    pub allocated: u64,
    /// `reserved_bytes` at the failure (after the cache was released).
    pub reserved: u64,
    /// The allocator's capacity.
    pub capacity: u64,
}

impl std::fmt::Display for Oom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        write!(
            f,
            "out of memory: tried to allocate {:.2} GiB; {:.2} GiB allocated, {:.2} GiB reserved \
             ({:.2} GiB reserved but unallocated) of {:.2} GiB",
            gib(self.alloc_size),
            gib(self.allocated),
            gib(self.reserved),
            gib(self.reserved - self.allocated.min(self.reserved)),
            gib(self.capacity),
        )
    }
}

impl std::error::Error for Oom {}
