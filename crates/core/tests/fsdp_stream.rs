//! One rank of FSDP2 through the allocator stream (`alloc_events/fsdp.rs`).

mod common;

use serde_json::{json, Value};
use vramscope_core::allocator::{Allocator, AllocatorConfig};
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};

fn stream_of(job: &Value) -> Stream {
    let (input, resolved) = common::prepared_json(job);
    step_stream(&input, &resolved)
        .unwrap()
        .expect("the stream covers FSDP")
}

/// The stream's peak allocated (replayed with its streams) and the walk's.
fn stream_and_walk(job: &Value) -> (u64, u64) {
    let s = stream_of(job);
    let (input, resolved) = common::prepared_json(job);
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    let mut peak = 0;
    common::replay_each(&mut a, &s, |a, _| {
        peak = peak.max(a.stats().allocated_bytes.current)
    });
    let report = vramscope_core::estimate::estimate(&input, &resolved).unwrap();
    (peak, report.per_gpu.peaks.peak_allocated.unwrap())
}

fn llama8b() -> Value {
    json!({
        "model": "llama-3.1-8b", "framework": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "batch": 1, "seq": 4096, "gpu": "h100",
        "parallel": {"dp": 8, "zero": 3}
    })
}

#[test]
fn probe() {
    let (s, w) = stream_and_walk(&llama8b());
    eprintln!(
        "stream {s} walk {w} {:+.3} %",
        (s as f64 / w as f64 - 1.0) * 100.0
    );
    let st = stream_of(&llama8b());
    let mut on = 0;
    let mut out = String::new();
    for e in &st.events {
        match *e {
            Event::Phase(p) => out += &format!("{p:?}\n"),
            Event::Stream(x) => on = x,
            Event::Alloc { id, bytes } if bytes >= 1 << 24 => {
                out += &format!("+{id} {bytes} s{on}\n")
            }
            Event::Free { id } => out += &format!("-{id}\n"),
            _ => {}
        }
    }
    std::fs::write("/tmp/fsdp/events.txt", out).unwrap();
    let _ = Phase::Context;
}
