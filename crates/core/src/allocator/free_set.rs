//! One pool's free blocks in `BlockComparatorSize` order (`CUDACachingAllocator.cpp`: size,
//! then address), grouped by size: the sizes present in one sorted array, each with its
//! blocks sorted by address from the highest down, so the lowest address of a size — the one
//! best fit takes (`get_free_block`'s `lower_bound`) — is the last of its group.
//!
//! The grouping is for speed alone (the order it gives is exactly `(size, address)`): a
//! training step's large pool holds hundreds of free blocks of about ten sizes (the pieces
//! of segments shared by same-shaped tensors; BENCHMARKS.md), so a best-fit lookup is a
//! binary search of a few dozen sizes in one contiguous array (after a look at the group
//! found last for a size of its hash slot, `FreeSet::find`) and takes one group's last
//! element, where a set of `(size, address)` keys descends a tree of hundreds twice (find,
//! then remove). The sizes sit apart from their groups (two parallel arrays) so the search
//! reads nothing else; an emptied group is kept for the next block of its size (a size freed
//! in numbers is freed again: no array insert, removal or allocation each time) until empty
//! groups outnumber the rest.

/// A free block's key: (size, address, arena index).
pub(crate) type Key = (u64, u64, u32);

/// The position of `addr` in a group sorted highest address first (where it is or would go).
fn position(g: &[(u64, u32)], addr: u64) -> usize {
    // The lowest address (the one best fit takes) is the last: checked first.
    match g.last() {
        Some(&(a, _)) if a == addr => g.len() - 1,
        Some(&(a, _)) if a > addr => g.len(),
        _ => g.partition_point(|&(a, _)| a > addr),
    }
}

/// Slots of [`FreeSet::find`]'s table of groups found last.
const HINT_SLOTS: usize = 16;

