//! Parse + analyze a large synthetic snapshot with real-snapshot sharing, written in the
//! bench's setup by ../shared/fixtures/scripts/make_big_synthetic.py (python3), or by the Rust
//! writer below when python3 is missing. `VRAMSCOPE_BENCH_N` sets the trace length (default
//! 200,000 allocation/free steps ≈ 46 MB; 2,200,000 ≈ 500 MB).

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn big_snapshot() -> PathBuf {
    let n: usize = std::env::var("VRAMSCOPE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let out = std::env::temp_dir().join(format!("vramscope_big_snapshot_{n}.pickle"));
    if out.exists() {
        return out;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/scripts/make_big_synthetic.py");
    let ok = std::process::Command::new("python3")
        .arg(&script)
        .arg(&out)
        .arg(n.to_string())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        std::fs::write(&out, rust_writer(n)).unwrap();
    }
    out
}

/// A protocol-2 pickle of the same shape: 5,000 shared frame dicts, 3,000 stacks of 30,
/// trace entries alloc/free_requested/free_completed.
fn rust_writer(n: usize) -> Vec<u8> {
    fn s(b: &mut Vec<u8>, x: &str) {
        b.push(b'X');
        b.extend_from_slice(&(x.len() as u32).to_le_bytes());
        b.extend_from_slice(x.as_bytes());
    }
    fn int(b: &mut Vec<u8>, v: u64) {
        b.push(0x8a);
        b.push(8);
        b.extend_from_slice(&v.to_le_bytes());
    }
    fn put(b: &mut Vec<u8>, i: u32) {
        b.push(b'r');
        b.extend_from_slice(&i.to_le_bytes());
    }
    fn get(b: &mut Vec<u8>, i: u32) {
        b.push(b'j');
        b.extend_from_slice(&i.to_le_bytes());
    }
    let mut b = vec![0x80, 2, b'}'];
    s(&mut b, "segments");
    b.push(b']');
    s(&mut b, "device_traces");
    b.extend_from_slice(b"](]");
    let mut memo = 0u32;
    let mut frame_ids = Vec::new();
    let mut seed = 1u64;
    let mut rnd = |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    let mut live: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
        let free = !live.is_empty() && rnd(2) == 0;
        let (addr, size, acts): (u64, u64, &[&str]) = if free {
            let (a, sz) = live.swap_remove(rnd(live.len() as u64) as usize);
            (a, sz, &["free_requested", "free_completed"])
        } else {
            let a = 0x7f00_0000_0000 + i as u64 * 4096;
            let sz = [512, 4096, 1 << 20, 8 << 20][rnd(4) as usize];
            live.push((a, sz));
            (a, sz, &["alloc"])
        };
        for act in acts {
            b.push(b'}');
            b.push(b'(');
            s(&mut b, "action");
            s(&mut b, act);
            s(&mut b, "addr");
            int(&mut b, addr);
            s(&mut b, "size");
            int(&mut b, size);
            s(&mut b, "stream");
            b.extend_from_slice(b"K\x00");
            s(&mut b, "time_us");
            int(&mut b, 1_764_403_200_000_000 + i as u64);
            s(&mut b, "frames");
            b.extend_from_slice(b"](");
            for _ in 0..30 {
                let f = rnd(5000) as usize;
                if frame_ids.len() < 5000 {
                    b.push(b'}');
                    b.push(b'(');
                    s(&mut b, "filename");
                    s(
                        &mut b,
                        &format!("/usr/lib/python3/pkg/mod{}.py", frame_ids.len() % 300),
                    );
                    s(&mut b, "line");
                    b.extend_from_slice(b"K\x01");
                    s(&mut b, "name");
                    s(&mut b, &format!("func_{}", frame_ids.len()));
                    b.push(b'u');
                    put(&mut b, memo);
                    frame_ids.push(memo);
                    memo += 1;
                } else {
                    get(&mut b, frame_ids[f]);
                }
            }
            b.extend_from_slice(b"eu");
            b.push(b'a');
        }
    }
    b.extend_from_slice(b"as.");
    b
}

fn bench(c: &mut Criterion) {
    let path = big_snapshot();
    let len = std::fs::metadata(&path).unwrap().len();
    eprintln!("snapshot: {} ({len} bytes)", path.display());
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("parse", |b| {
        b.iter(|| {
            let f = std::fs::File::open(&path).unwrap();
            vramscope_measure::pickle::parse_reader(f, len, Default::default()).unwrap()
        })
    });
    g.bench_function("parse_and_analyze", |b| {
        b.iter(|| vramscope_measure::analyze_file(&path).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
