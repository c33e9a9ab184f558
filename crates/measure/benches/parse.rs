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

/// The bench's random numbers: a linear congruential generator (Knuth's MMIX constants), so
/// the Rust-written file is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % m
    }
}

/// A protocol-2 pickle written opcode by opcode: the few the snapshot needs (CPython's
/// `Lib/pickletools.py` names them).
struct Writer {
    b: Vec<u8>,
    memo: u32,
    /// Memo slots of the frame dicts written so far.
    frame_ids: Vec<u32>,
}

impl Writer {
    /// BINUNICODE.
    fn str(&mut self, x: &str) {
        self.b.push(b'X');
        self.b.extend_from_slice(&(x.len() as u32).to_le_bytes());
        self.b.extend_from_slice(x.as_bytes());
    }

    /// LONG1 of 8 bytes.
    fn int(&mut self, v: u64) {
        self.b.push(0x8a);
        self.b.push(8);
        self.b.extend_from_slice(&v.to_le_bytes());
    }

    /// The `f`-th frame: while fewer than 5,000 exist a new dict, memoized (LONG_BINPUT); then a
    /// memo reference (LONG_BINGET) to frame `f`.
    fn frame(&mut self, f: usize) {
        if self.frame_ids.len() >= 5000 {
            self.b.push(b'j');
            self.b.extend_from_slice(&self.frame_ids[f].to_le_bytes());
            return;
        }
        let k = self.frame_ids.len();
        self.b.extend_from_slice(b"}(");
        self.str("filename");
        self.str(&format!("/usr/lib/python3/pkg/mod{}.py", k % 300));
        self.str("line");
        self.b.extend_from_slice(b"K\x01");
        self.str("name");
        self.str(&format!("func_{k}"));
        self.b.push(b'u');
        self.b.push(b'r');
        self.b.extend_from_slice(&self.memo.to_le_bytes());
        self.frame_ids.push(self.memo);
        self.memo += 1;
    }

    /// One trace entry with a stack of 30 random frames, appended to the open device list.
    fn entry(&mut self, act: &str, addr: u64, size: u64, time_us: u64, rnd: &mut Lcg) {
        self.b.extend_from_slice(b"}(");
        self.str("action");
        self.str(act);
        self.str("addr");
        self.int(addr);
        self.str("size");
        self.int(size);
        self.str("stream");
        self.b.extend_from_slice(b"K\x00");
        self.str("time_us");
        self.int(time_us);
        self.str("frames");
        self.b.extend_from_slice(b"](");
        for _ in 0..30 {
            let f = rnd.below(5000) as usize;
            self.frame(f);
        }
        self.b.extend_from_slice(b"eu");
        self.b.push(b'a');
    }
}

/// A protocol-2 pickle of the same shape: 5,000 shared frame dicts, 3,000 stacks of 30,
/// trace entries alloc/free_requested/free_completed.
fn rust_writer(n: usize) -> Vec<u8> {
    let mut w = Writer {
        b: vec![0x80, 2, b'}'],
        memo: 0,
        frame_ids: Vec::new(),
    };
    w.str("segments");
    w.b.push(b']');
    w.str("device_traces");
    w.b.extend_from_slice(b"](]");
    let mut rnd = Lcg(1);
    let mut live: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
        let free = !live.is_empty() && rnd.below(2) == 0;
        let (addr, size, acts): (u64, u64, &[&str]) = if free {
            let (a, sz) = live.swap_remove(rnd.below(live.len() as u64) as usize);
            (a, sz, &["free_requested", "free_completed"])
        } else {
            let a = 0x7f00_0000_0000 + i as u64 * 4096;
            let sz = [512, 4096, 1 << 20, 8 << 20][rnd.below(4) as usize];
            live.push((a, sz));
            (a, sz, &["alloc"])
        };
        for act in acts {
            w.entry(act, addr, size, 1_764_403_200_000_000 + i as u64, &mut rnd);
        }
    }
    w.b.extend_from_slice(b"as.");
    w.b
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
