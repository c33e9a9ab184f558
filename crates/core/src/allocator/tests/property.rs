//! Random malloc/free/empty_cache sequences under every kind of setting keep the model sound:
//! reserved ≥ allocated, reserved = the segments and mapped pages, blocks tile their segments,
//! free neighbours merged, peaks ≥ current values, nothing panics
//! (`Allocator::check_invariants`).

use super::MIB;
use crate::allocator::{Allocator, AllocatorConfig, BlockId};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Malloc(u64, u64),
    Free(usize),
    EmptyCache,
    ResetPeak,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1u64..=MIB,         // small pool
        MIB + 1..10 * MIB,  // 20 MiB segments
        10 * MIB..80 * MIB, // own segments
        Just(0u64),         // never reaches the allocator
    ];
    prop_oneof![
        6 => (size, 0u64..3).prop_map(|(s, st)| Op::Malloc(s, st)),
        5 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::ResetPeak),
    ]
}

fn config() -> impl Strategy<Value = AllocatorConfig> {
    prop_oneof![
        Just(""),
        Just("expandable_segments:True"),
        Just("max_split_size_mb:40"),
        Just("garbage_collection_threshold:0.5"),
        Just("roundup_power2_divisions:[1:4,64:2,>:1],max_split_size_mb:20"),
        Just("expandable_segments:True,garbage_collection_threshold:0.7"),
    ]
    .prop_map(|c| AllocatorConfig::parse(c).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_sequences_keep_the_invariants(
        config in config(),
        capacity in prop_oneof![Just(u64::MAX), (40u64..400).prop_map(|m| m * MIB)],
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let mut a = Allocator::new(&config, capacity);
        a.set_device_total(capacity.min(1 << 30));
        let mut live: Vec<BlockId> = Vec::new();
        for op in ops {
            match op {
                Op::Malloc(size, stream) => {
                    if let Ok(id) = a.malloc(size, stream) {
                        live.push(id);
                    }
                }
                Op::Free(k) if !live.is_empty() => {
                    let id = live.swap_remove(k % live.len());
                    a.free(id);
                }
                Op::Free(_) => {}
                Op::EmptyCache => a.empty_cache(),
                Op::ResetPeak => a.reset_peak(),
            }
            if let Err(e) = a.check_invariants() {
                prop_assert!(false, "{e} after {op:?}");
            }
            let s = a.stats();
            prop_assert!(s.reserved_bytes.current >= s.allocated_bytes.current);
            prop_assert!(s.reserved_bytes.current <= capacity);
        }
        // Everything freed and the cache emptied: nothing is left reserved.
        for id in live {
            a.free(id);
        }
        a.empty_cache();
        let s = a.stats();
        prop_assert_eq!(s.allocated_bytes.current, 0);
        prop_assert_eq!(s.reserved_bytes.current, 0);
    }
}
