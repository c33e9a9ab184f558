//! Hand-derived event sequences: every expected figure is worked out in the comment beside it
//! from the rules of `CUDACachingAllocator.cpp`, not read off the model.

mod expandable;
mod property;
mod retry;

use super::{Allocator, AllocatorConfig, SegmentEvent, SegmentEventKind};

pub(super) const MIB: u64 = 1 << 20;

pub(super) fn default_allocator(capacity: u64) -> Allocator {
    logging(&AllocatorConfig::default(), capacity)
}

/// An allocator of `PYTORCH_CUDA_ALLOC_CONF` `conf` on a GPU of `capacity` bytes, logging its
/// segment events.
pub(super) fn configured(conf: &str, capacity: u64) -> Allocator {
    logging(&AllocatorConfig::parse(conf).unwrap(), capacity)
}

fn logging(config: &AllocatorConfig, capacity: u64) -> Allocator {
    let mut a = Allocator::new(config, capacity);
    a.set_event_log(true);
    a
}

/// Each size allocated and freed at once, in turn: a cache of blocks that are all free.
pub(super) fn cache_each(a: &mut Allocator, sizes: &[u64]) {
    for &size in sizes {
        let x = a.malloc(size, 0).unwrap();
        a.free(x);
    }
}

pub(super) fn kinds(events: &[SegmentEvent]) -> Vec<(SegmentEventKind, u64)> {
    events.iter().map(|e| (e.kind, e.size)).collect()
}

use SegmentEventKind::{SegmentAlloc, SegmentFree};

#[test]
fn small_pool_packs_requests_into_2_mib_segments() {
    let mut a = default_allocator(u64::MAX);
    // 1000 B → round_size 1024 (multiple of 512) → small pool; nothing cached → a 2 MiB
    // segment (get_allocation_size), split since 2 MiB − 1024 ≥ 512 remains.
    let x = a.malloc(1000, 0).unwrap();
    // 3000 B → 3072, cut from the 2 MiB − 1024 remainder.
    let y = a.malloc(3000, 0).unwrap();
    // 1 MiB is still small (≤ kSmallSize) and fits the 2 MiB − 4096 remainder.
    let z = a.malloc(MIB, 0).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 2 * MIB);
    assert_eq!(s.segments.current, 1);
    assert_eq!(s.allocated_bytes.current, 1024 + 3072 + MIB);
    assert_eq!(s.requested_bytes.current, 1000 + 3000 + MIB);
    // Blocks laid out from the segment's start.
    let base = a.block(x).unwrap().0;
    assert_eq!(a.block(y).unwrap(), (base + 1024, 3072));
    assert_eq!(a.block(z).unwrap(), (base + 4096, MIB));
    // Another 1 MiB no longer fits the 1 MiB − 4096 left: a second 2 MiB segment.
    a.malloc(MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 4 * MIB);
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentAlloc, 2 * MIB), (SegmentAlloc, 2 * MIB)]
    );
    a.check_invariants().unwrap();
}

#[test]
fn large_block_split_only_when_more_than_1_mib_remains() {
    let mut a = default_allocator(u64::MAX);
    // 11 MiB ≥ kMinLargeAlloc → a segment of its size rounded to 2 MiB: 12 MiB. 1 MiB would
    // remain, not > kSmallSize: not split, the block is the whole 12 MiB.
    let x = a.malloc(11 * MIB, 0).unwrap();
    assert_eq!(a.block(x).unwrap().1, 12 * MIB);
    // 10.5 MiB → also a 12 MiB segment; 1.5 MiB remains > 1 MiB: split.
    let y = a.malloc(10 * MIB + MIB / 2, 0).unwrap();
    assert_eq!(a.block(y).unwrap().1, 10 * MIB + MIB / 2);
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 24 * MIB);
    assert_eq!(s.allocated_bytes.current, 12 * MIB + 10 * MIB + MIB / 2);
    assert_eq!(s.largest_free_block, MIB + MIB / 2);
    a.check_invariants().unwrap();
}

