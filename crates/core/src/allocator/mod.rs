//! A model of PyTorch's native CUDA caching allocator (`DeviceCachingAllocator` in
//! `c10/cuda/CUDACachingAllocator.cpp`, pytorch/pytorch; settings from
//! `c10/core/AllocatorConfig.cpp`): the same blocks, pools, splits, merges, segments and
//! retries, driven by a sequence of `malloc(size, stream)` / `free` / `empty_cache` calls, so
//! `max_memory_reserved` (and everything behind it) comes out as the real allocator would have
//! it. It depends on nothing else in this crate.
//!
//! ```
//! use vramscope_core::allocator::{Allocator, AllocatorConfig};
//! let config = AllocatorConfig::parse("expandable_segments:False").unwrap();
//! let mut a = Allocator::new(&config, u64::MAX); // unlimited device memory
//! let x = a.malloc(3 << 20, 0).unwrap(); // 3 MiB: a 20 MiB segment, split
//! a.free(x);
//! assert_eq!(a.stats().reserved_bytes.current, 20 << 20);
//! a.empty_cache();
//! assert_eq!(a.stats().reserved_bytes.current, 0);
//! ```
//!
//! What is modelled (each function's doc names its counterpart in the source):
//! - `size`: `round_size` (512 B, `roundup_power2_divisions`), the pools, `get_allocation_size`,
//!   `should_split`;
//! - `block`: blocks in an arena, per-stream free sets ordered as `BlockComparatorSize`
//!   (`free_set`: grouped by size, the lowest address of a size found first);
//! - `split`: `alloc_found_block` (split), `free_block` / `try_merge_blocks` (merge);
//! - `malloc`: `get_free_block` (best fit, `max_split_size`), `garbage_collect_cached_blocks`,
//!   `alloc_block`, `release_available_cached_blocks`, `release_cached_blocks`, the retry and
//!   the OOM;
//! - `expandable`: `expandable_segments:True` — one reserved address range per (stream, pool)
//!   mapped in pages of 2 MiB (small pool) or 20 MiB (large pool): `find_expandable_block`,
//!   `map_block`, `try_allocate_expandable_block`, `unmap_block`;
//! - `stats`: `DeviceStats`' aggregate figures, the OOM error, the segment event log.
//!
//! Not modelled: CUDA graph private pools, cross-stream uses (`recordStream` and its events:
//! a free is final when the caller calls `free`, i.e. at the trace's `free_completed`), IPC,
//! free-memory callbacks.
//!
//! **Capacity.** `capacity` is what the allocator may hold in total (device memory less the
//! CUDA context and anything else): a cudaMalloc or page map that would take reserved memory
//! past it fails, which starts the release-and-retry path. `u64::MAX` is unlimited. PyTorch
//! runs `garbage_collection_threshold` only under `set_per_process_memory_fraction`; the model
//! runs it when a threshold is set and the capacity is finite, taking the capacity as the
//! allowed maximum.
//!
//! **Addresses.** Best fit breaks ties on address, so addresses matter. A new segment (a
//! cudaMalloc, or an expandable segment's address reservation) takes the next address the
//! caller supplied with [`Allocator::supply_segment_address`] (a replay knows them from the
//! trace's `segment_alloc` events); without one, the model's own: segments laid end to end
//! from 1 TiB upward, each start aligned to 2 MiB, freed ranges never reused.
//!
//! **For the estimator**: build one `Allocator` per simulated device, call `malloc` with the
//! tensor's byte size as PyTorch would request it (un-rounded) and `free` with its handle in
//! the order the step runs, read `stats()` (`reserved_bytes.peak` is `max_memory_reserved`).
//! **For a replay**: turn on `set_event_log(true)` and compare `take_events()` with the
//! record's segment events.

pub mod config;
mod expandable;
mod free_set;
mod invariants;
mod malloc;
mod seed;
pub mod size;
mod split;
pub mod stats;

mod block;
#[cfg(test)]
mod tests;

