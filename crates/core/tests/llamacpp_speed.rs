//! llama.cpp's decode speed with layers split between GPU and host by `-ngl`
//! (`throughput::infer::split`): the GPU's layers at the GPU's bandwidth, the host's at the
//! host's, one after the other. Worked by hand; never faster with fewer layers on the GPU; and
//! `fit` and `estimate` read it from the same function.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::fit;
use vramscope_core::job::ResolvedJob;
use vramscope_core::throughput::{InferThroughput, Throughput};

fn resolved(job: &Value) -> (ModelInput, ResolvedJob) {
    common::prepared_json(job)
}

fn speed(job: &Value) -> InferThroughput {
    let (m, j) = resolved(job);
    match estimate(&m, &j).unwrap().throughput {
        Some(Throughput::Infer(t)) => t,
        other => panic!("no inference throughput: {other:?}"),
    }
}

fn job(model: &str, weights: &str, batch: u64, ngl: u64, extra: Value) -> Value {
    let mut j = json!({"model": model, "task": "infer", "framework": "llama.cpp",
           "gpu": "rtx4090-24gb", "weights": weights, "batch": batch, "seq": 4000,
           "new_tokens": 96, "engine": {"n_gpu_layers": ngl}});
    if let Value::Object(e) = extra {
        for (k, v) in e {
            j["engine"][k] = v;
        }
    }
    j
}

/// Llama-3.1-8B in bf16, one sequence of 4000 + 96 tokens, `-ngl 16`: blocks 16–31 on the GPU
/// (218,112,000 parameters each, 436,224,000 B), blocks 0–15, the final norm (8,192 B) and the
/// untied output layer (128,256 × 4,096 × 2 B = 1,050,673,152 B) on the host: GPU 16 ×
/// 436,224,000 = 6,979,584,000 B; host 6,979,584,000 + 1,050,673,152 + 8,192 = 8,030,265,344 B
/// (the embedding, also on the host, is one row a token: left out). The KV at the mean context
/// 4,048 tokens × 131,072 B = 530,579,456 B, half on each side: 265,289,728 B.
/// GPU: 7,244,873,728 B / (1,008 GB/s × 0.85) = 8.4557 ms; host: 8,295,555,072 B / (89.6 GB/s ×
/// 0.85, dual-channel DDR5-5600) = 108.92 ms; a step 117.38 ms, 8.52 tokens/s, bound by the
/// host's layers. With `engine.host_memory_gbps` 200 the host's part is 48.80 ms.
#[test]
fn a_split_step_by_hand() {
    let t = speed(&job("llama-3.1-8b", "none", 1, 16, json!({})));
    let gpu: f64 = 7_244_873_728.0 / (1008e9 * 0.85);
    let host: f64 = 8_295_555_072.0 / (89.6e9 * 0.85);
    assert!((gpu - 8.4557e-3).abs() < 1e-6 && (host - 108.92e-3).abs() < 1e-5);
    assert!(
        (t.decode_step_s / (gpu + host) - 1.0).abs() < 1e-9,
        "{}",
        t.decode_step_s
    );
    assert_eq!(t.bound, "offload");
    let fast = speed(&job(
        "llama-3.1-8b",
        "none",
        1,
        16,
        json!({"host_memory_gbps": 200}),
    ));
    let host200: f64 = 8_295_555_072.0 / (200e9 * 0.85);
    assert!((host200 - 48.80e-3).abs() < 1e-5);
    assert!((fast.decode_step_s / (gpu + host200) - 1.0).abs() < 1e-9);
}

/// Every layer moved to the host makes a step slower and a prompt slower: decode and prefill
/// tokens/s never rise as `-ngl` falls (the 70B at Q4_K_M on a 24 GB card rose from 18
/// to 439 tokens/s). Over both models, batches 1 and 4, and every `-ngl`.
#[test]
fn fewer_gpu_layers_are_never_faster() {
    for (model, weights, layers) in [
        ("llama-3.1-8b", "gguf:q4_k_m", 32u64),
        ("llama-3.1-70b", "gguf:q4_k_m", 80),
    ] {
        for batch in [1u64, 4] {
            let mut prev: Option<InferThroughput> = None;
            for ngl in (0..=layers + 1).rev() {
                let t = speed(&job(model, weights, batch, ngl, json!({})));
                if let Some(p) = &prev {
                    assert!(
                        t.decode_tokens_per_s <= p.decode_tokens_per_s,
                        "{model} b{batch} -ngl {ngl}: {} > {}",
                        t.decode_tokens_per_s,
                        p.decode_tokens_per_s
                    );
                    assert!(t.prefill_tokens_per_s <= p.prefill_tokens_per_s);
                }
                prev = Some(t);
            }
        }
    }
}

/// `fit`'s speed at its answer is `estimate`'s at the answer's batch and `-ngl`, and each row
/// of its `-ngl` trade-off is `estimate`'s at that `-ngl`.
#[test]
fn fit_and_estimate_agree() {
    let mut j = job("llama-3.1-70b", "gguf:q4_k_m", 1, 0, json!({}));
    j["engine"] = json!({});
    let (m, r) = resolved(&j);
    let answer = fit(&m, &r).unwrap();
    let ngl = answer.max_gpu_layers.unwrap();
    let batch = answer.max_batch.unwrap();
    let mut at = job("llama-3.1-70b", "gguf:q4_k_m", batch, ngl, json!({}));
    let est = speed(&at);
    match &answer.throughput_at_max_batch {
        Some(Throughput::Infer(t)) => assert_eq!(t, &est),
        other => panic!("{other:?}"),
    }
    assert_eq!(answer.gpu_layers_speed.first().unwrap().n_gpu_layers, ngl);
    assert_eq!(answer.gpu_layers_speed.last().unwrap().n_gpu_layers, 0);
    for row in &answer.gpu_layers_speed {
        at["batch"] = json!(1);
        at["engine"]["n_gpu_layers"] = json!(row.n_gpu_layers);
        let e = speed(&at);
        assert_eq!(row.decode_tokens_per_s, e.decode_tokens_per_s);
        assert_eq!(row.generate_s, e.generate_s);
        assert!(row.fits);
    }
    let rates: Vec<f64> = answer
        .gpu_layers_speed
        .iter()
        .map(|r| r.decode_tokens_per_s)
        .collect();
    assert!(rates.windows(2).all(|w| w[1] <= w[0]), "{rates:?}");
}
