//! `plan` ranks what fits by the step-time model (issue 23): tokens/s per GPU, fastest first,
//! ties to headroom; each row carries its modelled step; the planner's closed-form layout
//! and the full estimate of the same layout give the same step time; a GPU without speeds in
//! the catalog falls back to the memory-only tie-breakers.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::job::ResolvedJob;
use vramscope_core::plan::{job_of, plan};
use vramscope_core::throughput::Throughput;

fn load(job: Value) -> (ModelInput, ResolvedJob) {
    common::prepared_json(&job)
}

/// The issue's example: `plan llama-3.1-70b --gpu h100-80gb --gpus 16 --seq 4096`.
#[test]
fn the_issue_example_ranks_by_modelled_tokens_per_second() {
    let (model, base) = load(json!({"model": "llama-3.1-70b", "gpu": "h100-80gb", "seq": 4096}));
    let gpu = vramscope_core::gpu::find("h100-80gb").unwrap();
    let r = plan(&model, &base, 16, gpu, 8, 10).unwrap();
    assert!(r.best.len() >= 2, "{} fit", r.fitting);
    let rates: Vec<f64> = r
        .best
        .iter()
        .map(|c| c.scored.time.unwrap().tokens_per_s_per_gpu)
        .collect();
    assert!(rates.windows(2).all(|w| w[0] >= w[1]), "{rates:?}");
    let why = r.why.as_deref().unwrap();
    assert!(
        why.contains("tokens/s per GPU") && why.contains("per step"),
        "{why}"
    );
    // The estimate of the winner's own job models the same step as the screen did.
    let first = &r.best[0].scored;
    let report = estimate(&model, &job_of(&base, &first.layout, gpu).unwrap()).unwrap();
    let Some(Throughput::Train(t)) = report.throughput else {
        panic!("no throughput")
    };
    let screened = first.time.unwrap();
    assert!((t.step_time_s / screened.step_time_s - 1.0).abs() < 1e-9);
    assert!((t.tokens_per_s_per_gpu / screened.tokens_per_s_per_gpu - 1.0).abs() < 1e-9);
}

/// The RTX 4080 has no speeds in the catalog: no times, no explanation, the old order.
#[test]
fn a_gpu_without_speeds_ranks_by_the_memory_tie_breakers() {
    let (model, base) = load(json!({"model": "llama-3.2-1b", "gpu": "rtx4080-16gb", "seq": 1024}));
    let gpu = vramscope_core::gpu::find("rtx4080-16gb").unwrap();
    let r = plan(&model, &base, 2, gpu, 4, 10).unwrap();
    assert!(!r.best.is_empty());
    assert!(r.best.iter().all(|c| c.scored.time.is_none()));
    assert!(r.why.is_none());
    let report = estimate(&model, &base).unwrap();
    assert!(report.throughput.is_none());
    common::assert_warns(&report.warnings, "throughput is null");
}
