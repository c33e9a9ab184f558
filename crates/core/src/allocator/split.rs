//! Split and merge: `alloc_found_block` (a found block cut to the request, the remainder back
//! to the pool), `free` / `free_block` (a freed block merged with free neighbours of the same
//! segment) and `try_merge_blocks`, `CUDACachingAllocator.cpp`.

use super::block::{new_block, BlockId, NIL};
use super::Allocator;

impl Allocator {
    /// `alloc_found_block`: with `split`, the first `size` bytes of block `i` become a new
    /// allocated block and `i`, shrunk to what remains, goes back to its pool; either way the
    /// block counts in `allocated_bytes` at its full size.
    pub(crate) fn alloc_found_block(
        &mut self,
        i: u32,
        size: u64,
        requested: u64,
        split: bool,
    ) -> BlockId {
        let mut taken = i;
        if split {
            let (addr, stream, small, prev, expandable) = {
                let b = self.arena.get(i);
                (b.addr, b.stream, b.small, b.prev, b.expandable)
            };
            let mut front = new_block(addr, size, stream, small);
            front.expandable = expandable;
            front.prev = prev;
            front.next = i;
            let f = self.arena.add(front);
            if prev != NIL {
                self.arena.get_mut(prev).next = f;
            }
            let rest = self.arena.get_mut(i);
            rest.prev = f;
            rest.addr += size;
            rest.size -= size;
            self.insert_free(i);
            taken = f;
        }
        let b = self.arena.get_mut(taken);
        b.allocated = true;
        b.requested = requested;
        let block_size = b.size;
        self.stats.allocated_bytes.add(block_size);
        self.stats.requested_bytes.add(requested);
        self.stats.allocations.add(1);
        self.arena.id(taken)
    }

    /// Block `i` keeps its first `keep` bytes; the rest becomes a new block of the same
    /// stream, pool and segment linked after it (`mapped` or not), returned in no pool: the
    /// remainder `block_split` makes in `alloc_found_block` and `map_block` leaves unmapped
    /// (`CUDACachingAllocator.cpp`).
    pub(crate) fn split_tail(&mut self, i: u32, keep: u64, mapped: bool) -> u32 {
        let b = self.arena.get(i).clone();
        let mut rest = new_block(b.addr + keep, b.size - keep, b.stream, b.small);
        rest.mapped = mapped;
        rest.expandable = b.expandable;
        rest.prev = i;
        rest.next = b.next;
        let r = self.arena.add(rest);
        if b.next != NIL {
            self.arena.get_mut(b.next).prev = r;
        }
        let m = self.arena.get_mut(i);
        m.next = r;
        m.size = keep;
        r
    }

    /// `free` → `free_block`: the block leaves `allocated_bytes`, merges with free neighbours
    /// and returns to its pool. A handle that names no live allocation (already freed,
    /// `BlockId::EMPTY`, another allocator's) is ignored.
    pub fn free(&mut self, id: BlockId) {
        let Some(i) = self.arena.resolve(id) else {
            return;
        };
        let b = self.arena.get_mut(i);
        b.allocated = false;
        let (size, requested) = (b.size, b.requested);
        b.requested = 0;
        self.stats.allocated_bytes.sub(size);
        self.stats.requested_bytes.sub(requested);
        self.stats.allocations.sub(1);
        self.free_block(i);
    }

    /// `free_block`: merges with the previous then the next block, back into the pool.
    #[inline]
    pub(crate) fn free_block(&mut self, i: u32) {
        let (prev, next) = {
            let b = self.arena.get(i);
            (b.prev, b.next)
        };
        self.try_merge(i, prev);
        self.try_merge(i, next);
        self.insert_free(i);
    }

    /// `try_merge_blocks`: `src` (a neighbour of `dst`) is absorbed when it is free and mapped
    /// alike; `dst` must be out of every set. Returns the bytes absorbed.
    #[inline]
    pub(crate) fn try_merge(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let (s, d) = (self.arena.get(src), self.arena.get(dst));
        if s.allocated || s.mapped != d.mapped {
            return 0;
        }
        self.merge(dst, src)
    }

    /// The merge itself: `src` out of its set, its range and links given to `dst`.
    fn merge(&mut self, dst: u32, src: u32) -> u64 {
        if self.arena.get(src).mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let (addr, size, prev, next) = {
            let s = self.arena.get(src);
            (s.addr, s.size, s.prev, s.next)
        };
        let d = self.arena.get_mut(dst);
        d.size += size;
        if d.prev == src {
            d.addr = addr;
            d.prev = prev;
            if prev != NIL {
                self.arena.get_mut(prev).next = dst;
            }
        } else {
            d.next = next;
            if next != NIL {
                self.arena.get_mut(next).prev = dst;
            }
        }
        self.arena.remove(src);
        size
    }
}
