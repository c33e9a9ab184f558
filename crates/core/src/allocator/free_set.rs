//! One pool's free blocks in `BlockComparatorSize` order (`CUDACachingAllocator.cpp`: size,
//! then address), grouped by size: an ordered map from each size present to its blocks, each
//! group sorted by address from the highest down, so the lowest address of a size — the one
//! best fit takes (`get_free_block`'s `lower_bound`) — is the last of its group.
//!
//! The grouping is for speed alone (the order it gives is exactly `(size, address)`): a
//! training step's large pool holds hundreds of free blocks of about ten sizes (the pieces
//! of segments shared by same-shaped tensors; BENCHMARKS.md), so a best-fit lookup searches a
//! handful of sizes and takes one group's last element, where a set of `(size, address)`
//! keys descends a tree of hundreds twice (find, then remove).

use std::collections::BTreeMap;

/// A free block's key: (size, address, arena index).
pub(crate) type Key = (u64, u64, u32);

/// The free blocks of one pool of one stream.
#[derive(Debug, Default, Clone)]
pub(crate) struct FreeSet {
    /// Size → (address, index) of the free blocks of that size, highest address first. A
    /// group left empty stays (a size freed once is usually freed again: no map insert and
    /// removal, no allocation, each time) until empty groups outnumber the rest.
    groups: BTreeMap<u64, Vec<(u64, u32)>>,
    len: usize,
    empty: usize,
}

impl FreeSet {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn insert(&mut self, (size, addr, i): Key) {
        let group = self.groups.entry(size).or_default();
        // A group in the map with nothing in it was emptied by `remove` (a new one has no
        // capacity yet).
        if group.is_empty() && group.capacity() > 0 {
            self.empty -= 1;
        }
        // Highest address first: the insertion point is after every larger address.
        let at = group.partition_point(|&(a, _)| a > addr);
        group.insert(at, (addr, i));
        self.len += 1;
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, &(size, addr, i): &Key) -> bool {
        let Some(group) = self.groups.get_mut(&size) else {
            return false;
        };
        // The lowest address (the one best fit takes) is the last: checked first.
        let at = match group.last() {
            Some(&(a, _)) if a == addr => group.len() - 1,
            _ => group.partition_point(|&(a, _)| a > addr),
        };
        if group.get(at) != Some(&(addr, i)) {
            return false;
        }
        group.remove(at);
        self.len -= 1;
        if group.is_empty() {
            self.empty += 1;
            if self.empty > 16 && self.empty > self.groups.len() / 2 {
                self.groups.retain(|_, g| !g.is_empty());
                self.empty = 0;
            }
        }
        true
    }

    pub fn contains(&self, &(size, addr, i): &Key) -> bool {
        self.groups.get(&size).is_some_and(|g| {
            let at = g.partition_point(|&(a, _)| a > addr);
            g.get(at) == Some(&(addr, i))
        })
    }

    /// The blocks of at least `size` bytes in (size, address) order.
    pub fn from_size(&self, size: u64) -> impl Iterator<Item = Key> + '_ {
        self.groups
            .range(size..)
            .flat_map(|(&s, g)| g.iter().rev().map(move |&(a, i)| (s, a, i)))
    }

    /// The first block of at least `size` bytes in (size, address) order.
    pub fn first_from(&self, size: u64) -> Option<Key> {
        self.groups
            .range(size..)
            .find_map(|(&s, g)| g.last().map(|&(a, i)| (s, a, i)))
    }

    /// The last block in (size, address) order: the largest, highest address among equals.
    pub fn last(&self) -> Option<Key> {
        self.groups
            .iter()
            .rev()
            .find_map(|(&s, g)| g.first().map(|&(a, i)| (s, a, i)))
    }

    /// Every block in (size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        self.from_size(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Emptied groups are dropped once they outnumber the rest; queries skip the empty ones
    /// meanwhile. 40 sizes of one block each, all removed but the largest: the smallest block
    /// of at least 512 B is then that one (40 × 512 B at address 0), and so is the last.
    #[test]
    fn emptied_groups_are_skipped_and_dropped() {
        let mut set = FreeSet::default();
        for s in 1..=40u64 {
            set.insert((512 * s, 4096 * s, s as u32));
        }
        for s in 1..40u64 {
            assert!(set.remove(&(512 * s, 4096 * s, s as u32)));
            assert_eq!(
                set.first_from(512),
                Some((512 * (s + 1), 4096 * (s + 1), s as u32 + 1))
            );
        }
        assert_eq!(set.len(), 1);
        assert_eq!(set.last(), Some((512 * 40, 4096 * 40, 40)));
        assert!(set.groups.len() < 40, "empty groups were dropped");
        set.insert((512 * 3, 8, 99));
        assert_eq!(set.first_from(512), Some((512 * 3, 8, 99)));
        assert_eq!(set.iter().count(), 2);
    }

    proptest! {
        /// The grouped set answers every query as an ordered set of (size, address, index)
        /// does (the reference: the order `BlockComparatorSize` gives), under random inserts
        /// and removes of blocks of few sizes (as a step's large pool has) and many.
        #[test]
        fn agrees_with_an_ordered_set(
            ops in proptest::collection::vec((0u8..4, 0u64..40, 0u64..64, 0u64..40), 1..400),
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
                    _ => {
                        let size = 512 * (1 + q * spread / 3);
                        prop_assert_eq!(set.first_from(size), reference.range((size, 0, 0)..).next().copied());
                        let from: Vec<Key> = set.from_size(size).collect();
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
