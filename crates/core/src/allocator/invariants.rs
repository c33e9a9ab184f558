//! Consistency checks of the model's state, for tests and for callers that want to assert the
//! model is sound after feeding it a record (cheap enough for tests, not for hot loops).

use super::block::NIL;
use super::Allocator;

impl Allocator {
    /// Checks that: the blocks of each segment tile it without gaps; no two neighbouring free
    /// blocks are left unmerged; every free mapped block is in its pool's set and nothing else
    /// is; reserved = the sum of cudaMalloc'd segments and mapped pages; allocated = the sum of
    /// allocated blocks; reserved ≥ allocated; every peak ≥ its current value. `Err` names the
    /// first broken rule.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0u64;
        let mut free_blocks = 0usize;
        let mut segments_bytes = 0u64;
        let mut segments = 0u64;
        for (i, b) in self.arena.live() {
            if b.allocated {
                allocated += b.size;
            } else if b.mapped {
                free_blocks += 1;
                let slot = self.slot_of(b.stream);
                let pool = super::block::pool_index(b.small);
                if !self.streams[slot].free[pool].contains(&(b.size, b.addr, i)) {
                    return Err(format!(
                        "free block {i} at {:#x} is not in its pool",
                        b.addr
                    ));
                }
            }
            if b.next != NIL {
                let n = self.arena.get(b.next);
                if !n.live || n.prev != i || n.addr != b.addr + b.size {
                    return Err(format!("block {i} at {:#x}: broken link to next", b.addr));
                }
                if !b.allocated && !n.allocated && b.mapped == n.mapped {
                    return Err(format!("free neighbours at {:#x} not merged", b.addr));
                }
            }
            if b.prev == NIL {
                let size = self.chain_size(i);
                if b.expandable == NIL {
                    segments_bytes += size;
                    segments += 1;
                } else {
                    let s = &self.expandable[b.expandable as usize];
                    if size != s.page * s.pages || b.addr != s.base {
                        return Err(format!("expandable segment at {:#x} not tiled", s.base));
                    }
                }
            }
        }
        let in_sets: usize = self
            .streams
            .iter()
            .map(|p| p.free[0].len() + p.free[1].len())
            .sum();
        if in_sets != free_blocks {
            return Err(format!("{in_sets} blocks in the pools, {free_blocks} free"));
        }
        let mapped: u64 = self
            .expandable
            .iter()
            .filter(|s| s.live)
            .map(|s| s.mapped_pages * s.page)
            .sum();
        let s = &self.stats;
        let checks = [
            (
                s.reserved_bytes.current == segments_bytes + mapped,
                "reserved ≠ segments + mapped pages",
            ),
            (
                self.total_reserved == s.reserved_bytes.current,
                "total_allocated_memory ≠ reserved",
            ),
            (
                s.allocated_bytes.current == allocated,
                "allocated ≠ sum of allocated blocks",
            ),
            (s.segments.current == segments, "segment count ≠ segments"),
            (
                s.reserved_bytes.current >= allocated,
                "reserved < allocated",
            ),
            (
                s.reserved_bytes.peak >= s.reserved_bytes.current,
                "reserved peak < current",
            ),
            (
                s.allocated_bytes.peak >= s.allocated_bytes.current,
                "allocated peak < current",
            ),
            (self.total_reserved <= self.capacity, "reserved > capacity"),
        ];
        match checks.iter().find(|c| !c.0) {
            Some((_, rule)) => Err((*rule).to_string()),
            None => Ok(()),
        }
    }

    fn chain_size(&self, head: u32) -> u64 {
        let (mut size, mut b) = (0u64, head);
        while b != NIL {
            size += self.arena.get(b).size;
            b = self.arena.get(b).next;
        }
        size
    }
}