#[test]
fn requests_from_10_mib_get_their_own_segment_rounded_to_2_mib() {
    let mut a = default_allocator(u64::MAX);
    // 25 MiB + 1 B → round_size 25 MiB + 512 → segment 26 MiB; 1 MiB − 512 remains: unsplit.
    a.malloc(25 * MIB + 1, 0).unwrap();
    // 5 MiB (1–10 MiB) → a 20 MiB segment (kLargeBuffer), split.
    a.malloc(5 * MIB, 0).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 46 * MIB);
    assert_eq!(s.allocated_bytes.current, 26 * MIB + 5 * MIB);
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentAlloc, 26 * MIB), (SegmentAlloc, 20 * MIB)]
    );
}

#[test]
fn freed_neighbours_merge_and_a_whole_segment_is_released_by_empty_cache() {
    let mut a = default_allocator(u64::MAX);
    // Three 4 MiB blocks cut from one 20 MiB segment: 4 | 4 | 4 | 8 free.
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(4 * MIB, 0).unwrap();
    let z = a.malloc(4 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
    // Freeing x and z: z merges with the 8 MiB after it (12 MiB free); x alone (4 MiB).
    a.free(x);
    a.free(z);
    assert_eq!(a.stats().largest_free_block, 12 * MIB);
    // The segment is still split (y allocated): empty_cache frees nothing.
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
    // Freeing y merges 4 + 4 + 12 into one 20 MiB block, the whole segment.
    a.free(y);
    assert_eq!(a.stats().largest_free_block, 20 * MIB);
    a.check_invariants().unwrap();
    a.empty_cache();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 0);
    assert_eq!(s.reserved_bytes.peak, 20 * MIB);
    assert_eq!(s.num_device_free, 1);
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentAlloc, 20 * MIB), (SegmentFree, 20 * MIB)]
    );
    // Freeing again is ignored.
    a.free(y);
    a.check_invariants().unwrap();
}

#[test]
fn best_fit_takes_the_smallest_block_then_the_lowest_address() {
    let mut a = default_allocator(u64::MAX);
    // Own segments (≥ 10 MiB, unsplit): 12, 14, 12 MiB.
    let p = a.malloc(12 * MIB, 0).unwrap();
    let q = a.malloc(14 * MIB, 0).unwrap();
    let r = a.malloc(12 * MIB, 0).unwrap();
    let (p_addr, r_addr) = (a.block(p).unwrap().0, a.block(r).unwrap().0);
    assert!(p_addr < r_addr);
    a.free(r);
    a.free(q);
    a.free(p);
    // 11.5 MiB: the smallest free block ≥ it is 12 MiB (two of them); the lower address wins,
    // whatever the order they were freed in. 0.5 MiB would remain: not split.
    let s = a.malloc(11 * MIB + MIB / 2, 0).unwrap();
    assert_eq!(a.block(s).unwrap(), (p_addr, 12 * MIB));
    // 13 MiB: only the 14 MiB block fits.
    let t = a.malloc(13 * MIB, 0).unwrap();
    assert_eq!(a.block(t).unwrap().1, 14 * MIB);
    assert_eq!(a.stats().reserved_bytes.current, 38 * MIB);
    assert_eq!(a.stats().num_device_alloc, 3);
}

#[test]
fn oversize_blocks_under_max_split_size() {
    let mut a = configured("max_split_size_mb:40", u64::MAX);
    // 50 MiB ≥ max_split_size: its own 50 MiB segment, never split (should_split).
    let x = a.malloc(50 * MIB, 0).unwrap();
    a.free(x);
    // 30 MiB < max_split_size may not take the oversize 50 MiB block: a new 30 MiB segment.
    let y = a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 80 * MIB);
    a.free(y);
    // 45 MiB ≥ max_split_size takes the 50 MiB block (50 < 45 + 20), whole (no split).
    let z = a.malloc(45 * MIB, 0).unwrap();
    assert_eq!(a.block(z).unwrap().1, 50 * MIB);
    assert_eq!(a.stats().reserved_bytes.current, 80 * MIB);
    a.free(z);
    // 29 MiB < 40: the 30 MiB block (not oversize) serves it; 1 MiB would remain, not
    // > 1 MiB: the whole block.
    let w = a.malloc(29 * MIB, 0).unwrap();
    assert_eq!(a.block(w).unwrap().1, 30 * MIB);
    // 25 MiB < 40, and the only free block (50 MiB) is oversize: a new 26 MiB segment.
    a.malloc(25 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 106 * MIB);
    // The cached 50 MiB block taken again by 45 MiB; then a 70 MiB oversize block cached does
    // not serve another 45 MiB (70 ≥ 45 + 20): a new 46 MiB segment.
    let again = a.malloc(45 * MIB, 0).unwrap();
    assert_eq!(a.block(again).unwrap().1, 50 * MIB);
    let big = a.malloc(70 * MIB, 0).unwrap();
    a.free(big);
    let before = a.stats().reserved_bytes.current;
    a.malloc(45 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, before + 46 * MIB);
    a.check_invariants().unwrap();
}