use block::{Arena, StreamPools};
use std::collections::VecDeque;

pub use block::BlockId;
pub use config::{AllocatorConfig, IntervalBound, Rest, RoundupDivisions};
pub use stats::{AllocatorStats, Oom, SegmentEvent, SegmentEventKind, Stat};

/// Where the model's own segment addresses start (1 TiB).
const ADDRESS_BASE: u64 = 1 << 40;
/// Alignment of the model's own segment addresses (cudaMalloc returns 2 MiB-aligned ranges for
/// such sizes).
const ADDRESS_ALIGN: u64 = 2 << 20;
/// The device memory assumed for an expandable segment's address reservation when the capacity
/// is unlimited and none was set (80 GiB).
const DEFAULT_DEVICE_TOTAL: u64 = 80 << 30;

/// The settings as the hot path reads them.
#[derive(Debug, Clone)]
struct Settings {
    expandable: bool,
    max_split: u64,
    max_non_split_rounding: u64,
    /// 0 = off.
    gc_threshold: f64,
    /// Garbage collection runs: a threshold and a finite capacity (see the module doc); fixed
    /// at `new`, so the malloc path tests one flag.
    gc: bool,
    divisions: [u64; config::ROUNDUP_INTERVALS],
}

/// One expandable segment (`ExpandableSegment`): a reserved address range, how many of its
/// pages are mapped and the end of the highest page ever mapped (in pages).
#[derive(Debug, Clone)]
struct ExpSegment {
    base: u64,
    page: u64,
    pages: u64,
    mapped_pages: u64,
    high_water: u64,
    live: bool,
}

/// The allocator's deciding state at one point ([`Allocator::cache_signature`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSignature {
    /// (stream, pool, size, address) of every free block, in the pools' order.
    free: Vec<(u64, u8, u64, u64)>,
    /// The same of every unmapped range of an expandable segment.
    unmapped: Vec<(u64, u8, u64, u64)>,
    /// (base, mapped pages, high water, live) of every expandable segment.
    expandable: Vec<(u64, u64, u64, u64)>,
    allocated: u64,
    /// `num_device_alloc`, `num_device_free`, `num_alloc_retries`, `num_ooms`.
    calls: [u64; 4],
}

/// The allocator of one device.
#[derive(Debug, Clone)]
pub struct Allocator {
    settings: Settings,
    capacity: u64,
    device_total: u64,
    arena: Arena,
    /// Per stream, sorted by stream id (the comparators' first key).
    streams: Vec<StreamPools>,
    /// `get_free_blocks_call_count` of the small and large pools.
    gc_calls: [u64; 2],
    expandable: Vec<ExpSegment>,
    /// `total_allocated_memory`: bytes cudaMalloc'd or mapped.
    total_reserved: u64,
    stats: AllocatorStats,
    next_address: u64,
    supplied: VecDeque<u64>,
    log: Option<Vec<SegmentEvent>>,
}

impl Allocator {
    /// An empty allocator with `config`'s settings that may hold up to `capacity` bytes
    /// (`u64::MAX`: unlimited). The config is taken as given (see `AllocatorConfig::validate`).
    pub fn new(config: &AllocatorConfig, capacity: u64) -> Self {
        Allocator {
            settings: Settings {
                expandable: config.expandable_segments,
                max_split: config.max_split_size(),
                max_non_split_rounding: config.max_non_split_rounding_size(),
                gc_threshold: config.garbage_collection_threshold.unwrap_or(0.0),
                gc: config.garbage_collection_threshold.unwrap_or(0.0) > 0.0
                    && capacity != u64::MAX,
                divisions: config.divisions_table(),
            },
            capacity,
            device_total: if capacity == u64::MAX {
                DEFAULT_DEVICE_TOTAL
            } else {
                capacity
            },
            arena: Arena::default(),
            streams: Vec::new(),
            gc_calls: [0; 2],
            expandable: Vec::new(),
            total_reserved: 0,
            stats: AllocatorStats::default(),
            next_address: ADDRESS_BASE,
            supplied: VecDeque::new(),
            log: None,
        }
    }

