//! The failed-cudaMalloc path: garbage collection, releasing oversize blocks, releasing the
//! whole cache and retrying, the OOM.

use super::{cache_each, configured, default_allocator, kinds, MIB};
use crate::allocator::SegmentEventKind::*;

#[test]
fn failed_cudamalloc_releases_the_cache_and_retries() {
    // Capacity 50 MiB. A 30 MiB segment cached, then 40 MiB asked: no cached block fits;
    // cudaMalloc(40) fails (30 + 40 > 50); no max_split_size, so no oversize release;
    // release_cached_blocks frees the 30 MiB segment; the retry (num_alloc_retries = 1)
    // succeeds.
    let mut a = default_allocator(50 * MIB);
    let x = a.malloc(30 * MIB, 0).unwrap();
    a.free(x);
    a.malloc(40 * MIB, 0).unwrap();
    let s = a.stats();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(
        kinds(&a.take_events()),
        [
            (SegmentAlloc, 30 * MIB),
            (SegmentFree, 30 * MIB),
            (SegmentAlloc, 40 * MIB)
        ]
    );
    a.check_invariants().unwrap();
}

#[test]
fn out_of_memory_is_an_error_with_the_figures() {
    // Capacity 50 MiB, 30 MiB held: 30 more cannot be had even after releasing the (empty)
    // cache; the last attempt counts as a retry.
    let mut a = default_allocator(50 * MIB);
    a.malloc(30 * MIB, 0).unwrap();
    let oom = a.malloc(30 * MIB, 0).unwrap_err();
    assert_eq!(oom.requested, 30 * MIB);
    assert_eq!(oom.alloc_size, 30 * MIB);
    assert_eq!((oom.allocated, oom.reserved), (30 * MIB, 30 * MIB));
    let s = a.stats();
    assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 1));
    assert!(!oom.to_string().contains('\n'));
    assert_eq!(kinds(&a.take_events()).last().unwrap().0, Oom);
}

#[test]
fn oversize_cached_blocks_are_released_before_the_whole_cache() {
    // max_split_size 40 MiB, capacity 100 MiB. 50 and 46 MiB (45 rounded) oversize segments
    // cached: 96 MiB. 30 MiB (< 40) may use neither; cudaMalloc(30) fails (126 > 100);
    // release_available_cached_blocks frees the smallest block ≥ max(30, 40): the 46 MiB one;
    // cudaMalloc(30) then fits (80). No retry counted; the 50 MiB block stays.
    let mut a = configured("max_split_size_mb:40", 100 * MIB);
    let x = a.malloc(50 * MIB, 0).unwrap();
    let y = a.malloc(45 * MIB, 0).unwrap();
    a.free(x);
    a.free(y);
    a.take_events();
    a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentFree, 46 * MIB), (SegmentAlloc, 30 * MIB)]
    );
    let s = a.stats();
    assert_eq!(s.num_alloc_retries, 0);
    assert_eq!(s.reserved_bytes.current, 80 * MIB);
    // 60 MiB now: no block ≥ 60 cached; cudaMalloc(60) fails (140 > 100); no single block
    // ≥ 60, so oversize blocks from the largest down: 50 MiB freed, 50 < 60 and nothing
    // oversize is left → false; release_cached_blocks (nothing unsplit free is left but the 30
    // MiB block is allocated) and the retry: 30 + 60 ≤ 100.
    a.malloc(60 * MIB, 0).unwrap();
    assert_eq!(
        kinds(&a.take_events()),
        [(SegmentFree, 50 * MIB), (SegmentAlloc, 60 * MIB)]
    );
    assert_eq!(a.stats().num_alloc_retries, 1);
    a.check_invariants().unwrap();
}

#[test]
fn garbage_collection_frees_old_cached_segments_past_the_threshold() {
    // threshold 0.5 × capacity 100 MiB = 50 MiB. Large-pool get_free_block calls are counted:
    // #1 malloc(24) → 24 MiB segment; free → cached at count 1.
    // #2 malloc(30) → none fits; reserved 24 ≤ 50: no GC; 30 MiB segment (54 reserved);
    //    free → cached at count 2.
    // #3 malloc(40) → none fits; 54 > 50: reclaim 4. Ages: 24 MiB: 3 − 1 = 2, 30 MiB: 1;
    //    average 1.5 → only the 24 MiB block (age 2) is freed; 24 ≥ 4 stops the loop.
    //    cudaMalloc(40): 30 + 40 = 70.
    let mut a = configured("garbage_collection_threshold:0.5", 100 * MIB);
    cache_each(&mut a, &[24 * MIB, 30 * MIB]);
    a.malloc(40 * MIB, 0).unwrap();
    assert_eq!(
        kinds(&a.take_events()),
        [
            (SegmentAlloc, 24 * MIB),
            (SegmentAlloc, 30 * MIB),
            (SegmentFree, 24 * MIB),
            (SegmentAlloc, 40 * MIB)
        ]
    );
    assert_eq!(a.stats().reserved_bytes.current, 70 * MIB);
    // Without the threshold both stay cached: 94 MiB.
    let mut b = default_allocator(100 * MIB);
    cache_each(&mut b, &[24 * MIB, 30 * MIB]);
    b.malloc(40 * MIB, 0).unwrap();
    assert_eq!(b.stats().reserved_bytes.current, 94 * MIB);
}
