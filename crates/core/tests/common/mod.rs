//! Helpers shared by this crate's integration tests (the same `shared()` as
//! `crates/formats/tests/common`: both crates' tests read ../shared), and the estimate of a job
//! as the CLI computes it.
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

mod replay_each;
mod repo_json;
pub mod stream_steps;
#[allow(unused_imports)] // Only the allocator-stream tests use it.
pub use replay_each::replay_each;
#[allow(unused_imports)] // Not every test binary that includes this module uses them.
pub use repo_json::{repo_json, validation, validation_path};

use serde_json::Value;
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::job::{Job, ResolvedJob};
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

/// The model `job` names, read as the CLI reads it (`load_job_model`), and the job resolved
/// against the model's context length (`Job::resolve`).
pub fn prepared(job: &Job) -> (ModelInput, ResolvedJob) {
    let model = load_job_model(job.model.as_ref().expect("the job names a model")).unwrap();
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved = job.resolve(max).unwrap();
    (model.into_input(), resolved)
}

/// [`prepared`] for a job given as JSON.
pub fn prepared_json(job: &Value) -> (ModelInput, ResolvedJob) {
    prepared(&serde_json::from_value(job.clone()).unwrap())
}

/// The device total the estimate gives `job` at `batch` sequences.
pub fn device_total_at(model: &ModelInput, job: &ResolvedJob, batch: u64) -> u64 {
    let job = ResolvedJob {
        batch,
        ..job.clone()
    };
    let report = estimate(model, &job).unwrap();
    report.per_gpu.peaks.device_total.expect("a device total")
}

/// The estimate of `job` (see [`prepared`]).
pub fn estimate_job(job: &Job) -> Report {
    let (model, resolved) = prepared(job);
    estimate(&model, &resolved).unwrap()
}

/// The estimate of a job given as JSON.
pub fn run_job(job: Value) -> Report {
    estimate_job(&serde_json::from_value(job).unwrap())
}

/// The two cuBLAS workspaces (2 × 8,519,680 B) a CUDA step holds and a CPU-measured run lacks.
pub const CPU_MISSING_WORKSPACES: u64 = 2 * 8_519_680;

/// Each `-peak` case of `cases` (CPU-measured runs) within `tol` of the estimate's peak
/// allocated net of [`CPU_MISSING_WORKSPACES`]; how many it checked.
pub fn assert_cpu_peaks_within(cases: &[Value], tol: f64) -> usize {
    let peaks = cases
        .iter()
        .filter(|c| c["id"].as_str().unwrap().ends_with("-peak"));
    let mut checked = 0;
    for c in peaks {
        let want = c["expected_bytes"].as_u64().unwrap() as f64;
        let report = run_job(c["job"].clone());
        let got = report.per_gpu.peaks.peak_allocated.unwrap() - CPU_MISSING_WORKSPACES;
        let err = (got as f64 - want) / want;
        assert!(err.abs() <= tol, "{}: {got} vs {want} ({err:+.4})", c["id"]);
        checked += 1;
    }
    checked
}

/// The estimate's bytes one block keeps (`activation_bytes_per_layer`) for a job given as JSON.
pub fn per_layer(job: Value) -> u64 {
    let report = run_job(job);
    report.per_gpu.peaks.activation_bytes_per_layer.unwrap()
}

/// The case `id` of `cases` (a measured `activation_bytes_per_layer`) within `tol` of the
/// estimate's bytes per block.
pub fn assert_per_layer_case_within(cases: &[Value], id: &str, tol: f64) {
    let case = cases.iter().find(|c| c["id"] == id).unwrap();
    let want = case["expected_bytes"].as_u64().unwrap() as f64;
    let got = per_layer(case["job"].clone()) as f64;
    assert!((got - want).abs() / want <= tol, "{id}: {got} vs {want}");
}

/// A job from a measured spec of `validation/specs/` (run `run_id`): `base` with the spec's
/// model (`hf_config`) and each of `keys` the spec holds.
pub fn spec_job(run_id: &str, mut base: Value, keys: &[&str]) -> Value {
    let spec: Value = validation(&format!("specs/{run_id}.json"));
    base["model"] = serde_json::json!({"hf_config": spec["hf_config"]});
    for k in keys {
        if let Some(x) = spec.get(*k) {
            base[*k] = x.clone();
        }
    }
    base
}

/// The job fields every measured spec states.
pub const SPEC_KEYS: [&str; 6] = [
    "batch",
    "seq",
    "precision",
    "optimizer",
    "checkpointing",
    "attention",
];

mod shared_dir;
mod warnings;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use warnings::{assert_never_warns, assert_warns, warns_of, warns_starting};

/// The activations a report's timeline holds at the point `label`
/// (`timeline[].by_category.activations`); panics naming the label when there is none.
pub fn activations_at(r: &Report, label: &str) -> u64 {
    r.timeline
        .iter()
        .find(|p| p.label == label)
        .unwrap_or_else(|| panic!("no timeline point {label}"))
        .by_category["activations"]
}

/// The shared H200 results file's runs that finished (`type: result`, `status: ok`), one JSON
/// object per line (`../shared/fixtures/gpu-h200/README.md`).
pub fn h200_results() -> Vec<serde_json::Value> {
    let path = format!(
        "{}/../../../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(shared(path))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "result" && r["status"] == "ok")
        .collect()
}

/// The stream's peak over the bytes live when its `generate` call begins, each block 512-rounded
/// as the measurement counts (`cpu_allocations.peak_over_start`): the CPU allocator has no
/// caching allocator's unsplit remainders, so the allocator model is left out.
pub fn stream_call_peak(job: &Job) -> u64 {
    use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase};
    let (model, resolved) = prepared(job);
    let s = step_stream(&model, &resolved).unwrap().unwrap();
    let mut bytes = vec![0u64; s.ids()];
    let (mut cur, mut peak, mut inside) = (0u64, 0u64, false);
    for &e in &s.events {
        match e {
            Event::Phase(p) => inside |= p == Phase::Forward(0),
            Event::Alloc { id, bytes: b } if inside => {
                bytes[id as usize] = b.div_ceil(512) * 512;
                cur += bytes[id as usize];
            }
            Event::Free { id } => cur -= std::mem::take(&mut bytes[id as usize]),
            _ => {}
        }
        peak = peak.max(cur);
    }
    peak
}

/// Pure bf16 numerics (no autocast): parameters, matmul outputs and logits 2 bytes; `compile`
/// as given.
#[allow(dead_code)] // Not every test binary that includes this module uses it.
pub fn bf16_numerics(compile: bool) -> vramscope_core::estimate::blocks::Numerics {
    vramscope_core::estimate::blocks::Numerics {
        param: 2,
        compute: 2,
        autocast: false,
        softmax_saves_input: false,
        compile,
        sdpa: Default::default(),
        transformers: Default::default(),
    }
}
