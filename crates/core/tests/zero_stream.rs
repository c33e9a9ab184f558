//! One rank of DeepSpeed ZeRO-1/2 through the allocator stream (`alloc_events/zero.rs`).

mod common;

use serde_json::{json, Value};

/// Llama-3.1-8B, bf16-mixed AdamW, b1 × 4096 on eight H100s, ZeRO `stage`.
fn llama8b(stage: u64) -> Value {
    json!({
        "model": "llama-3.1-8b", "framework": "deepspeed", "precision": "bf16-mixed",
        "optimizer": "adamw", "batch": 1, "seq": 4096, "gpu": "h100",
        "parallel": {"gpus": 8, "dp": 8, "zero": stage}
    })
}

#[test]
fn debug_print() {
    for z in [1, 2] {
        let (stream, walk) = common::stream_steps::stream_and_walk(&llama8b(z));
        eprintln!("z{z} stream {stream} walk {walk} {:+.4} %", (stream as f64 / walk as f64 - 1.0) * 100.0);
        let r = common::run_job(llama8b(z));
        for p in &r.timeline { eprintln!("  {} {} {}", p.phase, p.label, p.allocated); }
    }
}
