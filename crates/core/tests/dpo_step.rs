//! A DPO step (`reference_model` in a training job; `task: "rl"` with `algorithm: "dpo"`) as
//! TRL's `DPOTrainer` runs it: chosen and rejected rows together, the policy's log-probabilities
//! by `selective_log_softmax`, the frozen reference's no-grad forward after the policy's.
//! Figures are derived by hand from the shapes or measured (`validation/specs/*-dpo-*.json`,
//! `../shared/measure/measure.py` patched by `scripts/measure_dpo.patch`), never taken from
//! vramscope's own output.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::overhead::blas_workspaces_bytes;
use vramscope_core::report::{Category, Report};

use common::run_job as run;

/// The job of a measured spec: its model, shape and precision, with TRL's frozen reference.
fn spec_job(run_id: &str) -> Value {
    common::spec_job(
        run_id,
        json!({"task": "train", "reference_model": "frozen"}),
        &common::SPEC_KEYS,
    )
}

/// The moment of the timeline with this label.
fn at(r: &Report, label: &str) -> u64 {
    r.timeline
        .iter()
        .find(|p| p.label == label)
        .unwrap_or_else(|| panic!("no event {label}"))
        .allocated
}

/// Measured DPO steps of the tiny Llama of `validation/specs/cpu-tiny-llama-*-dpo-b2s256.json`
/// (4 layers, hidden 256, vocabulary 8,192, untied; 7,342,336 parameters as `measure.py`
/// printed; 2 pairs = 4 rows × 256 tokens; AdamW; SDPA), step-2 peaks of the c10 allocation
/// series (`steps.step2.r512.peak_raw` of `validation/results/`), measured on 2026-12-02 with
/// torch 2.15.0 and transformers 5.24.0 on the CPU, within 3 % net of the two cuBLAS workspaces
/// a CPU run lacks. bf16 peaks in the forward, inside the reference's (the measured top tensors
/// there are the two [4, 256, 8192] logits, policy and reference, and the policy's saved
/// log-softmax rows); fp32 in the backward, where `UnbindBackward` stacks the four rows'
/// gradients from `logsumexp` while the logits that `gather` and `logsumexp` saved are alive.
#[test]
fn measured_dpo_peaks() {
    let workspaces = blas_workspaces_bytes(None, true);
    for (run_id, measured, phase, params) in [
        (
            "cpu-tiny-llama-bf16-adamw-sdpa-dpo-b2s256",
            163_707_392u64,
            "forward",
            29_369_344u64,
        ),
        (
            "cpu-tiny-llama-fp32-adamw-sdpa-dpo-b2s256",
            309_361_664,
            "backward",
            58_738_688,
        ),
    ] {
        let r = run(spec_job(run_id));
        let got = r.per_gpu.peaks.peak_allocated.unwrap() - workspaces;
        let err = (got as f64 - measured as f64) / measured as f64;
        eprintln!("{run_id}: estimate {got} B, measured {measured} B ({err:+.4})");
        assert!(
            err.abs() <= 0.03,
            "{run_id}: {got} vs {measured} ({err:+.4})"
        );
        assert_eq!(
            r.per_gpu.peaks.peak_phase.as_deref(),
            Some(phase),
            "{run_id}"
        );
        // The policy and its frozen copy: 2 × 7,342,336 parameters × 2 B (bf16) = 29,369,344
        // B, × 4 B (fp32) = 58,738,688 B, the PARAMETER bytes the measurement reports at its
        // peak.
        assert_eq!(r.per_gpu.components.parameters, params, "{run_id}");
    }
}

/// In 16 bit the reference's forward holds, beside what the policy's loss left (its
/// log-softmax rows saved, its logits held by the outputs), its own logits and one row's
/// log-softmax: [4, 256, 8192] × 2 B = 16,777,216 B and [255, 8192] × 2 B = 4,177,920 B (the
/// measured `_log_softmax` rows are 4,177,920 B each). So the reference moment is 20,955,136 B
/// above the loss moment (where the policy's logits are the transient).
#[test]
fn reference_forward_holds_its_logits_and_one_row() {
    let r = run(spec_job("cpu-tiny-llama-bf16-adamw-sdpa-dpo-b2s256"));
    let loss = at(&r, "loss");
    let reference = at(&r, "reference model forward (no_grad)");
    assert_eq!(reference - loss, 16_777_216 + 4_177_920);
}

/// `batch` is the pairs: the policy sees 2 × batch rows. A DPO job at batch 1 and a plain job
/// at batch 2 both run 2 rows, so their batch inputs (input_ids and a second int64 [rows, s]
/// tensor) are equal; the report echoes the pairs.
#[test]
fn batch_counts_pairs() {
    let base = json!({"model": "gpt2", "seq": 128, "precision": "fp32", "optimizer": "adamw",
                      "attention": "flash"});
    let mut dpo = base.clone();
    dpo["batch"] = json!(1);
    dpo["reference_model"] = json!("precomputed");
    let r = run(dpo);
    assert_eq!(serde_json::to_value(&r.job).unwrap()["batch"], json!(1));
    // The first event: weights, states and the batch: 2 rows × 128 × 8 B × 2 tensors = 4,096 B
    // of inputs.
    let first = r.timeline.first().unwrap();
    assert_eq!(first.by_category.of(Category::Activations), 4_096);
}

/// A LoRA policy keeps no reference copy (TRL disables the adapters), but the reference's
/// forward still runs (the base model with the adapters off): it is in the timeline with a
/// frozen reference, not with precomputed log-probabilities.
#[test]
fn peft_reference_runs_without_a_copy() {
    let lora = json!({"model": "gpt2", "batch": 1, "seq": 128, "precision": "fp32",
                      "optimizer": "adamw", "attention": "flash",
                      "peft": {"method": "lora", "rank": 8, "alpha": 16, "targets": ["c_attn"]}});
    let mut frozen = lora.clone();
    frozen["reference_model"] = json!("frozen");
    let mut pre = lora.clone();
    pre["reference_model"] = json!("precomputed");
    let (f, p) = (run(frozen), run(pre));
    assert_eq!(
        f.per_gpu.model_states.parameters,
        p.per_gpu.model_states.parameters
    );
    let label = "reference model forward (no_grad)";
    assert!(f.timeline.iter().any(|e| e.label == label));
    assert!(!p.timeline.iter().any(|e| e.label == label));
}