/// A size's slot in that table: the size in 512-byte units (every rounded size is a multiple
/// of 512), hashed by a Fibonacci multiply, its top 4 bits.
#[inline]
fn hint_slot(size: u64) -> usize {
    ((size >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize
}

/// Empty groups kept at most (beyond it, and beyond the non-empty ones, they are dropped).
const EMPTY_KEPT: usize = 16;

/// Buffers of dropped groups kept for reuse at most.
const SPARE_KEPT: usize = 64;

/// The free blocks of one pool of one stream.
#[derive(Debug, Default, Clone)]
pub(crate) struct FreeSet {
    /// Every size that has a group, ascending.
    sizes: Vec<u64>,
    /// `groups[g]`: the blocks of `sizes[g]`, (address, index), highest address first; may be
    /// empty.
    groups: Vec<Vec<(u64, u32)>>,
    len: usize,
    /// Empty groups.
    empty: usize,
    /// Per slot of a size's hash, the group [`FreeSet::find`] found last for a size of that
    /// slot (checked before it is used).
    hints: [u32; HINT_SLOTS],
    /// The buffers of dropped groups, for the next new sizes (no heap allocation per size:
    /// a step's split remainders come and go in dozens of sizes).
    spare: Vec<Vec<(u64, u32)>>,
    /// Under test, every change is mirrored in an ordered set of keys (the reference order)
    /// and every answer checked against it: every allocator test checks the grouping too.
    #[cfg(test)]
    shadow: std::collections::BTreeSet<Key>,
}

impl FreeSet {
    pub fn len(&self) -> usize {
        #[cfg(test)]
        assert_eq!(self.len, self.shadow.len());
        self.len
    }

    /// The group of `size`, or where it would go. The group found last for a size of its
    /// slot in a small table (16 slots by a hash of the size) is tried first: a step frees
    /// and takes a few sizes over and over (a layer's tensors, a list's), and the sizes are
    /// distinct, so a match there is the answer the search would give. A slot that names a
    /// moved or dropped group matches nothing and the search runs.
    #[inline]
    fn find(&self, size: u64) -> Result<usize, usize> {
        let g = self.hints[hint_slot(size)] as usize;
        if self.sizes.get(g) == Some(&size) {
            return Ok(g);
        }
        self.sizes.binary_search(&size)
    }

    /// Remembers group `g` as the one of `size` (for [`FreeSet::find`]).
    #[inline]
    fn found(&mut self, size: u64, g: usize) {
        self.hints[hint_slot(size)] = g as u32;
    }

    #[inline]
    pub fn insert(&mut self, (size, addr, i): Key) {
        #[cfg(test)]
        assert!(self.shadow.insert((size, addr, i)));
        self.len += 1;
        match self.find(size) {
            Ok(g) => {
                self.found(size, g);
                let v = &mut self.groups[g];
                if v.is_empty() {
                    self.empty -= 1;
                }
                let at = position(v, addr);
                // The lowest address goes last: a push, no shift (nor a call to shift nothing).
                if at == v.len() {
                    v.push((addr, i));
                } else {
                    v.insert(at, (addr, i));
                }
            }
            Err(g) => {
                let mut v = self.spare.pop().unwrap_or_default();
                v.push((addr, i));
                self.sizes.insert(g, size);
                self.groups.insert(g, v);
            }
        }
    }

    /// Removes `key`; whether it was there.
    #[inline]
    pub fn remove(&mut self, key: &Key) -> bool {
        let removed = self.remove_key(key);
        #[cfg(test)]
        assert_eq!(removed, self.shadow.remove(key));
        removed
    }

    #[inline]
    fn remove_key(&mut self, &(size, addr, i): &Key) -> bool {
        let Ok(g) = self.find(size) else {
            return false;
        };
        self.found(size, g);
        let v = &mut self.groups[g];
        let at = position(v, addr);
        if v.get(at) != Some(&(addr, i)) {
            return false;
        }
        if at + 1 == v.len() {
            v.pop();
        } else {
            v.remove(at);
        }
        self.emptied(g);
        true
    }

    /// Book-keeping after a block left group `g`: the count, and the empty groups dropped
    /// once they are many and outnumber the rest.
    #[inline]
    fn emptied(&mut self, g: usize) {
        self.len -= 1;
        if !self.groups[g].is_empty() {
            return;
        }
        self.empty += 1;
        if self.empty > EMPTY_KEPT && 2 * self.empty > self.groups.len() {
            self.drop_empty_groups();
        }
    }

    /// The empty groups dropped (their buffers kept as spares), the rest in order.
    #[cold]
    fn drop_empty_groups(&mut self) {
        let mut kept = 0;
        for k in 0..self.groups.len() {
            if !self.groups[k].is_empty() {
                self.sizes.swap(kept, k);
                self.groups.swap(kept, k);
                kept += 1;
            }
        }
        self.sizes.truncate(kept);
        let room = SPARE_KEPT.saturating_sub(self.spare.len());
        self.spare.extend(self.groups.drain(kept..).take(room));
        self.empty = 0;
    }

    pub fn contains(&self, &(size, addr, i): &Key) -> bool {
        self.find(size).is_ok_and(|g| {
            let v = &self.groups[g];
            v.get(position(v, addr)) == Some(&(addr, i))
        })
    }

    /// The blocks of at least `size` bytes in (size, address) order.
    pub fn at_least(&self, size: u64) -> impl Iterator<Item = Key> + '_ {
        #[cfg(test)]
        assert!(self
            .in_order(size)
            .eq(self.shadow.range((size, 0, 0)..).copied()));
        self.in_order(size)
    }

    fn in_order(&self, size: u64) -> impl Iterator<Item = Key> + '_ {
        let from = self.find(size).unwrap_or_else(|g| g);
        self.sizes[from..]
            .iter()
            .zip(&self.groups[from..])
            .flat_map(|(&s, v)| v.iter().rev().map(move |&(a, i)| (s, a, i)))
    }

    /// The first block of at least `size` bytes in (size, address) order, with its group
    /// (for [`FreeSet::take`]).
    pub fn first_at_least_in(&self, size: u64) -> Option<(usize, Key)> {
        let from = self.find(size).unwrap_or_else(|g| g);
        let first = (from..self.groups.len()).find_map(|g| {
            let &(a, i) = self.groups[g].last()?;
            Some((g, (self.sizes[g], a, i)))
        });
        #[cfg(test)]
        assert_eq!(
            first.map(|f| f.1),
            self.shadow.range((size, 0, 0)..).next().copied()
        );
        first
    }

    /// The first block of at least `size` bytes in (size, address) order.
    pub fn first_at_least(&self, size: u64) -> Option<Key> {
        self.first_at_least_in(size).map(|f| f.1)
    }

    /// Removes the first block of group `g` in (size, address) order: what
    /// [`FreeSet::first_at_least_in`] named, with no change since.
    pub fn take(&mut self, g: usize) -> Option<Key> {
        let (a, i) = self.groups.get_mut(g)?.pop()?;
        let key = (self.sizes[g], a, i);
        #[cfg(test)]
        assert!(self.shadow.remove(&key));
        self.emptied(g);
        Some(key)
    }

    /// The last block in (size, address) order: the largest, highest address among equals.
    pub fn last(&self) -> Option<Key> {
        let last = (0..self.groups.len()).rev().find_map(|g| {
            let &(a, i) = self.groups[g].first()?;
            Some((self.sizes[g], a, i))
        });
        #[cfg(test)]
        assert_eq!(last, self.shadow.last().copied());
        last
    }

    /// Every block in (size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        self.at_least(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Emptied groups are dropped once they outnumber the rest; queries skip the empty ones
    /// meanwhile. 40 sizes of two blocks each (at 4 KiB·s and 1 GiB above), all removed but
    /// the largest size's: the smallest block of at least 512 B is then the next size's lower
    /// address, and the last block the largest size's higher one.
    #[test]
    fn emptied_groups_are_skipped_and_dropped() {
        let mut set = FreeSet::default();
        let high = 1u64 << 30;
        for s in 1..=40u64 {
            set.insert((512 * s, 4096 * s, s as u32));
            set.insert((512 * s, 4096 * s + high, 100 + s as u32));
        }
        for s in 1..40u64 {
            assert!(set.remove(&(512 * s, 4096 * s + high, 100 + s as u32)));
            assert!(set.remove(&(512 * s, 4096 * s, s as u32)));
            assert_eq!(
                set.first_at_least(512),
                Some((512 * (s + 1), 4096 * (s + 1), s as u32 + 1))
            );
        }
        assert_eq!(set.len(), 2);
        assert_eq!(set.last(), Some((512 * 40, 4096 * 40 + high, 140)));
        assert!(set.groups.len() < 40, "empty groups were dropped");
        set.insert((512 * 3, 8, 99));
        assert_eq!(set.first_at_least(512), Some((512 * 3, 8, 99)));
        assert_eq!(set.iter().count(), 3);
    }

    /// The group found last is checked before it is used: a new smaller size inserted ahead
    /// of it shifts the groups by one (1 KiB's goes in at 0, 2 KiB's moves from 0 to 1), and
    /// a lookup of 2 KiB must still reach 2 KiB's group. Blocks: 2 KiB at 8 KiB and 4 KiB,
    /// then 1 KiB at 0. Removing the 2 KiB block at 8 KiB succeeds once; the smallest block of
    /// at least 1.5 KiB is then the other 2 KiB block (4 KiB), of at least 512 B the 1 KiB one.
    #[test]
    fn the_group_found_last_is_checked_before_use() {
        let mut set = FreeSet::default();
        set.insert((2048, 8192, 1));
        set.insert((2048, 4096, 2));
        set.insert((1024, 0, 3));
        assert!(set.remove(&(2048, 8192, 1)));
        assert!(!set.remove(&(2048, 8192, 1)));
        assert_eq!(set.first_at_least(1536), Some((2048, 4096, 2)));
        assert_eq!(set.first_at_least(512), Some((1024, 0, 3)));
        assert!(set.contains(&(2048, 4096, 2)));
    }

    proptest! {
        /// The grouped set answers every query as an ordered set of (size, address, index)
        /// does (the reference: the order `BlockComparatorSize` gives), under random inserts,
        /// removes and best-fit takes of blocks of few sizes (as a step's large pool has) and
        /// many.
        #[test]
        fn agrees_with_an_ordered_set(
            ops in proptest::collection::vec((0u8..5, 0u64..40, 0u64..64, 0u64..40), 1..400),
            spread in prop_oneof![Just(1u64), Just(7u64), Just(1000u64)],
        ) {
            let mut reference: BTreeSet<Key> = BTreeSet::new();
            let mut set = FreeSet::default();
            for (i, &(op, s, a, q)) in ops.iter().enumerate() {
                let key = (512 * (1 + s * spread), 4096 * a, i as u32);
                match op {
                    0 | 1 => {
                        // Addresses are unique in a pool: a taken address is not inserted.
                        if !reference.iter().any(|k| k.1 == key.1) {
                            reference.insert(key);
                            set.insert(key);
                        }
                    }
                    2 => {
                        let existing = reference.iter().nth(q as usize % (reference.len() + 1)).copied();
                        let k = existing.unwrap_or(key);
                        prop_assert_eq!(set.remove(&k), reference.remove(&k));
                    }
                    4 => {
                        // Best fit's find-then-take: the first key of at least `size`, removed.
                        let size = 512 * (1 + q * spread / 3);
                        let want = reference.range((size, 0, 0)..).next().copied();
                        let taken = set.first_at_least_in(size).and_then(|(g, _)| set.take(g));
                        prop_assert_eq!(taken, want);
                        if let Some(k) = want {
                            reference.remove(&k);
                        }
                    }
                    _ => {
                        let size = 512 * (1 + q * spread / 3);
                        prop_assert_eq!(set.first_at_least(size), reference.range((size, 0, 0)..).next().copied());
                        let from: Vec<Key> = set.at_least(size).collect();
                        let want: Vec<Key> = reference.range((size, 0, 0)..).copied().collect();
                        prop_assert_eq!(from, want);
                    }
                }
                prop_assert_eq!(set.len(), reference.len());
                prop_assert_eq!(set.last(), reference.last().copied());
                prop_assert!(reference.iter().all(|k| set.contains(k)));
                prop_assert!(!set.contains(&(key.0, key.1, u32::MAX)));
            }
            let all: Vec<Key> = set.iter().collect();
            let want: Vec<Key> = reference.into_iter().collect();
            prop_assert_eq!(all, want);
        }
    }
}
