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

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// A free block's key: (size, address, arena index).
pub(crate) type Key = (u64, u64, u32);

/// The blocks of one size: (address, index), highest address first.
#[derive(Debug, Clone)]
enum Group {
    /// A size seen alone so far (no allocation; dropped when emptied).
    One((u64, u32)),
    /// A size that had two or more blocks at once; may be empty (kept for the next ones).
    Many(Vec<(u64, u32)>),
}

impl Group {
    fn as_slice(&self) -> &[(u64, u32)] {
        match self {
            Group::One(x) => std::slice::from_ref(x),
            Group::Many(v) => v,
        }
    }
}

/// The position of `addr` in a group sorted highest address first (where it is or would go).
fn position(g: &[(u64, u32)], addr: u64) -> usize {
    // The lowest address (the one best fit takes) is the last: checked first.
    match g.last() {
        Some(&(a, _)) if a == addr => g.len() - 1,
        _ => g.partition_point(|&(a, _)| a > addr),
    }
}

/// The free blocks of one pool of one stream.
#[derive(Debug, Default, Clone)]
pub(crate) struct FreeSet {
    /// Size → its blocks. A size with many blocks keeps its emptied group (a size freed in
    /// numbers is freed again: no map insert, removal or allocation each time) until empty
    /// groups outnumber the rest; a size seen alone costs what a key of an ordered set does.
    groups: BTreeMap<u64, Group>,
    len: usize,
    /// Empty `Many` groups.
    empty: usize,
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

    pub fn insert(&mut self, (size, addr, i): Key) {
        #[cfg(test)]
        assert!(self.shadow.insert((size, addr, i)));
        self.len += 1;
        let g = match self.groups.entry(size) {
            Entry::Vacant(e) => {
                e.insert(Group::One((addr, i)));
                return;
            }
            Entry::Occupied(e) => e.into_mut(),
        };
        match g {
            Group::One(x) => {
                let x = *x;
                let pair = if x.0 > addr {
                    [x, (addr, i)]
                } else {
                    [(addr, i), x]
                };
                let mut v = Vec::with_capacity(4);
                v.extend_from_slice(&pair);
                *g = Group::Many(v);
            }
            Group::Many(v) => {
                if v.is_empty() {
                    self.empty -= 1;
                }
                let at = v.partition_point(|&(a, _)| a > addr);
                v.insert(at, (addr, i));
            }
        }
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &Key) -> bool {
        let removed = self.remove_key(key);
        #[cfg(test)]
        assert_eq!(removed, self.shadow.remove(key));
        removed
    }

    fn remove_key(&mut self, &(size, addr, i): &Key) -> bool {
        // One descent: the entry removes a lone block's key where it stands.
        let Entry::Occupied(mut e) = self.groups.entry(size) else {
            return false;
        };
        match e.get_mut() {
            Group::One(x) => {
                if *x != (addr, i) {
                    return false;
                }
                e.remove();
            }
            Group::Many(v) => {
                let at = position(v, addr);
                if v.get(at) != Some(&(addr, i)) {
                    return false;
                }
                v.remove(at);
                if v.is_empty() {
                    self.empty += 1;
                    if self.empty > 16 && self.empty > self.groups.len() / 2 {
                        self.groups.retain(|_, g| !g.as_slice().is_empty());
                        self.empty = 0;
                    }
                }
            }
        }
        self.len -= 1;
        true
    }

    pub fn contains(&self, &(size, addr, i): &Key) -> bool {
        self.groups.get(&size).is_some_and(|g| {
            let g = g.as_slice();
            g.get(position(g, addr)) == Some(&(addr, i))
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
        self.groups
            .range(size..)
            .flat_map(|(&s, g)| g.as_slice().iter().rev().map(move |&(a, i)| (s, a, i)))
    }

    /// The first block of at least `size` bytes in (size, address) order.
    pub fn first_at_least(&self, size: u64) -> Option<Key> {
        let first = self
            .groups
            .range(size..)
            .find_map(|(&s, g)| g.as_slice().last().map(|&(a, i)| (s, a, i)));
        #[cfg(test)]
        assert_eq!(first, self.shadow.range((size, 0, 0)..).next().copied());
        first
    }

    /// The last block in (size, address) order: the largest, highest address among equals.
    pub fn last(&self) -> Option<Key> {
        let last = self
            .groups
            .iter()
            .rev()
            .find_map(|(&s, g)| g.as_slice().first().map(|&(a, i)| (s, a, i)));
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
