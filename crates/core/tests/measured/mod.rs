//! The measured-case check the family tests share: every case of one of the project's
//! `validation/cpu-measured-*.json` files (made with `../shared/measure/measure.py` and
//! `scripts/cases_from_measure.py`; validation/README.md) estimated and compared with what the
//! run measured. Every case says it was measured on the CPU (`"measured_on": "cpu"`, written by
//! `scripts/add_measured_on.py`), so its peak is compared net of the two cuBLAS workspaces the
//! estimate counts on a GPU (forward and backward threads) and a CPU run does not have, as
//! `vramscope validate` does and as in `validation_cases.rs` `masked_lm_pure_bf16_peaks`.

// Each test binary compiles this module on its own and uses only what it asserts on.
#![allow(dead_code)]

use serde_json::Value;
use vramscope_core::estimate::estimate;
use vramscope_core::estimate::overhead::blas_workspaces_bytes;
use vramscope_core::fit::FitAnswer;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

/// One case's comparison: its id, the signed relative error and the case's tolerance.
pub struct Compared {
    pub id: String,
    pub error: f64,
    pub tolerance: f64,
}

/// The figure at a dotted path of a Report's JSON.
fn metric(report: &Value, path: &str) -> f64 {
    let mut v = report;
    for part in path.split('.') {
        v = &v[part];
    }
    v.as_f64().unwrap_or_else(|| panic!("{path}: no figure"))
}

/// The Report of a job, resolved against the model's maximum positions.
pub fn run(job: Value) -> Report {
    let job: Job = serde_json::from_value(job).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved = job.resolve(max).unwrap();
    estimate(&model.into_input(), &resolved).unwrap()
}

/// A case's Report as JSON.
fn report(job: &Value) -> Value {
    serde_json::to_value(run(job.clone())).unwrap()
}

/// What a hybrid's model summary reads off the layers, for `job` (an inference estimate):
/// [heads, KV heads, head dim, MLP width, state-space layers, layers].
pub fn hybrid_summary(job: Value) -> [Option<u64>; 6] {
    let m = run(job).model;
    [
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.ffn,
        m.state_space_layers,
        m.layers,
    ]
}

/// Every case of `validation/<file>` against the estimate, each printed.
pub fn compare(file: &str) -> Vec<Compared> {
    let cases: Vec<Value> = crate::common::validation(file);
    let workspaces = blas_workspaces_bytes(None, true);
    // cuBLAS's forward and backward handles, each 8,519,680 B; today's cuBLASLt shares them
    // (`overhead.rs`).
    assert_eq!(workspaces, 2 * 8_519_680);
    let workspaces = workspaces as f64;
    cases
        .iter()
        .map(|c| {
            let path = c["metric"].as_str().unwrap();
            let mut got = metric(&report(&c["job"]), path);
            let on = c["measured_on"].as_str();
            assert_eq!(on, Some("cpu"), "{file} {}: measured_on", c["id"]);
            if path == "per_gpu.peak_allocated" {
                got -= workspaces;
            }
            let expected = c["expected_bytes"].as_f64().unwrap();
            let error = (got - expected) / expected;
            println!("{} {expected} {got} {:+.2}%", c["id"], error * 100.0);
            Compared {
                id: c["id"].as_str().unwrap().to_string(),
                error,
                tolerance: c["tolerance"].as_f64().unwrap_or(0.03),
            }
        })
        .collect()
}

/// The largest |error| over a file's cases, which must number at least `min`.
pub fn worst(file: &str, min: usize) -> f64 {
    let all = compare(file);
    assert!(all.len() >= min, "{file}: {} cases", all.len());
    all.iter().map(|c| c.error.abs()).fold(0.0, f64::max)
}

/// A real config of `crates/formats/tests/fixtures/hybrid/` (sources in its README).
pub fn hybrid_config(name: &str) -> Value {
    formats_fixture(&format!("hybrid/{name}.json"))
}

