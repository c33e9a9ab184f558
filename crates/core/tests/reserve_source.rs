//! Where a report's allocator reserve comes from: the caching-allocator model fed with the
//! step's allocation events (`per_gpu.allocator` present, no warning), or — for a job the
//! stream does not write — the packing estimate of `overhead.rs`, which the report then names
//! with what kept the stream out. Which jobs are written is read off the coverage list in
//! `docs/allocator-stream.md` ("What it covers"), not off the code: ZeRO-1/2 and FSDP2
//! FULL_SHARD ranks are written, ZeRO-3, Megatron's step, `torch.compile` and HF generate of
//! 4-bit weights are not; serving engines keep their own budgets and say nothing of it.

mod common;

use common::run_job;
use serde_json::{json, Value};

/// Llama-3.1-8B, bf16-mixed AdamW, b1 × 4096 on H100s, with `extra` fields laid over.
fn job(extra: Value) -> Value {
    let mut j = json!({"model": "llama-3.1-8b", "precision": "bf16-mixed", "optimizer": "adamw",
                       "batch": 1, "seq": 4096, "gpu": "h100"});
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

/// The report's warning on a reserve the allocator model did not give, if any.
fn heuristic_warning(extra: Value) -> (Option<String>, bool) {
    let r = run_job(job(extra));
    let w = r
        .warnings
        .iter()
        .find(|w| w.starts_with("allocator reserve not simulated"))
        .cloned();
    (w, r.per_gpu.allocator.is_some())
}

#[test]
fn a_streamed_job_is_simulated_and_says_nothing() {
    for extra in [
        json!({}),
        json!({"framework": "deepspeed", "parallel": {"gpus": 8, "zero": 2}}),
        json!({"framework": "deepspeed", "grad_accum": 4, "parallel": {"gpus": 8, "zero": 1}}),
        json!({"framework": "fsdp", "parallel": {"gpus": 8, "zero": 3}}),
    ] {
        let (w, simulated) = heuristic_warning(extra.clone());
        assert!(simulated, "{extra}: no allocator summary");
        assert_eq!(w, None, "{extra}");
    }
}

#[test]
fn a_job_left_to_the_heuristic_names_what_kept_it_out() {
    let cases = [
        (
            json!({"framework": "deepspeed", "parallel": {"gpus": 8, "zero": 3}}),
            "DeepSpeed other than one ZeRO-1/2 rank",
        ),
        (
            json!({"framework": "megatron", "parallel": {"gpus": 8, "tp": 8}}),
            "megatron's own step",
        ),
        (json!({"compile": true}), "torch.compile"),
        (
            json!({"task": "infer", "weights": "nf4", "optimizer": "none"}),
            "inference other than one GPU's HF generate",
        ),
    ];
    for (extra, names) in cases {
        let (w, simulated) = heuristic_warning(extra.clone());
        assert!(!simulated, "{extra}: simulated");
        let w = w.unwrap_or_else(|| panic!("{extra}: no warning"));
        assert!(w.contains(names), "{extra}: {w}");
    }
}

#[test]
fn a_serving_engine_keeps_its_own_budget_and_no_warning() {
    let (w, _) = heuristic_warning(json!({"task": "infer", "framework": "vllm",
                                          "optimizer": "none"}));
    assert_eq!(w, None);
}
