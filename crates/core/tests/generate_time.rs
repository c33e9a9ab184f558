//! One `generate` call's modelled time (`throughput.generate_s`) against the H200's measured
//! ones: the three Hugging Face `generate` runs of `../shared/fixtures/gpu-h200/` (Llama-3.1-8B
//! bf16, eager, `disable_compile=True`; the measured call's `generate` phase, seconds), each job
//! as `validation/gpu-h200-measured.json` states it (the static cache as `engine.cache`).

mod common;
use common::h200_results;

use serde_json::Value;
use vramscope_core::estimate::estimate;
use vramscope_core::job::{merge_if_supported, Job};
use vramscope_core::throughput::{InferThroughput, Throughput};
use vramscope_formats::model_source::load_job_model;

/// The measured `generate` seconds of each inference spec (its measured call).
fn measured() -> Vec<(String, f64)> {
    h200_results()
        .into_iter()
        .filter(|r| r["job"]["task"] == "infer")
        .map(|r| {
            let step = r["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["measured"] == true)
                .unwrap();
            let p = &step["phases"][0];
            assert_eq!(p["phase"], "generate");
            (
                r["id"].as_str().unwrap().to_string(),
                p["seconds"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The job of a spec as the validation cases state it (their `job_if_supported` merged).
fn modelled(spec: &str) -> InferThroughput {
    let cases: Vec<Value> = common::validation("gpu-h200-measured.json");
    let case = cases
        .iter()
        .find(|c| c["provenance"]["spec"] == spec)
        .unwrap();
    let job = merge_if_supported(&case["job"], case.get("job_if_supported"));
    let job: Job = serde_json::from_value(job).unwrap();
    let (input, resolved) = common::prepared(&job);
    match estimate(&input, &resolved).unwrap().throughput {
        Some(Throughput::Infer(t)) => t,
        other => panic!("{spec}: no inference throughput: {other:?}"),
    }
}

#[test]
fn h200_generate_calls() {
    let runs = measured();
    assert_eq!(runs.len(), 3);
    let mut errors = Vec::new();
    for (id, seconds) in &runs {
        let t = modelled(id);
        let err = t.generate_s / seconds - 1.0;
        println!(
            "{id:40} measured {seconds:7.3} s  modelled {:7.3} s ({:+6.1} %)  prefill {:.3} s  step {:.2} ms  {}",
            t.generate_s,
            err * 100.0,
            t.prefill_s,
            t.decode_step_s * 1e3,
            t.bound
        );
        errors.push((id.clone(), err));
    }
    // Every call within 25 %, the median within 10 %.
    for (id, e) in &errors {
        assert!(e.abs() <= 0.25, "{id}: {:+.1} %", e * 100.0);
    }
    let mut sorted: Vec<f64> = errors.iter().map(|(_, e)| *e).collect();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert!(
        sorted[1].abs() <= 0.10,
        "median {:+.1} %",
        sorted[1] * 100.0
    );
}

/// The static-cache run at 1,024 prompt tokens by hand (`throughput::infer::eager`): 1,461 ops
/// × 20.5 µs = 29.95 ms, HF's Python 32 × 79 µs = 2.53 ms, the attention over the 603,979,776 B
/// cache at 4.08 TB/s / 50 = 7.40 ms: a step of 39.88 ms, launch-bound (the weights' 16.06 GB at
/// 4.08 TB/s are 3.9 ms, under the host's 32.5 ms).
#[test]
fn static_1024_step_by_hand() {
    let t = modelled("llama8b-infer-static-b4-p1024-n128");
    let by_hand = 1461.0 * 20.5e-6 + 32.0 * 79e-6 + 603_979_776.0 * 50.0 / 4.08e12;
    assert!(
        (t.decode_step_s / by_hand - 1.0).abs() < 1e-9,
        "{}",
        t.decode_step_s
    );
    assert!((by_hand - 0.03988).abs() < 1e-5);
    assert_eq!(t.bound, "launch");
    // 4 sequences a step.
    assert!((t.decode_tokens_per_s - 4.0 / by_hand).abs() < 1e-6);
    assert!((t.generate_s - (t.prefill_s + 127.0 * by_hand)).abs() < 1e-9);
}

fn speed(job: Value) -> (InferThroughput, vramscope_core::report::Report) {
    let job: Job = serde_json::from_value(job).unwrap();
    let (input, resolved) = common::prepared(&job);
    let r = estimate(&input, &resolved).unwrap();
    match r.throughput.clone() {
        Some(Throughput::Infer(t)) => (t, r),
        other => panic!("no inference throughput: {other:?}"),
    }
}

/// Llama's ops per new token, counted from `modeling_llama.py` (`throughput::infer::eager`):
/// static cache 44 a layer (two RMSNorms of 8, q/k/v/o 4, rotary 10, cache update 2, `repeat_kv`
/// 2, the mask's bias 1, SDPA 1, `contiguous` 1, MLP 5, residuals 2), 28 for the model and 25
/// for the loop: 32 × 44 + 28 + 25 = 1,461; dynamic 41 a layer (no `repeat_kv`, no mask), 22
/// for the model: 32 × 41 + 22 + 25 = 1,359.
#[test]
fn llama_ops_per_token() {
    use vramscope_core::throughput::infer::eager::token_ops;
    let job: Job = serde_json::from_value(serde_json::json!({"model": "llama-3.1-8b"})).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let spec = model.spec.as_ref().unwrap();
    assert_eq!(token_ops(spec, true, 4), 1461.0);
    assert_eq!(token_ops(spec, false, 16), 1359.0);
}

/// vLLM replays decode as CUDA graphs: no host term. Llama-3.1-8B bf16 on an H100 (3.35 TB/s ×
/// 0.85 = 2.8475 TB/s), one sequence of 1,000 + 100 tokens: a step reads the weights (the
/// estimate's parameters) and the KV at the mean context, 1,050 tokens held in vLLM's blocks of
/// 16: 66 blocks, 1,056 × 131,072 B = 138,412,032 B. Memory-bound: 2·N FLOPs for one token are
/// microseconds.
#[test]
fn vllm_step_reads_weights_and_cache_once() {
    let (t, r) = speed(serde_json::json!({"model": "llama-3.1-8b", "task": "infer",
        "framework": "vllm", "gpu": "h100-80gb", "batch": 1, "seq": 1000, "new_tokens": 100}));
    let weights = r.per_gpu.components.parameters as f64;
    let by_hand = (weights + 138_412_032.0) / 2.8475e12;
    assert!(
        (t.decode_step_s / by_hand - 1.0).abs() < 1e-9,
        "{}",
        t.decode_step_s
    );
    assert_eq!(t.bound, "memory");
    assert!((t.generate_s - (t.prefill_s + 99.0 * by_hand)).abs() < 1e-9);
}