/// The JSON file `crates/formats/tests/fixtures/<rel>` (real configs; sources in the READMEs),
/// read as transformers reads it: Python's `Infinity` and `NaN` tokens are taken
/// (`python_json::to_strict`; Nemotron-Nano-9B-v2's `time_step_limit` holds one).
pub fn formats_fixture(rel: &str) -> Value {
    let path = format!(
        "{}/../formats/tests/fixtures/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let text = vramscope_formats::python_json::to_strict(&text);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The bf16 inference cache (KV plus any recurrent state) the estimate holds for `config` at
/// `batch × seq`: the most its timeline holds, once every layer's first `update` has made its
/// part (the prefill makes the cache layer by layer, `estimate/prefill_walk.rs`, so a peak in an
/// earlier layer holds less of it).
pub fn kv_cache(config: &Value, batch: u64, seq: u64) -> u64 {
    let r = run(
        serde_json::json!({"model": {"hf_config": config}, "task": "infer", "batch": batch,
                           "seq": seq, "precision": "bf16"}),
    );
    r.timeline
        .iter()
        .filter_map(|p| p.by_category.get("kv_cache").copied())
        .max()
        .unwrap_or(0)
}

/// KV bytes at the last decode step of a bf16 generation whose cache reaches `seq` tokens
/// there (a 16-token prompt and `seq − 15` new tokens, the last never fed back), read off the
/// estimate's timeline: what each layer's cache class keeps once decoding, a sliding layer its
/// window. A long prompt's prefill holds more, a sliding layer keeping the whole prompt
/// (`estimate/generate_kv.rs`).
pub fn kv_cache_decoded(config: &Value, batch: u64, seq: u64) -> u64 {
    let r = run(
        serde_json::json!({"model": {"hf_config": config}, "task": "infer", "batch": batch,
                           "seq": 16, "new_tokens": seq - 15, "precision": "bf16"}),
    );
    last_decode_kv(&r)
}

/// Asserts a windowed model's bf16 cache at 1 × 4,096: `decoded` once decoding (twice that at
/// batch 2), `grown` more once decoding reaches 8,192 tokens (the full layers' part alone),
/// and `prefill` at the end of a 4,096-token prefill (a sliding layer still holding the whole
/// prompt).
pub fn assert_windowed_cache_at_4096(config: &Value, decoded: u64, grown: u64, prefill: u64) {
    assert_eq!(kv_cache_decoded(config, 1, 4096), decoded);
    assert_eq!(kv_cache_decoded(config, 2, 4096), 2 * decoded);
    let doubled = kv_cache_decoded(config, 1, 8192) - kv_cache_decoded(config, 1, 4096);
    assert_eq!(doubled, grown);
    assert_eq!(kv_cache(config, 1, 4096), prefill);
}

/// The cache at the estimate's "last decode step" timeline point.
pub fn last_decode_kv(r: &vramscope_core::report::Report) -> u64 {
    let p = r
        .timeline
        .iter()
        .find(|p| p.label == "last decode step")
        .expect("a decode step");
    p.by_category.get("kv_cache").copied().unwrap_or(0)
}

/// fit's answer for bf16 inference of `config` at 1 × `seq` on an H200, the search bounded by
/// `max_positions`.
pub fn fit_bf16_h200(config: &Value, seq: u64, max_positions: u64) -> FitAnswer {
    let job: Job = serde_json::from_value(serde_json::json!({
        "model": {"hf_config": config}, "task": "infer", "batch": 1, "seq": seq,
        "precision": "bf16", "gpu": "h200-141gb"}))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let resolved = job.resolve(Some(max_positions)).unwrap();
    vramscope_core::fit::fit(&model.into_input(), &resolved).unwrap()
}

/// The largest batch fit finds for [`fit_bf16_h200`]; panics when not one sequence fits.
pub fn max_batch_bf16_h200(config: &Value, seq: u64, max_positions: u64) -> u64 {
    let answer = fit_bf16_h200(config, seq, max_positions);
    answer.max_batch.expect("at least one sequence fits")
}

/// fit's note that a model's recurrent state does not grow with context (bf16 inference at
/// seq 4096 on an H200, the search bounded by `max_positions`).
pub fn constant_state_note(config: &Value, max_positions: u64) -> String {
    fit_bf16_h200(config, 4096, max_positions)
        .notes
        .into_iter()
        .find(|n| n.contains("does not grow with context"))
        .unwrap_or_else(|| panic!("no constant-state note"))
}

/// The Report of a bf16-mixed AdamW training step of `config` at batch 1 × 2048 under
/// `attention`.
pub fn train_step(config: &Value, attention: &str) -> Report {
    run(serde_json::json!({"model": {"hf_config": config},
        "task": "train", "batch": 1, "seq": 2048, "precision": "bf16-mixed",
        "optimizer": "adamw", "attention": attention}))
}

/// A hybrid model's bf16-mixed AdamW training step at batch 1 × 2048 under `attention: eager`
/// (the Mamba2 mixers' torch path) and `sdpa` (the fused kernel), each checked to say so: the
/// eager step warns of the torch path in a line naming `eager_names` (the model's mixers), the
/// fused one names `mamba_split_conv1d_scan_combined`. Returns the (eager, fused) reports.
pub fn mixer_paths(config: &Value, eager_names: &str) -> (Report, Report) {
    let (eager, fused) = (train_step(config, "eager"), train_step(config, "sdpa"));
    assert!(
        eager
            .warnings
            .iter()
            .any(|w| w.contains(eager_names) && w.contains("torch path")),
        "{:?}",
        eager.warnings
    );
    crate::common::assert_warns(&fused.warnings, "mamba_split_conv1d_scan_combined");
    (eager, fused)
}
