//! The malloc path of `DeviceCachingAllocator::malloc`, `CUDACachingAllocator.cpp`: best fit
//! from the pool (`get_free_block`), else garbage collection (`garbage_collect_cached_blocks`),
//! a new segment (`alloc_block`), freeing oversize cached blocks and trying again
//! (`release_available_cached_blocks`), freeing every unsplit cached block and trying a last
//! time (`release_cached_blocks`, counted in `num_alloc_retries`), else an OOM.

use super::block::{new_block, pool_index, BlockId, NIL};
use super::size::{allocation_size, is_small, round_size, should_split};
use super::stats::{Oom, SegmentEventKind};
use super::Allocator;

/// One request as the malloc path sees it (`AllocParams`).
#[derive(Clone, Copy)]
struct Request {
    slot: usize,
    stream: u64,
    size: u64,
    small: bool,
    alloc_size: u64,
}

impl Allocator {
    /// `malloc`: a block of at least `size` bytes on `stream`, or the OOM PyTorch would raise.
    /// `size` is what the caller asks for (PyTorch rounds it); 0 gives `BlockId::EMPTY`.
    pub fn malloc(&mut self, size: u64, stream: u64) -> Result<BlockId, Oom> {
        if size == 0 {
            return Ok(BlockId::EMPTY);
        }
        let rounded = round_size(size, &self.settings.divisions);
        let small = is_small(rounded);
        let req = Request {
            slot: self.slot(stream),
            stream,
            size: rounded,
            small,
            alloc_size: allocation_size(rounded),
        };
        let mut found = self.get_free_block(req);
        if found.is_none() {
            if self.gc_enabled() {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(req, false);
            if found.is_none() && self.release_available_cached_blocks(req) {
                found = self.alloc_block(req, false);
            }
            if found.is_none() {
                self.release_cached_blocks();
                found = self.alloc_block(req, true);
            }
        }
        let Some(i) = found else {
            return Err(self.oom(size, req));
        };
        let split = should_split(
            self.arena.get(i).size,
            rounded,
            small,
            self.settings.expandable,
            self.settings.max_split,
        );
        Ok(self.alloc_found_block(i, rounded, size, split))
    }

    fn oom(&mut self, requested: u64, req: Request) -> Oom {
        self.stats.num_ooms += 1;
        self.event(SegmentEventKind::Oom, 0, req.size, req.stream);
        Oom {
            requested,
            rounded: req.size,
            alloc_size: req.alloc_size,
            stream: req.stream,
            allocated: self.stats.allocated_bytes.current,
            reserved: self.stats.reserved_bytes.current,
            capacity: self.capacity,
        }
    }

    /// Garbage collection runs only with a threshold and an allowed maximum (see module doc).
    pub(crate) fn gc_enabled(&self) -> bool {
        self.settings.gc
    }

    /// `get_free_block`: the smallest free block of the stream and pool at least `size` large,
    /// lowest address first among equals. Under expandable segments a block followed by
    /// unmapped space counts as that much larger, so later candidates that can grow less are
    /// preferred. A request below `max_split_size` never takes an oversize block; a request at
    /// or above it takes one only if it is less than `max_non_split_rounding` larger.
    fn get_free_block(&mut self, req: Request) -> Option<u32> {
        let pool = pool_index(req.small);
        if self.gc_enabled() {
            self.gc_calls[pool] += 1;
        }
        let set = &self.streams[req.slot].free[pool];
        let (group, first) = set.first_at_least_in(req.size)?;
        let best = if self.settings.expandable && self.arena.get(first.2).expandable != NIL {
            self.best_expandable(req.slot, pool, first)
        } else {
            first
        };
        let (block_size, max_split) = (best.0, self.settings.max_split);
        if req.size < max_split && block_size >= max_split {
            return None;
        }
        if req.size >= max_split
            && block_size
                >= req
                    .size
                    .saturating_add(self.settings.max_non_split_rounding)
        {
            return None;
        }
        let set = &mut self.streams[req.slot].free[pool];
        if best == first {
            // Best fit's own block: the last of its group, taken without a second search.
            set.take(group);
        } else {
            set.remove(&best);
        }
        Some(best.2)
    }

    /// Best fit where the first candidate lies in an expandable segment: a block followed
    /// by unmapped space counts as that much larger, so later candidates of the same pool
    /// that can grow less are preferred (`get_free_block`'s expandable loop).
    fn best_expandable(
        &self,
        slot: usize,
        pool: usize,
        first: super::free_set::Key,
    ) -> super::free_set::Key {
        let mut best = first;
        for next in self.streams[slot].free[pool].at_least(first.0).skip(1) {
            let current = self.arena.get(best.2);
            if current.expandable == NIL
                || self.expandable_size(next.2) >= self.expandable_size(best.2)
            {
                break;
            }
            best = next;
        }
        best
    }

    /// The size a free block can grow to: itself plus the unmapped range right after it.
    fn expandable_size(&self, i: u32) -> u64 {
        let b = self.arena.get(i);
        let next = (b.next != NIL).then(|| self.arena.get(b.next));
        b.size + next.filter(|n| !n.mapped).map_or(0, |n| n.size)
    }

    /// `alloc_block`: a new segment of `alloc_size` bytes (cudaMalloc), or under expandable
    /// segments pages mapped for the request; `None` when that would pass the capacity. A
    /// retry (`is_retry`) counts in `num_alloc_retries` whatever its outcome.
    fn alloc_block(&mut self, req: Request, is_retry: bool) -> Option<u32> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if self.settings.expandable {
            return self.try_allocate_expandable_block(req.slot, req.small, req.size);
        }
        match self.total_reserved.checked_add(req.alloc_size) {
            Some(total) if total <= self.capacity => self.total_reserved = total,
            _ => return None,
        }
        let addr = self.segment_address(req.alloc_size);
        let i = self
            .arena
            .add(new_block(addr, req.alloc_size, req.stream, req.small));
        self.stats.segments.add(1);
        self.stats.reserved_bytes.add(req.alloc_size);
        self.stats.num_device_alloc += 1;
        self.event(
            SegmentEventKind::SegmentAlloc,
            addr,
            req.alloc_size,
            req.stream,
        );
        Some(i)
    }

