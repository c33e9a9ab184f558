//! Looks inside the estimator's allocator event stream for one H200 run (a diagnostic, not a
//! test: it prints, it asserts nothing). `crates/core/tests/alloc_stream.rs` holds the checks;
//! this is what to run when one of them moves.
//!
//! usage: cargo run -p vramscope-formats --example alloc_stream_dump -- WHAT [SPEC_ID] [FLOOR_MIB]
//!   WHAT = phases    allocations of at least FLOOR_MIB (default 1) per phase, in order
//!        | replay    peak allocated / reserved per phase through the allocator model
//!        | segments  every segment event after the load, with the request that made it
//!        | outcome   the estimate's figures, the stream's distinct sizes ≥ 16 MiB, stats per phase
//!        | events    every allocation and free of at least FLOOR_MIB after the load, in order, with
//!                    the tensor's id and the bytes allocated after it
//! SPEC_ID is a result id of `../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl`
//! (default the GPT-2 snapshot run).

#[path = "../../core/tests/common/replay_each.rs"]
mod replay_each;

use replay_each::replay_each;
use serde_json::Value;
use vramscope_core::allocator::{Allocator, AllocatorConfig};
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::job::{Job, ResolvedJob};

const MIB: u64 = 1 << 20;

/// The run's job as run (a static-cache generate gets `engine.cache`, as the cases file has it).
fn results_job(id: &str) -> Value {
    let path = format!(
        "{}/../../../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        if v["id"] == id && v["type"] == "result" {
            let mut job = v["job"].clone();
            if v["spec"]["cache"] == "static" {
                job["engine"] = serde_json::json!({"cache": "static"});
            }
            return job;
        }
    }
    panic!("no result {id} in {path}");
}

fn load(id: &str) -> (ModelInput, ResolvedJob) {
    let job: Job = serde_json::from_value(results_job(id)).expect("a job");
    let model = vramscope_formats::model_source::load_job_model(job.model.as_ref().unwrap())
        .expect("the model");
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    (model.into_input(), job.resolve(max).expect("a valid job"))
}

fn stream(model: &ModelInput, job: &ResolvedJob) -> Stream {
    step_stream(model, job)
        .expect("a stream")
        .expect("a job the stream covers")
}

fn phases(s: &Stream, floor: u64) {
    let mut cur: Option<(Phase, Vec<f64>, usize)> = None;
    let flush = |c: &Option<(Phase, Vec<f64>, usize)>| {
        if let Some((p, big, small)) = c {
            println!("{p:?}: {} big, {small} small\n  {big:?}", big.len());
        }
    };
    for e in &s.events {
        match *e {
            Event::Phase(p) => {
                flush(&cur);
                cur = Some((p, Vec::new(), 0));
            }
            Event::Alloc { bytes, .. } => {
                if let Some((_, big, small)) = cur.as_mut() {
                    if bytes >= floor {
                        big.push((bytes as f64 / MIB as f64 * 100.0).round() / 100.0);
                    } else {
                        *small += 1;
                    }
                }
            }
            _ => {}
        }
    }
    flush(&cur);
}

/// Runs the stream through a fresh allocator, calling `on` after each event with the phase.
fn drive(s: &Stream, a: &mut Allocator, mut on: impl FnMut(&mut Allocator, Phase, &Event)) {
    let mut phase = Phase::Context;
    replay_each(a, s, |a, e| {
        if let Event::Phase(p) = e {
            phase = p;
        }
        on(a, phase, &e);
    });
}

fn segments(s: &Stream) {
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    a.set_event_log(true);
    drive(s, &mut a, |a, phase, e| {
        let events = a.take_events();
        let Event::Alloc { id, bytes } = *e else {
            return;
        };
        if matches!(phase, Phase::Context | Phase::Load) {
            return;
        }
        for ev in events {
            println!(
                "{phase:?}: {:?} {:.2} MiB for a {:.2} MiB request (id {id})",
                ev.kind,
                ev.size as f64 / MIB as f64,
                bytes as f64 / MIB as f64
            );
        }
    });
}

fn events(s: &Stream, floor: u64) {
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    let mut sizes = vec![0u64; s.ids()];
    drive(s, &mut a, |a, phase, e| {
        if matches!(phase, Phase::Context | Phase::Load) {
            return;
        }
        let (what, id, bytes) = match *e {
            Event::Alloc { id, bytes } => {
                sizes[id as usize] = bytes;
                ("alloc", id, bytes)
            }
            Event::Free { id } => ("free", id, sizes[id as usize]),
            _ => return,
        };
        if bytes >= floor {
            let st = a.stats();
            println!(
                "{phase:?} {what} #{id} {:.2} MiB: allocated {} reserved {}",
                bytes as f64 / MIB as f64,
                st.allocated_bytes.current,
                st.reserved_bytes.current
            );
        }
    });
}

fn outcome(model: &ModelInput, job: &ResolvedJob, s: &Stream) {
    let r = estimate(model, job).expect("an estimate");
    println!(
        "allocated {:?} reserved {:?} allocator {:?}",
        r.per_gpu.peaks.peak_allocated, r.per_gpu.peaks.peak_reserved, r.per_gpu.allocator
    );
    let mut sizes: Vec<u64> = s
        .events
        .iter()
        .filter_map(|e| match *e {
            Event::Alloc { bytes, .. } if bytes >= 16 * MIB => Some(bytes / MIB),
            _ => None,
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    println!("sizes (MiB): {sizes:?}");
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    drive(s, &mut a, |a, phase, e| {
        if matches!(e, Event::Phase(_)) {
            println!("{phase:?}: {:?}", a.stats());
        }
    });
    println!("end: {:?}", a.stats());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("phases", String::as_str);
    let id = args
        .get(1)
        .map_or("gpt2-snap-fp32-adamw-eager-b4s512", String::as_str);
    let floor: u64 = args.get(2).map_or(1, |v| v.parse().expect("FLOOR_MIB"));
    let (model, job) = load(id);
    let s = stream(&model, &job);
    match what {
        "phases" => phases(&s, floor * MIB),
        "replay" => {
            let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
            let by_phase =
                vramscope_core::estimate::alloc_events::replay::replay_by_phase(&mut a, &s);
            for f in by_phase {
                println!(
                    "{:?}: peak allocated {:.2} GiB, peak reserved {:.2} GiB",
                    f.phase,
                    f.peak_allocated as f64 / (1u64 << 30) as f64,
                    f.peak_reserved as f64 / (1u64 << 30) as f64
                );
            }
        }
        "segments" => segments(&s),
        "outcome" => outcome(&model, &job, &s),
        "events" => events(&s, floor * MIB),
        other => {
            eprintln!(
                "alloc_stream_dump: WHAT is phases, replay, segments, outcome or events (got {other})"
            );
            std::process::exit(2);
        }
    }
}
