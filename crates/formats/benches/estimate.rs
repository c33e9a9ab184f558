//! How fast the estimator answers: one estimate (the model loaded once), the fit search, and
//! the what-if table. Figures are recorded in BENCHMARKS.md.
//!
//! A model remembers the parts of its estimates that depend on it and a few job fields
//! (`estimate::memo`), so a benchmark repeating one call on one model measures the calls after
//! the first; the `fresh model` benchmarks give each call a new clone of the model (its memo
//! empty, its shape tallies kept), timing only the call: what the first estimate of a loaded
//! model costs.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::json;
use std::hint::black_box;
use vramscope_core::estimate::estimate;
use vramscope_core::estimate::input::ModelInput;
use vramscope_core::fit::{fit, what_if};
use vramscope_core::job::{Job, ResolvedJob};
use vramscope_formats::model_source::load_model;

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// A built-in model loaded once and a job resolved against it.
fn loaded(model: &str, job: serde_json::Value) -> (ModelInput, ResolvedJob) {
    let m = load_model(model).unwrap();
    let max = m.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let input = m.into_input();
    let job: Job = serde_json::from_value(job).unwrap();
    let resolved = job.resolve(max).unwrap();
    (input, resolved)
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("estimate");
    whole_calls(&mut g);
    parts(&mut g);
    planner(&mut g);
    g.finish();
}

/// One estimate, the fit search and the what-if table of a few jobs, repeated and fresh.
fn whole_calls(g: &mut Group) {
    for (name, model, job) in [
        (
            "llama-3.1-8b train b1 s4096 bf16-mixed adamw",
            "llama-3.1-8b",
            json!({"batch": 1, "seq": 4096, "gpu": "h100-80gb"}),
        ),
        (
            "llama-3.1-70b train b1 s4096 zero3 64 GPUs",
            "llama-3.1-70b",
            json!({"batch": 1, "seq": 4096, "framework": "deepspeed",
                   "parallel": {"gpus": 64, "zero": 3}, "gpu": "h100-80gb"}),
        ),
        (
            "llama-3.1-8b infer b16 s8192",
            "llama-3.1-8b",
            json!({"task": "infer", "batch": 16, "seq": 8192, "gpu": "l40s-48gb"}),
        ),
        (
            "llama-3.1-8b vllm b16 s8192 fit",
            "llama-3.1-8b",
            json!({"task": "infer", "batch": 16, "seq": 8192, "gpu": "l40s-48gb",
                   "framework": "vllm"}),
        ),
    ] {
        let (input, resolved) = loaded(model, job);
        g.bench_function(format!("one estimate: {name}"), |b| {
            b.iter(|| estimate(black_box(&input), black_box(&resolved)).unwrap())
        });
        if name.contains("8b train") || name.contains("vllm") {
            g.bench_function(format!("fit search: {name}"), |b| {
                b.iter(|| fit(black_box(&input), black_box(&resolved)).unwrap())
            });
            if name.contains("train") {
                g.bench_function(format!("what-if table: {name}"), |b| {
                    b.iter(|| what_if(black_box(&input), black_box(&resolved)).unwrap())
                });
                g.bench_function(format!("one estimate, fresh model: {name}"), |b| {
                    b.iter_batched_ref(
                        || input.clone(),
                        |m| estimate(black_box(m), black_box(&resolved)).unwrap(),
                        BatchSize::SmallInput,
                    )
                });
                g.bench_function(format!("what-if table, fresh model: {name}"), |b| {
                    b.iter_batched_ref(
                        || input.clone(),
                        |m| what_if(black_box(m), black_box(&resolved)).unwrap(),
                        BatchSize::SmallInput,
                    )
                });
            }
        }
    }
}

/// Parts of one estimate, to see where its time goes.
fn parts(g: &mut Group) {
    {
        let (input, resolved) = loaded(
            "llama-3.1-8b",
            json!({"batch": 1, "seq": 4096, "gpu": "h100-80gb"}),
        );
        let spec = input.spec.clone().unwrap();
        g.bench_function("part: model states llama-3.1-8b train", |b| {
            b.iter(|| {
                let mut w = Vec::new();
                vramscope_core::estimate::states::model_states(black_box(&input), &resolved, &mut w)
                    .unwrap()
            })
        });
        for (what, extra) in [
            ("lora", json!({"method": "lora", "rank": 16})),
            ("qlora", json!({"method": "qlora", "rank": 16})),
        ] {
            let (_, resolved) = loaded(
                "llama-3.1-8b",
                json!({"batch": 1, "seq": 4096, "gpu": "h100-80gb", "peft": extra}),
            );
            g.bench_function(format!("part: model states llama-3.1-8b {what}"), |b| {
                b.iter(|| {
                    let mut w = Vec::new();
                    vramscope_core::estimate::states::model_states(
                        black_box(&input),
                        &resolved,
                        &mut w,
                    )
                    .unwrap()
                })
            });
            g.bench_function(format!("part: one estimate llama-3.1-8b {what}"), |b| {
                b.iter(|| estimate(black_box(&input), black_box(&resolved)).unwrap())
            });
        }
        g.bench_function("part: forward plan llama-3.1-8b train", |b| {
            b.iter(|| {
                let mut w = Vec::new();
                vramscope_core::estimate::activations::forward(black_box(&spec), &resolved, &mut w)
                    .unwrap()
            })
        });
        g.bench_function("part: report to json llama-3.1-8b train", |b| {
            let r = estimate(&input, &resolved).unwrap();
            b.iter(|| serde_json::to_vec(black_box(&r)).unwrap())
        });
    }
}

/// The planner: every layout of 64 GPUs for Llama-3.1-70B, micro-batches 1..=64.
fn planner(g: &mut Group) {
    let (input, resolved) = loaded("llama-3.1-70b", json!({"seq": 4096}));
    let gpu = vramscope_core::gpu::find("h100-80gb").unwrap();
    let n = vramscope_core::plan::plan(&input, &resolved, 64, gpu, 64, 10)
        .unwrap()
        .evaluated;
    println!("plan: {n} layouts per search");
    g.sample_size(10);
    g.bench_function(
        format!("plan: llama-3.1-70b on 64 GPUs ({n} layouts)"),
        |b| {
            b.iter(|| {
                vramscope_core::plan::plan(black_box(&input), &resolved, 64, gpu, 64, 10).unwrap()
            })
        },
    );
}

criterion_group!(estimate_benches, benches);
criterion_main!(estimate_benches);