    /// `release_block`: cudaFree of a whole free segment.
    fn release_block(&mut self, i: u32) {
        self.remove_free(i);
        let b = self.arena.get(i);
        let (addr, size, stream) = (b.addr, b.size, b.stream);
        self.total_reserved -= size;
        self.stats.segments.sub(1);
        self.stats.reserved_bytes.sub(size);
        self.stats.num_device_free += 1;
        self.event(SegmentEventKind::SegmentFree, addr, size, stream);
        self.arena.remove(i);
    }

    /// `release_available_cached_blocks` (only with `max_split_size` set): the smallest free
    /// block of the stream and pool at least max(request, max_split_size) large is cudaFreed;
    /// failing one, oversize blocks from the largest down until that much is freed. True when
    /// enough was freed. (Oversize blocks are whole segments: they are never split.)
    fn release_available_cached_blocks(&mut self, req: Request) -> bool {
        let max_split = self.settings.max_split;
        if max_split == u64::MAX {
            return false;
        }
        let pool = pool_index(req.small);
        let key = req.size.max(max_split);
        let set = &self.streams[req.slot].free[pool];
        if let Some((_, _, i)) = set.first_at_least(key) {
            if !self.releasable(i) {
                return false;
            }
            self.release_block(i);
            return true;
        }
        let mut released = 0u64;
        while released < key {
            let Some((size, _, i)) = self.streams[req.slot].free[pool].last() else {
                break;
            };
            if size < max_split || !self.releasable(i) {
                break;
            }
            released += size;
            self.release_block(i);
        }
        released >= key
    }

    /// A whole cudaMalloc'd segment (PyTorch asserts `release_block` is never given a block of
    /// an expandable segment or a split one).
    fn releasable(&self, i: u32) -> bool {
        let b = self.arena.get(i);
        b.expandable == NIL && !b.is_split()
    }

    /// `release_cached_blocks` → `release_blocks` of the large, then the small pool, streams
    /// in order, blocks by (size, address): every unsplit free segment is cudaFreed; free
    /// blocks of expandable segments have their whole pages unmapped, and a segment left with
    /// nothing mapped is released.
    pub(crate) fn release_cached_blocks(&mut self) {
        for small in [false, true] {
            let pool = pool_index(small);
            let mut to_unmap = Vec::new();
            for slot in 0..self.streams.len() {
                let blocks: Vec<u32> = self.streams[slot].free[pool].iter().map(|k| k.2).collect();
                for i in blocks {
                    let b = self.arena.get(i);
                    if b.expandable != NIL {
                        to_unmap.push(i);
                    } else if !b.is_split() {
                        self.release_block(i);
                    }
                }
            }
            for i in to_unmap {
                self.unmap_block(i);
            }
        }
    }

    /// `garbage_collect_cached_blocks`: once reserved memory passes the threshold × the
    /// allowed maximum, unsplit free large-pool segments at least as old as the average (age:
    /// `get_free_block` calls on the pool since the block was cached) are cudaFreed, pass
    /// after pass, until the excess is reclaimed or nothing more can be.
    fn garbage_collect_cached_blocks(&mut self) {
        let threshold = (self.settings.gc_threshold * self.capacity as f64) as u64;
        if self.total_reserved <= threshold {
            return;
        }
        let target = self.total_reserved - threshold;
        let pool = pool_index(false);
        let now = self.gc_calls[pool];
        let freeable = |a: &Allocator| -> Vec<(u32, u64)> {
            a.streams
                .iter()
                .flat_map(|p| p.free[pool].iter())
                .filter(|k| a.releasable(k.2))
                .map(|k| (k.2, now - a.arena.get(k.2).gc_base))
                .collect()
        };
        let first = freeable(self);
        let mut total_age: u64 = first.iter().map(|b| b.1).sum();
        let mut count = first.len() as u64;
        let mut reclaimed = 0u64;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let average = total_age as f64 / count as f64;
            freed = false;
            for (i, age) in freeable(self) {
                if age as f64 >= average {
                    freed = true;
                    reclaimed += self.arena.get(i).size;
                    total_age -= age;
                    count -= 1;
                    self.release_block(i);
                }
            }
        }
    }
}
