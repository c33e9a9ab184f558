//! State-space models (state-spaces/mamba-2.8b-hf from its published config,
//! `crates/formats/tests/fixtures/unsupported/mamba-2.8b-hf.json`): a recurrent state per
//! sequence in place of KV, constant in context length, and fit saying so. Every expected number
//! is derived by hand below from the model's shapes.

mod common;

mod measured;

use serde_json::{json, Value};
use vramscope_core::estimate::estimate;
use vramscope_core::fit::fit;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

fn config() -> Value {
    common::repo_json("crates/formats/tests/fixtures/unsupported/mamba-2.8b-hf.json")
}

fn run(job: Value) -> Report {
    let job: Job = serde_json::from_value(job).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let resolved = job.resolve(None).unwrap();
    estimate(&model.into_input(), &resolved).unwrap()
}

/// mamba-2.8b holds per layer and sequence, in transformers' cache, its conv state `[d_inner,
/// d_conv]` = 5120 · 4 = 20,480 bf16 values (40,960 B) and its SSM state `[d_inner, d_state]` =
/// 5120 · 16 = 81,920 values in fp32 (the scan's final state, `modeling_mamba.py`
/// `selective_scan`: 327,680 B): 368,640 B; × 64 layers = 23,592,960 B per sequence, whatever
/// the context.
#[test]
fn recurrent_state_is_constant_in_context() {
    let kv = |batch: u64, seq: u64| measured::kv_cache(&config(), batch, seq);
    assert_eq!(kv(1, 128), 23_592_960);
    assert_eq!(kv(1, 65_536), 23_592_960);
    assert_eq!(kv(4, 4_096), 4 * 23_592_960);
}

/// The fit answer says the state does not grow with context (22.50 MiB = 23,592,960 B per
/// sequence) and that the limit is not a cache.
#[test]
fn fit_says_the_state_does_not_grow() {
    let job: Job = serde_json::from_value(json!({"model": {"hf_config": config()},
        "task": "infer", "batch": 1, "seq": 2048, "precision": "bf16", "gpu": "a100-80gb"}))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let resolved = job.resolve(None).unwrap();
    let answer = fit(&model.into_input(), &resolved).unwrap();
    let note = answer
        .notes
        .iter()
        .find(|n| n.contains("does not grow with context"))
        .unwrap_or_else(|| panic!("{:?}", answer.notes));
    assert!(note.contains("64 state-space layers"), "{note}");
    assert!(note.contains("22.50 MiB"), "{note}");
}

/// In training the choice of scan path moves the activations: transformers' torch path
/// (attention eager) keeps `exp(A·Δ)`, `Δ·B` and every step's state, each `[b, d_inner, L,
/// d_state]` fp32 — at b 1, L 512, d_inner 5120, d_state 16 that is 3 · 167,772,160 B =
/// 503,316,480 B per layer at least — while the fused kernel (sdpa, the default) keeps
/// `[b, d_inner, L]`-sized tensors and chunk states of `[b, d_inner, 1, 32]` fp32. A warning
/// names the path used.
#[test]
fn torch_scan_path_saves_the_wide_tensors() {
    let per_layer = |attention: &str| {
        let r = run(
            json!({"model": {"hf_config": config()}, "task": "train", "batch": 1,
                   "seq": 512, "precision": "bf16-mixed", "attention": attention}),
        );
        common::assert_warns(&r.warnings, "state-space layers");
        r.per_gpu.peaks.activation_bytes_per_layer.unwrap()
    };
    let torch = per_layer("eager");
    let fused = per_layer("sdpa");
    assert!(torch >= 3 * 167_772_160, "{torch}");
    // Fused: xz (2 · 5120 · 512 · 2 B), out (5120 · 512 · 2 B), the fp32 block output
    // (2560 · 512 · 4 B) and smaller tensors: well under the torch path's single wide tensor.
    assert!(fused < 167_772_160, "{fused}");
}

/// Training steps of a tiny Mamba2 (4 layers, hidden 256, 8 heads of 64, one group, d_state 16,
/// chunk 64) measured on the CPU on transformers' torch path (`Mamba2Mixer.forward`:
/// `causal_conv1d_fn`, `mamba2_chunk_scan`; `validation/cpu-measured-mamba2.json`, made with
/// `../shared/measure/measure.py` and `scripts/cases_from_measure.py`), fp32 and bf16-mixed,
/// attention eager: each figure within 3 % (the peak net of the two cuBLAS workspaces).
#[test]
fn mamba2_torch_path_measured_within_3_percent() {
    let all = measured::compare("cpu-measured-mamba2.json");
    let mixed: Vec<_> = all.iter().filter(|c| !c.id.contains("-full")).collect();
    assert_eq!(mixed.len(), 6);
    for c in mixed {
        assert!(c.error.abs() <= 0.03, "{} {:+.2}%", c.id, c.error * 100.0);
    }
}

/// `residual_in_fp32` (`Mamba2Block.forward`: `residual.to(torch.float32) + mixer(..)`): in a
/// pure-bf16 Mamba2 with full checkpointing each block keeps its input, which after the first
/// block is the previous block's fp32 sum — 2 · 256 · 256 · 4 = 524,288 B per layer, not the
/// 262,144 B of a bf16 residual stream. Measured (`cpu-measured-mamba2.json`, bf16, full): the
/// peak, the bytes per layer (529,408) and the activations live at the peak, each within 3 %.
#[test]
fn residual_in_fp32_keeps_fp32_block_inputs() {
    let full: Vec<_> = measured::compare("cpu-measured-mamba2.json")
        .into_iter()
        .filter(|c| c.id.contains("-full"))
        .collect();
    assert_eq!(full.len(), 3);
    for c in full {
        assert!(c.error.abs() <= 0.03, "{} {:+.2}%", c.id, c.error * 100.0);
    }
}
