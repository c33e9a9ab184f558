//! How fast the caching-allocator model runs: 10,000 mixed operations (mallocs of small, mid and
//! large sizes on one stream, frees in a shuffled order, an `empty_cache` now and then), as an
//! estimate drives it, under the default settings and under expandable segments.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use vramscope_core::allocator::{Allocator, AllocatorConfig, BlockId};

/// A fixed pseudo-random sequence: (true, size) mallocs and (false, k) frees of the k-th live
/// block, 10,000 in all.
fn ops() -> Vec<(u8, u64)> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut live = 0u64;
    let mut out = Vec::with_capacity(10_000);
    while out.len() < 10_000 {
        let r = next();
        if r % 500 == 0 {
            out.push((2, 0));
        } else if live > 0 && (r % 100 < 48 || live > 400) {
            out.push((1, next() % live));
            live -= 1;
        } else {
            let size = match r % 10 {
                0..=5 => 1 + next() % (1 << 20),
                6..=8 => (1 << 20) + next() % (9 << 20),
                _ => (10 << 20) + next() % (200 << 20),
            };
            out.push((0, size));
            live += 1;
        }
    }
    out
}

fn run(config: &AllocatorConfig, ops: &[(u8, u64)]) -> u64 {
    let mut a = Allocator::new(config, u64::MAX);
    let mut live: Vec<BlockId> = Vec::with_capacity(512);
    for &(kind, v) in ops {
        match kind {
            0 => live.push(a.malloc(v, 0).expect("unlimited")),
            1 => {
                let id = live.swap_remove(v as usize);
                a.free(id);
            }
            _ => a.empty_cache(),
        }
    }
    a.stats().reserved_bytes.peak
}

fn benches(c: &mut Criterion) {
    let ops = ops();
    let mut g = c.benchmark_group("allocator");
    for (name, conf) in [
        ("10k ops default", ""),
        ("10k ops expandable_segments", "expandable_segments:True"),
    ] {
        let config = AllocatorConfig::parse(conf).unwrap();
        g.bench_function(name, |b| b.iter(|| black_box(run(&config, &ops))));
    }
    g.finish();
}

criterion_group!(allocator, benches);
criterion_main!(allocator);
