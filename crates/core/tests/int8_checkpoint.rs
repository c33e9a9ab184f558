//! LLM.int8 under full checkpointing: `MatMul8bitLt` holds each projection's input in
//! `ctx.tensors` (a ctx attribute, not a saved tensor). Under non-reentrant checkpointing
//! (transformers 5.24's default, the Trainer's and TRL's) the first forward's held inputs live
//! until the graph is freed; under reentrant checkpointing (PEFT's
//! `prepare_model_for_kbit_training` alone) the first forward runs under `no_grad` and holds
//! nothing (`scripts/check_ctx_lifetime.py`, `docs/allocator-stream.md`).

mod common;

use serde_json::{json, Value};

fn job(reentrant: Option<bool>) -> Value {
    let mut j = json!({
        "model": "llama-3.1-8b", "task": "train", "precision": "bf16", "optimizer": "adamw",
        "batch": 2, "seq": 2048, "weights": "int8", "gpu": "h100", "checkpointing": "full",
        "peft": {"method": "lora", "rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]}
    });
    if let Some(r) = reentrant {
        j["checkpoint_reentrant"] = json!(r);
    }
    j
}

/// Every projection of the 8B is a `Linear8bitLt` (LoRA targets or not), so each layer's first
/// forward holds four distinct inputs: the normed input q/k/v read, o_proj's input (the
/// attention's output), the normed input gate/up read — each 2 · 2048 · 4096 bf16 = 33,554,432
/// B — and down_proj's input, 2 · 2048 · 14336 · 2 = 117,440,512 B: 218,103,808 B (208 MiB) per
/// layer, every size a multiple of 512 B. Under full checkpointing nothing else of the layer
/// is kept but its output (32 MiB), so the non-reentrant layer keeps 251,658,240 B and the
/// reentrant one 33,554,432 B; the 32 layers' held inputs are all alive at the backward's peak:
/// 32 · 218,103,808 = 6,979,321,856 B.
#[test]
fn non_reentrant_checkpointing_keeps_the_held_inputs() {
    let held = 3 * 2 * 2048 * 4096 * 2 + 2 * 2048 * 14336 * 2;
    assert_eq!(held, 218_103_808);
    let non = common::run_job(job(Some(false))).per_gpu.peaks;
    let re = common::run_job(job(Some(true))).per_gpu.peaks;
    let output = 2 * 2048 * 4096 * 2;
    assert_eq!(re.activation_bytes_per_layer, Some(output));
    assert_eq!(non.activation_bytes_per_layer, Some(output + held));
    assert_eq!(
        non.peak_allocated.unwrap() - re.peak_allocated.unwrap(),
        32 * held
    );
}

/// The default is non-reentrant (`{"use_reentrant": False}` when no kwargs are given:
/// transformers 5.24 `_activation_checkpointing_enable`), and reentrant when PEFT's
/// preparation is what turns checkpointing on (it passes `{}`; torch 2.15's `checkpoint`
/// without `use_reentrant` takes True). A job that names `checkpointing` itself keeps the
/// default, and the field, given, wins.
#[test]
fn the_default_kind_follows_who_turns_checkpointing_on() {
    let reentrant = |j: Value| common::prepared_json(&j).1.techniques.checkpoint_reentrant;
    assert!(!reentrant(job(None)));
    let mut by_prepare = job(None);
    by_prepare["kbit_prepare"] = json!(true);
    by_prepare.as_object_mut().unwrap().remove("checkpointing");
    assert!(reentrant(by_prepare.clone()));
    by_prepare["checkpoint_reentrant"] = json!(false);
    assert!(!reentrant(by_prepare));
    let mut named = job(None);
    named["kbit_prepare"] = json!(true);
    assert!(!reentrant(named));
}

/// A value other than a boolean is refused with the field's name.
#[test]
fn a_bad_value_names_the_field() {
    let mut j = job(None);
    j["checkpoint_reentrant"] = json!("sometimes");
    let job: vramscope_core::job::Job = serde_json::from_value(j).unwrap();
    let err = job.resolve(None).unwrap_err().to_string();
    assert!(err.contains("checkpoint_reentrant"), "{err}");
}

/// The field names the kind of full checkpointing: given beside no checkpointing (or on an
/// inference job, which checkpoints nothing) it is an error, not silently ignored.
#[test]
fn the_kind_without_full_checkpointing_is_refused() {
    for (task, ckpt) in [("train", "none"), ("train", "selective"), ("infer", "none")] {
        let mut j = job(Some(true));
        j["task"] = json!(task);
        j["checkpointing"] = json!(ckpt);
        if task == "infer" {
            j["peft"] = serde_json::Value::Null;
        }
        let job: vramscope_core::job::Job = serde_json::from_value(j).unwrap();
        let err = job.resolve(None).unwrap_err().to_string();
        assert!(
            err.contains("checkpoint_reentrant") && err.contains(&format!("'{ckpt}'")),
            "{task}/{ckpt}: {err}"
        );
    }
}

/// The stream writes both kinds (`alloc_events/ctx_held.rs`) and meets the walk's peak.
#[test]
fn the_stream_meets_the_walk_under_both_kinds() {
    for r in [false, true] {
        common::stream_steps::assert_stream_meets_walk(&job(Some(r)));
    }
}