    /// The device's total memory, which sizes an expandable segment's address reservation
    /// (1⅛ of it, `ExpandableSegment`'s constructor). Defaults to the capacity (80 GiB when
    /// unlimited).
    pub fn set_device_total(&mut self, bytes: u64) {
        self.device_total = bytes.max(1);
    }

    /// The address the next new segment (cudaMalloc or expandable reservation) gets; several
    /// calls queue in order.
    pub fn supply_segment_address(&mut self, addr: u64) {
        self.supplied.push_back(addr);
    }

    /// Addresses supplied and not used yet are dropped.
    pub fn clear_supplied_addresses(&mut self) {
        self.supplied.clear();
    }

    /// Turns the segment event log on (cleared) or off.
    pub fn set_event_log(&mut self, on: bool) {
        self.log = on.then(Vec::new);
    }

    /// The events logged since the last call.
    pub fn take_events(&mut self) -> Vec<SegmentEvent> {
        match &mut self.log {
            Some(log) => std::mem::take(log),
            None => Vec::new(),
        }
    }

    /// Whether `addr` lies in the used part of a live expandable segment: from its base to the
    /// end of the highest page it ever mapped, inclusive (where the next map that grows it
    /// starts). A replay uses it to tell a map into a segment the model has from the first map
    /// of a new one, whatever the size of the reservation.
    pub fn in_expandable_segment(&self, addr: u64) -> bool {
        self.expandable
            .iter()
            .any(|s| s.live && addr >= s.base && addr <= s.base + s.page * s.high_water)
    }

    /// The block's (rounded) size and address, if the handle names a live allocation.
    pub fn block(&self, id: BlockId) -> Option<(u64, u64)> {
        let i = self.arena.resolve(id)?;
        let b = self.arena.get(i);
        Some((b.addr, b.size))
    }

    /// `emptyCache` → `release_cached_blocks`: every free segment that is not split is
    /// cudaFreed; under expandable segments every free page is unmapped.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    /// `resetPeakStats`: every peak back to its current value.
    pub fn reset_peak(&mut self) {
        let s = &mut self.stats;
        for stat in [
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.requested_bytes,
            &mut s.allocations,
            &mut s.segments,
        ] {
            stat.reset_peak();
        }
    }

    /// The figures of `torch.cuda.memory_stats()` the model keeps.
    pub fn stats(&self) -> AllocatorStats {
        let mut s = self.stats;
        s.largest_free_block = self
            .streams
            .iter()
            .flat_map(|p| p.free.iter())
            .filter_map(|set| set.last().map(|k| k.0))
            .max()
            .unwrap_or(0);
        s.expandable_segments = self.expandable.iter().filter(|e| e.live).count() as u64;
        s
    }

    /// What decides the allocator's answers to the requests still to come: each stream's
    /// free blocks per pool (size and address: best fit's order), the bytes allocated, and
    /// the device calls, retries and failures so far. Two equal signatures mean that no
    /// segment was made or released between them and the cache holds the same pieces at the
    /// same addresses, so the same requests from either point get the same blocks, segments
    /// and figures. Under `expandable_segments` the unmapped ranges and each segment's mapped
    /// pages decide too, and are part of it. `None` where more state decides:
    /// `garbage_collection_threshold` (each free block's age).
    pub fn cache_signature(&self) -> Option<CacheSignature> {
        if self.settings.gc_threshold > 0.0 {
            return None;
        }
        // Each stream's pools in order, each pool's blocks as `(stream, pool, size, addr)`.
        let (mut free, mut unmapped) = (Vec::new(), Vec::new());
        for p in &self.streams {
            for pool in 0..2 {
                let at = |size, addr| (p.stream, pool as u8, size, addr);
                free.extend(p.free[pool].iter().map(|(size, addr, _)| at(size, addr)));
                let sized = |&(addr, i): &(u64, u32)| at(self.arena.get(i).size, addr);
                unmapped.extend(p.unmapped[pool].iter().map(sized));
            }
        }
        let expandable = self
            .expandable
            .iter()
            .map(|e| (e.base, e.mapped_pages, e.high_water, u64::from(e.live)))
            .collect();
        let s = &self.stats;
        Some(CacheSignature {
            free,
            unmapped,
            expandable,
            allocated: s.allocated_bytes.current,
            calls: [
                s.num_device_alloc,
                s.num_device_free,
                s.num_alloc_retries,
                s.num_ooms,
            ],
        })
    }

