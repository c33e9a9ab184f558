//! The estimator's allocator event stream against the event history PyTorch recorded on the
//! H200 (`../shared/fixtures/gpu-h200/snapshot-*.pickle`, read by `scripts/snapshot_phases.py`).

mod measured;

use serde_json::Value;
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};
use vramscope_core::job::Job;

const MIB: u64 = 1 << 20;

fn results_job(id: &str) -> Value {
    let path = format!(
        "{}/../../../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["id"] == id && v["type"] == "result" {
            return v["job"].clone();
        }
    }
    panic!("no result {id}");
}

fn stream(id: &str) -> Stream {
    let job: Job = serde_json::from_value(results_job(id)).unwrap();
    let model = vramscope_formats::model_source::load_job_model(job.model.as_ref().unwrap()).unwrap();
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved = job.resolve(max).unwrap();
    step_stream(&model.into_input(), &resolved).unwrap().unwrap()
}

/// Per phase: allocations of at least 1 MiB in order (MiB, 2 decimals) and the count of
/// smaller ones.
fn phases(s: &Stream) -> Vec<(Phase, Vec<f64>, usize)> {
    let mut out: Vec<(Phase, Vec<f64>, usize)> = Vec::new();
    for e in &s.events {
        match *e {
            Event::Phase(p) => out.push((p, Vec::new(), 0)),
            Event::Alloc { bytes, .. } => {
                if let Some(last) = out.last_mut() {
                    if bytes >= MIB {
                        last.1.push((bytes as f64 / MIB as f64 * 100.0).round() / 100.0);
                    } else {
                        last.2 += 1;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
#[ignore]
fn dump() {
    let id = std::env::var("STREAM_ID").unwrap_or("gpt2-snap-fp32-adamw-eager-b4s512".into());
    for (p, big, small) in phases(&stream(&id)) {
        println!("{p:?}: {} big, {small} small", big.len());
        println!("  {big:?}");
    }
}

#[test]
#[ignore]
fn dump_phases() {
    use vramscope_core::allocator::{Allocator, AllocatorConfig};
    use vramscope_core::estimate::alloc_events::replay::replay_by_phase;
    let id = std::env::var("STREAM_ID").unwrap_or("gpt2-snap-fp32-adamw-eager-b4s512".into());
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    for f in replay_by_phase(&mut a, &stream(&id)) {
        println!(
            "{:?}: peak allocated {:.2} GiB, peak reserved {:.2} GiB",
            f.phase,
            f.peak_allocated as f64 / (1u64 << 30) as f64,
            f.peak_reserved as f64 / (1u64 << 30) as f64
        );
    }
}
