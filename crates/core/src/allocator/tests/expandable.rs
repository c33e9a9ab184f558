//! `expandable_segments:True`: one segment per (stream, pool), grown by 20 MiB (large) or
//! 2 MiB (small) pages, pages unmapped when the cache is released.

use super::{configured, kinds, MIB};
use crate::allocator::{Allocator, SegmentEventKind::*};

fn expandable(capacity: u64) -> Allocator {
    configured("expandable_segments:True", capacity)
}

#[test]
fn the_segment_grows_by_pages_and_blocks_tile_it() {
    let mut a = expandable(u64::MAX);
    // 16 MiB: nothing cached; a new segment; the 16 MiB rounded up to one 20 MiB page mapped at
    // its base; split (expandable: ≥ 512 B remains): 16 allocated, 4 free.
    let x = a.malloc(16 * MIB, 0).unwrap();
    let base = a.block(x).unwrap().0;
    // 16 MiB again: the 4 MiB free block has unmapped space after it; the run starts at the
    // free block (base + 16) and 12 MiB more are mapped: one page at base + 20 MiB. The block
    // is base + 16 .. + 40, 16 taken, 8 left.
    let y = a.malloc(16 * MIB, 0).unwrap();
    assert_eq!(a.block(y).unwrap(), (base + 16 * MIB, 16 * MIB));
    let events = a.take_events();
    assert_eq!(
        kinds(&events),
        [(SegmentMap, 20 * MIB), (SegmentMap, 20 * MIB)]
    );
    assert_eq!(events[0].addr, base);
    assert_eq!(events[1].addr, base + 20 * MIB);
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.segments.current, 0);
    assert_eq!(s.expandable_segments, 1);
    a.check_invariants().unwrap();
    // Freeing x: free 0..16 has no whole page inside it; the 8 MiB at 32..40 neither (page 2
    // starts at 40): empty_cache unmaps nothing.
    a.free(x);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.current, 40 * MIB);
    assert!(a.take_events().is_empty());
    // Freeing y merges 0..40 into one free block: both pages unmapped, the segment, wholly
    // unmapped, released.
    a.free(y);
    a.empty_cache();
    let events = a.take_events();
    assert_eq!(kinds(&events), [(SegmentUnmap, 40 * MIB)]);
    assert_eq!(events[0].addr, base);
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 0);
    assert_eq!(s.expandable_segments, 0);
    assert_eq!((s.num_device_alloc, s.num_device_free), (2, 1));
    a.check_invariants().unwrap();
}

#[test]
fn a_partly_free_segment_unmaps_only_whole_free_pages() {
    let mut a = expandable(u64::MAX);
    // 30 MiB → pages 0 and 1 (40 MiB) mapped; 30 taken, 10 free (30..40).
    let x = a.malloc(30 * MIB, 0).unwrap();
    // 25 MiB → the free 10 + 15 more: page 2 (40..60); block 30..55, 5 free at 55..60.
    let y = a.malloc(25 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 60 * MIB);
    // Free x: 0..30 free, the whole page 0 (0..20) inside it is unmapped, 20..30 stays mapped.
    a.take_events();
    a.free(x);
    a.empty_cache();
    let base = a.block(y).unwrap().0 - 30 * MIB;
    let events = a.take_events();
    assert_eq!(kinds(&events), [(SegmentUnmap, 20 * MIB)]);
    assert_eq!(events[0].addr, base);
    assert_eq!(a.stats().reserved_bytes.current, 40 * MIB);
    a.check_invariants().unwrap();
    // 18 MiB: the free 10 MiB (20..30) is too small and the lowest unmapped range is 0..20
    // (page 0), with no free block before it; 18 fits in it: page 0 mapped again, 2 MiB free.
    let z = a.malloc(18 * MIB, 0).unwrap();
    assert_eq!(a.block(z).unwrap(), (base, 18 * MIB));
    assert_eq!(a.stats().reserved_bytes.current, 60 * MIB);
    a.check_invariants().unwrap();
}

#[test]
fn small_requests_map_2_mib_pages() {
    let mut a = expandable(u64::MAX);
    a.malloc(1000, 0).unwrap();
    a.malloc(3 * MIB / 2, 0).unwrap();
    // 1024 B → small pool: one 2 MiB page of the small segment. 1.5 MiB → large pool: one
    // 20 MiB page of the large segment.
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentMap, 2 * MIB), (SegmentMap, 20 * MIB)]
    );
    assert_eq!(a.stats().expandable_segments, 2);
}

#[test]
fn a_map_past_the_capacity_fails_and_the_cache_is_released_first() {
    // Capacity 50 MiB. 30 MiB → 40 MiB mapped, freed. 45 MiB: the free 40 MiB block runs into
    // unmapped space: mapping page 2 would make 60 > 50 → fails; no max_split_size; the cache
    // is released (both pages unmapped, the segment released) and the retry maps 45 → 60 MiB
    // in a new segment: still past 50 → OOM.
    let mut a = expandable(50 * MIB);
    let x = a.malloc(30 * MIB, 0).unwrap();
    a.free(x);
    let oom = a.malloc(45 * MIB, 0).unwrap_err();
    assert_eq!(oom.reserved, 0);
    let s = a.stats();
    assert_eq!((s.num_alloc_retries, s.num_ooms), (1, 1));
    // 35 MiB after that: two pages (40 MiB) ≤ 50.
    a.malloc(35 * MIB, 0).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 40 * MIB);
    a.check_invariants().unwrap();
}