#[test]
fn two_streams_do_not_share_cached_blocks() {
    let mut a = default_allocator(u64::MAX);
    let x = a.malloc(4 * MIB, 1).unwrap();
    a.free(x);
    // The 20 MiB segment cached on stream 1 cannot serve stream 2: a second segment.
    a.malloc(4 * MIB, 2).unwrap();
    // Stream 1 reuses its own.
    a.malloc(4 * MIB, 1).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.segments.current, 2);
    let streams: Vec<u64> = a.take_events().iter().map(|e| e.stream).collect();
    assert_eq!(streams, [1, 2]);
}

#[test]
fn empty_cache_frees_large_then_small_unsplit_segments() {
    let mut a = default_allocator(u64::MAX);
    let x = a.malloc(512, 0).unwrap(); // small pool: 2 MiB segment
    let z = a.malloc(12 * MIB, 0).unwrap(); // own 12 MiB segment
                                            // 20 MiB segment, stays split (y live); asked after z, else z would be cut from its
                                            // 16 MiB remainder (best fit).
    let _y = a.malloc(4 * MIB, 0).unwrap();
    a.take_events();
    a.free(x);
    a.free(z);
    a.empty_cache();
    // release_blocks(large) then release_blocks(small): 12 MiB, then 2 MiB; the split 20 MiB
    // segment stays.
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentFree, 12 * MIB), (SegmentFree, 2 * MIB)]
    );
    assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
    a.check_invariants().unwrap();
}

#[test]
fn reset_peak_and_zero_sized_requests() {
    let mut a = default_allocator(u64::MAX);
    let x = a.malloc(12 * MIB, 0).unwrap();
    a.free(x);
    a.empty_cache();
    a.reset_peak();
    let s = a.stats();
    assert_eq!((s.reserved_bytes.peak, s.allocated_bytes.peak), (0, 0));
    // allocate(0) never reaches the allocator.
    let e = a.malloc(0, 0).unwrap();
    assert_eq!(e, super::BlockId::EMPTY);
    a.free(e);
    assert_eq!(a.stats().num_device_alloc, 1);
}

#[test]
fn seeded_segments_and_blocks_continue_a_record() {
    let mut a = default_allocator(u64::MAX);
    // A 20 MiB segment at 0x1000_0000 with a 4 MiB block live at +8 MiB: free 0..8 and 12..20.
    a.seed_segment(0x1000_0000, 20 * MIB, 0, false).unwrap();
    let x = a
        .seed_allocation(0x1000_0000 + 8 * MIB, 4 * MIB, 4 * MIB, 0)
        .unwrap();
    assert!(a.seed_segment(0x1000_0000 + MIB, MIB, 0, false).is_err());
    assert_eq!(a.stats().largest_free_block, 8 * MIB);
    // 6 MiB: best fit among the two 8 MiB blocks → the lower one, at the segment's start.
    let y = a.malloc(6 * MIB, 0).unwrap();
    assert_eq!(a.block(y).unwrap().0, 0x1000_0000);
    a.check_invariants().unwrap();
    // Freeing both leaves one whole free segment, which empty_cache releases.
    a.free(x);
    a.free(y);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.current, 0);
    assert_eq!(kinds(&a.take_events()), [(SegmentFree, 20 * MIB)]);
}
