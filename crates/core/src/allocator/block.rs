//! Blocks and the free pools: `Block` and `BlockPool` of `CUDACachingAllocator.cpp`, as an
//! arena (indices into a `Vec`, freed slots reused) and, per stream, one ordered set of free
//! mapped blocks keyed (size, address) — `BlockComparatorSize`, grouped by size
//! (`free_set.rs`) — and one of unmapped
//! expandable ranges keyed by address — `BlockComparatorAddress` — for each of the small and
//! large pools. The comparators order by stream first; one set per stream gives the same order.

use std::collections::BTreeSet;

/// No block (`nullptr` in a `prev`/`next` link or a segment reference).
pub(crate) const NIL: u32 = u32::MAX;

/// A handle to one allocation made by [`super::Allocator::malloc`]. Stale or foreign handles are
/// recognised (generation count) and ignored by `free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl BlockId {
    /// What `malloc(0)` returns: PyTorch hands out a null pointer without reaching the
    /// allocator (`CUDACachingAllocator::allocate`), so nothing is allocated or freed.
    pub const EMPTY: BlockId = BlockId {
        index: NIL,
        generation: 0,
    };
}

/// One block: a range of a segment, allocated, free (cached) or — in an expandable segment —
/// unmapped address space.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: u64,
    /// The size the caller asked for (`requested_size`), 0 when not allocated.
    pub requested: u64,
    pub stream: u64,
    pub prev: u32,
    pub next: u32,
    /// Index into the allocator's expandable segments, or `NIL`.
    pub expandable: u32,
    /// `get_free_blocks_call_count` of its pool when it was last put into the pool.
    pub gc_base: u64,
    pub generation: u32,
    pub small: bool,
    pub allocated: bool,
    pub mapped: bool,
    pub live: bool,
}

impl Block {
    /// `Block::is_split`: part of a segment with other blocks.
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

/// The free sets of one stream: index 0 the small pool, 1 the large pool.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamPools {
    pub stream: u64,
    /// Free mapped blocks, (size, address, block index).
    pub free: [super::free_set::FreeSet; 2],
    /// Unmapped ranges of expandable segments, (address, block index).
    pub unmapped: [BTreeSet<(u64, u32)>; 2],
}

/// Pool index in [`StreamPools`] arrays.
pub(crate) fn pool_index(small: bool) -> usize {
    if small {
        0
    } else {
        1
    }
}

/// The block arena.
#[derive(Debug, Default, Clone)]
pub(crate) struct Arena {
    pub blocks: Vec<Block>,
    spare: Vec<u32>,
}

impl Arena {
    /// A new live block; reuses a freed slot when there is one.
    pub fn add(&mut self, mut block: Block) -> u32 {
        block.live = true;
        if let Some(i) = self.spare.pop() {
            block.generation = self.blocks[i as usize].generation.wrapping_add(1);
            self.blocks[i as usize] = block;
            i
        } else {
            block.generation = 0;
            self.blocks.push(block);
            (self.blocks.len() - 1) as u32
        }
    }

    pub fn remove(&mut self, i: u32) {
        self.blocks[i as usize].live = false;
        self.spare.push(i);
    }

    pub fn get(&self, i: u32) -> &Block {
        &self.blocks[i as usize]
    }

    pub fn get_mut(&mut self, i: u32) -> &mut Block {
        &mut self.blocks[i as usize]
    }

    /// The live, allocated block a handle names, if it still names one.
    pub fn resolve(&self, id: BlockId) -> Option<u32> {
        let b = self.blocks.get(id.index as usize)?;
        (b.live && b.allocated && b.generation == id.generation).then_some(id.index)
    }

    pub fn id(&self, i: u32) -> BlockId {
        BlockId {
            index: i,
            generation: self.blocks[i as usize].generation,
        }
    }

    /// Live blocks (for invariant checks and state dumps).
    pub fn live(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.live)
            .map(|(i, b)| (i as u32, b))
    }
}

/// A fresh block value (not yet in the arena).
pub(crate) fn new_block(addr: u64, size: u64, stream: u64, small: bool) -> Block {
    Block {
        addr,
        size,
        requested: 0,
        stream,
        prev: NIL,
        next: NIL,
        expandable: NIL,
        gc_base: 0,
        generation: 0,
        small,
        allocated: false,
        mapped: true,
        live: true,
    }
}