    /// The capacity given to `new`.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn event(&mut self, kind: SegmentEventKind, addr: u64, size: u64, stream: u64) {
        if let Some(log) = &mut self.log {
            log.push(SegmentEvent {
                kind,
                addr,
                size,
                stream,
            });
        }
    }

    /// The address of a new segment of `size` bytes: a supplied one, else the next free one
    /// of the model's own (documented in the module doc).
    fn segment_address(&mut self, size: u64) -> u64 {
        let addr = self.supplied.pop_front().unwrap_or(self.next_address);
        let end = addr.saturating_add(size);
        if end > self.next_address {
            self.next_address = end.div_ceil(ADDRESS_ALIGN).saturating_mul(ADDRESS_ALIGN);
        }
        addr
    }

    /// The stream's pools, created (in stream order) on first use.
    #[inline(always)]
    fn slot(&mut self, stream: u64) -> usize {
        // One stream is the common case (the estimate's): no search.
        if self.streams.first().is_some_and(|p| p.stream == stream) {
            return 0;
        }
        self.slot_searched(stream)
    }

    fn slot_searched(&mut self, stream: u64) -> usize {
        match self.streams.binary_search_by_key(&stream, |p| p.stream) {
            Ok(i) => i,
            Err(i) => {
                self.streams.insert(
                    i,
                    StreamPools {
                        stream,
                        ..StreamPools::default()
                    },
                );
                i
            }
        }
    }

    #[inline(always)]
    fn slot_of(&self, stream: u64) -> usize {
        if self.streams.first().is_some_and(|p| p.stream == stream) {
            return 0;
        }
        self.streams
            .binary_search_by_key(&stream, |p| p.stream)
            .expect("a block's stream has pools")
    }

    /// Puts a free mapped block into its pool (`BlockPool::insert_into_blocks`, which also
    /// stamps the garbage collector's age base).
    #[inline]
    fn insert_free(&mut self, i: u32) {
        let base = {
            let b = self.arena.get(i);
            self.gc_calls[block::pool_index(b.small)]
        };
        let b = self.arena.get_mut(i);
        b.gc_base = base;
        let key = (b.size, b.addr, i);
        let (stream, pool) = (b.stream, block::pool_index(b.small));
        let slot = self.slot_of(stream);
        self.streams[slot].free[pool].insert(key);
    }

    /// Takes a free mapped block out of its pool.
    #[inline]
    fn remove_free(&mut self, i: u32) {
        let b = self.arena.get(i);
        let key = (b.size, b.addr, i);
        let pool = block::pool_index(b.small);
        let slot = self.slot_of(b.stream);
        self.streams[slot].free[pool].remove(&key);
    }

    fn insert_unmapped(&mut self, i: u32) {
        let b = self.arena.get(i);
        let (key, pool) = ((b.addr, i), block::pool_index(b.small));
        let slot = self.slot_of(b.stream);
        self.streams[slot].unmapped[pool].insert(key);
    }

    fn remove_unmapped(&mut self, i: u32) {
        let b = self.arena.get(i);
        let (key, pool) = ((b.addr, i), block::pool_index(b.small));
        let slot = self.slot_of(b.stream);
        self.streams[slot].unmapped[pool].remove(&key);
    }
}
