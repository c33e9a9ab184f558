//! Time beside bytes (issue 23): each what-if row's modelled step and its time cost per token
//! against the job, `fit`'s modelled step at the largest batch, and the RL step (generation,
//! then training). Bounds are derived from the formulas' structure (Narayanan et al. 2021
//! eq. 3: a full recomputation reruns the forward, one pass in three), not read off the output.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::{fit, what_if};
use vramscope_core::job::ResolvedJob;
use vramscope_core::throughput::Throughput;

fn load(job: Value) -> (ModelInput, ResolvedJob) {
    common::prepared_json(&job)
}

fn train(r: &vramscope_core::report::Report) -> vramscope_core::throughput::TrainThroughput {
    match &r.throughput {
        Some(Throughput::Train(t)) => t.clone(),
        other => panic!("no training throughput: {other:?}"),
    }
}

/// Full recomputation reruns each layer's forward in the backward. On one GPU (no
/// communication) the backward of this job is GPU-bound, so the step grows by the forward's
/// GPU work again — at most the job's `forward_s` (the longer of its GPU work and its
/// launches) — plus autocast's weight copies made again: 6 bytes × 1.2358e9 parameters at
/// 3.35 TB/s × 0.85 = 2.60 ms. The forward's matmuls alone are more than half of it (2 of the
/// 2·N·tokens FLOPs' passes against a few memory-bound ops), so the time per token grows by
/// more than half of `forward_s / step_s`. The optimizer step is unchanged.
#[test]
fn full_checkpointing_costs_the_forward_again() {
    let (model, job) = load(
        json!({"model": "llama-3.2-1b", "gpu": "h100-80gb", "seq": 2048,
        "batch": 4, "attention": "sdpa"}),
    );
    let rows = what_if(&model, &job).unwrap();
    let row = rows
        .iter()
        .find(|r| r.flags.join(" ") == "--checkpointing full")
        .expect("a full checkpointing row");
    let cost = row.time_cost.unwrap();
    let base = train(&estimate(&model, &job).unwrap());
    let share = base.forward_s / base.step_time_s;
    let copies = 6.0 * 1.2358e9 / (3.35e12 * 0.85) / base.step_time_s;
    assert!(
        cost > share / 2.0 && cost <= share + copies + 1e-9,
        "{cost} vs {share}"
    );
    // Its step is the estimate of the changed job.
    let changed = ResolvedJob {
        checkpointing: vramscope_core::job::Checkpointing::Full,
        ..job.clone()
    };
    let t = train(&estimate(&model, &changed).unwrap());
    assert!((row.step_time_s.unwrap() / t.step_time_s - 1.0).abs() < 1e-12);
    // Every row of a training job on a GPU with speeds has a time.
    assert!(rows.iter().all(|r| r.time_cost.is_some()), "{rows:?}");
}

/// Offloading the optimizer moves the step to the CPU (0.71 s per 10⁹ parameters, DeepSpeed
/// PR #735) and the gradients over PCIe: slower per token, never faster.
#[test]
fn optimizer_offload_costs_time() {
    let (model, job) = load(
        json!({"model": "llama-3.2-1b", "gpu": "h100-80gb", "seq": 2048,
        "batch": 1, "framework": "deepspeed", "parallel": {"gpus": 8, "zero": 2}}),
    );
    let rows = what_if(&model, &job).unwrap();
    let row = rows
        .iter()
        .find(|r| r.flags.iter().any(|f| f.contains("offload")))
        .expect("an offload row");
    // 1.24e9 parameters / 8 ranks × 0.707e-9 s ≈ 0.11 s of CPU Adam alone per step.
    let base = train(&estimate(&model, &job).unwrap());
    assert!(
        row.step_time_s.unwrap() > base.step_time_s + 0.1,
        "{row:?} vs {base:?}"
    );
    assert!(row.time_cost.unwrap() > 0.0);
}

/// `fit`'s answer carries the modelled step at its largest micro-batch: the estimate of the job
/// at that batch.
#[test]
fn fit_reports_the_step_at_the_largest_batch() {
    let (model, job) = load(json!({"model": "llama-3.2-1b", "gpu": "h100-80gb", "seq": 2048}));
    let a = fit(&model, &job).unwrap();
    let b = a.max_batch.expect("a batch fits");
    let Some(Throughput::Train(at)) = &a.throughput_at_max_batch else {
        panic!("no throughput at the answer: {a:?}");
    };
    let t = train(&estimate(&model, &ResolvedJob { batch: b, ..job }).unwrap());
    assert!((at.step_time_s / t.step_time_s - 1.0).abs() < 1e-12);
}

/// A GPU the catalog has no speeds for: no time in fit, no time cost in the what-if rows.
#[test]
fn no_speeds_no_times() {
    let (model, job) = load(json!({"model": "llama-3.2-1b", "gpu": "rtx4080-16gb", "seq": 1024}));
    assert!(fit(&model, &job).unwrap().throughput_at_max_batch.is_none());
    assert!(what_if(&model, &job)
        .unwrap()
        .iter()
        .all(|r| r.time_cost.is_none() && r.step_time_s.is_none()));
}

/// GRPO: the step is the round's generation and then the training step, so it is longer than
/// the generation and the tokens/s count the trained sequences; DPO generates nothing.
#[test]
fn an_rl_step_is_generation_then_training() {
    let job = |algorithm: &str| {
        json!({"model": "qwen2.5-0.5b", "gpu": "h100-80gb", "task": "rl", "batch": 4,
            "grad_accum": 2, "rl": {"algorithm": algorithm, "prompt_len": 128,
            "completion_len": 256}})
    };
    let (model, grpo) = load(job("grpo"));
    let r = estimate(&model, &grpo).unwrap();
    common::assert_never_warns(&r.warnings, "throughput is null");
    let t = train(&r);
    let g = t.generation_s.unwrap();
    assert!(
        g > 0.0 && t.step_time_s > g + t.parts.compute_s * 0.999,
        "{t:?}"
    );
    // 4 × 2 sequences of 128 + 256 tokens per step on one GPU.
    let tokens = 8.0 * 384.0;
    assert!((t.tokens_per_s_per_gpu * t.step_time_s / tokens - 1.0).abs() < 1e-9);
    let (model, dpo) = load(job("dpo"));
    let d = train(&estimate(&model, &dpo).unwrap());
    assert_eq!(d.generation_s, Some(0.0));
}
