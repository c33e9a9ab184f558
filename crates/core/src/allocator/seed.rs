//! Seeding a state the model did not build itself: the segments and live blocks that existed
//! before a record began (a trace that starts mid-run). Nothing here is in PyTorch; it places
//! blocks exactly where the record says they were, so the model continues from there.

use super::block::{new_block, BlockId};
use super::Allocator;

impl Allocator {
    /// Adds a cudaMalloc'd segment of `size` bytes at `addr`, wholly free (cached), to the
    /// small or large pool of `stream`. It counts in reserved memory and the segment count; no
    /// event is logged. `Err` when it overlaps a block the model holds.
    pub fn seed_segment(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        small: bool,
    ) -> Result<(), String> {
        if size == 0 {
            return Err(format!("seed: empty segment at {addr:#x}"));
        }
        let end = addr.saturating_add(size);
        if self
            .arena
            .live()
            .any(|(_, b)| b.addr < end && addr < b.addr.saturating_add(b.size))
        {
            return Err(format!(
                "seed: segment at {addr:#x} overlaps the model's blocks"
            ));
        }
        self.slot(stream);
        let i = self.arena.add(new_block(addr, size, stream, small));
        self.insert_free(i);
        self.total_reserved = self.total_reserved.saturating_add(size);
        self.stats.segments.add(1);
        self.stats.reserved_bytes.add(size);
        if end > self.next_address {
            self.next_address = end;
        }
        Ok(())
    }

    /// Marks `size` bytes at `addr` on `stream` allocated (`requested` asked for), cut out of
    /// the free block that holds them; the pieces before and after stay free. `None` when no
    /// free block of that stream holds the range.
    pub fn seed_allocation(
        &mut self,
        addr: u64,
        size: u64,
        requested: u64,
        stream: u64,
    ) -> Option<BlockId> {
        let slot = self
            .streams
            .binary_search_by_key(&stream, |p| p.stream)
            .ok()?;
        let end = addr.checked_add(size)?;
        let holder = self.streams[slot]
            .free
            .iter()
            .flat_map(|set| set.iter())
            .find(|k| k.1 <= addr && end <= k.1 + k.0)
            .map(|k| k.2)?;
        self.remove_free(holder);
        let front = addr - self.arena.get(holder).addr;
        let mut at = holder;
        if front > 0 {
            // The front stays the holder (free); the rest becomes a new block after it.
            let r = self.split_tail(holder, front, true);
            self.insert_free(holder);
            at = r;
        }
        if self.arena.get(at).size > size {
            let t = self.split_tail(at, size, true);
            self.insert_free(t);
        }
        Some(self.alloc_found_block(at, size, requested, false))
    }
}
