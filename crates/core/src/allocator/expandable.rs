//! `expandable_segments:True` (Note [Expandable Segments], `CUDACachingAllocator.cpp`): per
//! (stream, pool) an address range of 1⅛ × the device's memory is reserved once
//! (`ExpandableSegment`) and physical pages — 2 MiB for the small pool, 20 MiB for the large
//! one — are mapped into it as requests need them (`find_expandable_block`, `map_block`,
//! `try_allocate_expandable_block`) and unmapped when the cache is released (`unmap_block`,
//! `release_expandable_segment`). Free and unmapped ranges are blocks of the one segment, so
//! best fit and merging work as elsewhere.

use super::block::{new_block, pool_index, NIL};
use super::size::{LARGE_BUFFER, SMALL_BUFFER};
use super::stats::SegmentEventKind;
use super::{Allocator, ExpSegment};

impl Allocator {
    /// `try_allocate_expandable_block`: the lowest-address run of free and unmapped space that
    /// fits `size`, its unmapped part mapped page by page from the front until the run's
    /// first block covers `size`; taken out of the pool. `None` when a map would pass the
    /// capacity (pages mapped before that stay mapped, as in the source).
    pub(crate) fn try_allocate_expandable_block(
        &mut self,
        slot: usize,
        small: bool,
        size: u64,
    ) -> Option<u32> {
        let mut candidate = self.find_expandable_block(slot, small, size);
        if !self.arena.get(candidate).mapped {
            let want = self.arena.get(candidate).size.min(size);
            if !self.map_block(candidate, want) {
                return None;
            }
        }
        while self.arena.get(candidate).size < size {
            let have = self.arena.get(candidate).size;
            let next = self.arena.get(candidate).next;
            if next == NIL || self.arena.get(next).mapped {
                return None;
            }
            let want = (size - have).min(self.arena.get(next).size);
            if !self.map_block(next, want) {
                return None;
            }
            candidate = next;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `find_expandable_block`: the unmapped ranges of the stream and pool from the lowest
    /// address, each with the free block just before it if any, until one run of unallocated
    /// blocks holds `size`; failing that, a new segment's whole reservation as one unmapped
    /// block.
    fn find_expandable_block(&mut self, slot: usize, small: bool, size: u64) -> u32 {
        let pool = pool_index(small);
        let found = self.streams[slot].unmapped[pool]
            .iter()
            .find_map(|&(_, i)| {
                let prev = self.arena.get(i).prev;
                let start = if prev != NIL && !self.arena.get(prev).allocated {
                    prev
                } else {
                    i
                };
                self.has_room(start, size).then_some(start)
            });
        if let Some(start) = found {
            return start;
        }
        self.new_expandable_segment(slot, small)
    }

    /// Whether the unallocated blocks from `start` on add up to `size`.
    fn has_room(&self, start: u32, size: u64) -> bool {
        let (mut bytes, mut b) = (0u64, start);
        while bytes < size && b != NIL && !self.arena.get(b).allocated {
            bytes += self.arena.get(b).size;
            b = self.arena.get(b).next;
        }
        bytes >= size
    }

    /// A new `ExpandableSegment`: 1⅛ × device memory of address space in pages of the pool's
    /// size, nothing mapped.
    fn new_expandable_segment(&mut self, slot: usize, small: bool) -> u32 {
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let total = self.device_total;
        let pages = total.saturating_add(total / 8).div_ceil(page);
        let reserve = pages.saturating_mul(page);
        let base = self.segment_address(reserve);
        self.expandable.push(ExpSegment {
            base,
            page,
            pages,
            mapped_pages: 0,
            high_water: 0,
            live: true,
        });
        let stream = self.streams[slot].stream;
        let mut block = new_block(base, reserve, stream, small);
        block.mapped = false;
        block.expandable = (self.expandable.len() - 1) as u32;
        let i = self.arena.add(block);
        self.insert_unmapped(i);
        i
    }

    /// `map_block` with `ExpandableSegment::map`: the pages covering the first `size` bytes of
    /// unmapped block `i` are mapped (all or none: false past the capacity); the rest of the
    /// range stays an unmapped block after it; the mapped block merges with free neighbours
    /// and joins the pool.
    fn map_block(&mut self, i: u32, size: u64) -> bool {
        let (addr, block_size, seg) = {
            let b = self.arena.get(i);
            (b.addr, b.size, b.expandable as usize)
        };
        let (base, page) = (self.expandable[seg].base, self.expandable[seg].page);
        let begin = (addr - base) / page;
        let end = (addr - base + size).div_ceil(page);
        if begin == end {
            return false;
        }
        let bytes = (end - begin) * page;
        if self
            .total_reserved
            .checked_add(bytes)
            .is_none_or(|total| total > self.capacity)
        {
            return false;
        }
        self.set_pages(seg, begin, end, true);
        self.remove_unmapped(i);
        self.arena.get_mut(i).mapped = true;
        if bytes < block_size {
            let r = self.split_tail(i, bytes, false);
            self.insert_unmapped(r);
        }
        let (prev, next) = (self.arena.get(i).prev, self.arena.get(i).next);
        self.try_merge(i, prev);
        self.try_merge(i, next);
        self.insert_free(i);
        self.total_reserved += bytes;
        self.stats.reserved_bytes.add(bytes);
        self.stats.num_device_alloc += 1;
        let stream = self.arena.get(i).stream;
        self.event(SegmentEventKind::SegmentMap, addr, bytes, stream);
        true
    }

    /// `unmap_block` with `ExpandableSegment::unmap`: the whole pages inside free block `i`
    /// are unmapped; what is left before and after them stays free and mapped. A segment left
    /// with nothing mapped is released (`release_expandable_segment`).
    pub(crate) fn unmap_block(&mut self, i: u32) {
        let b = self.arena.get(i).clone();
        let seg = b.expandable as usize;
        let (base, page) = (self.expandable[seg].base, self.expandable[seg].page);
        let begin = (b.addr - base).div_ceil(page);
        let end = (b.addr - base + b.size) / page;
        if begin >= end {
            return;
        }
        let (start, bytes) = (base + begin * page, (end - begin) * page);
        self.remove_free(i);
        if start > b.addr {
            self.split_off_free(i, b.addr, start - b.addr, true);
        }
        let after = b.size - (start - b.addr) - bytes;
        if after > 0 {
            self.split_off_free(i, start + bytes, after, false);
        }
        let m = self.arena.get_mut(i);
        m.addr = start;
        m.size = bytes;
        m.mapped = false;
        self.set_pages(seg, begin, end, false);
        let (prev, next) = (self.arena.get(i).prev, self.arena.get(i).next);
        self.try_merge(i, prev);
        self.try_merge(i, next);
        self.insert_unmapped(i);
        self.total_reserved -= bytes;
        self.stats.reserved_bytes.sub(bytes);
        self.stats.num_device_free += 1;
        self.event(SegmentEventKind::SegmentUnmap, start, bytes, b.stream);
        let m = self.arena.get(i);
        if m.prev == NIL && m.next == NIL {
            self.remove_unmapped(i);
            self.arena.remove(i);
            self.expandable[seg].live = false;
        }
    }

    /// A free mapped block of `size` bytes at `addr` spliced in before (`before`) or after
    /// block `i`, into the pool.
    fn split_off_free(&mut self, i: u32, addr: u64, size: u64, before: bool) {
        let b = self.arena.get(i).clone();
        let mut piece = new_block(addr, size, b.stream, b.small);
        piece.expandable = b.expandable;
        if before {
            piece.prev = b.prev;
            piece.next = i;
        } else {
            piece.prev = i;
            piece.next = b.next;
        }
        let p = self.arena.add(piece);
        if before {
            if b.prev != NIL {
                self.arena.get_mut(b.prev).next = p;
            }
            self.arena.get_mut(i).prev = p;
        } else {
            if b.next != NIL {
                self.arena.get_mut(b.next).prev = p;
            }
            self.arena.get_mut(i).next = p;
        }
        self.insert_free(p);
    }

    /// `ExpandableSegment::map` / `unmap` of pages [begin, end): `map_block` maps only unmapped
    /// pages and `unmap_block` only mapped ones, so a count suffices.
    fn set_pages(&mut self, seg: usize, begin: u64, end: u64, mapped: bool) {
        let s = &mut self.expandable[seg];
        if mapped {
            s.mapped_pages += end - begin;
            s.high_water = s.high_water.max(end);
        } else {
            s.mapped_pages -= end - begin;
        }
    }
}
