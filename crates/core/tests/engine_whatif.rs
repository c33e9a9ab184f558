//! The engine-specific what-if rows of SGLang and ollama (the rows vLLM and llama.cpp have:
//! KV dtype, context, memory fraction / layers on the GPU): each row is re-estimated here from
//! the job with the row's change written into its JSON, and the savings the engines' rules fix
//! exactly are worked by hand.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::{what_if, WhatIf};
use vramscope_core::job::{Job, ResolvedJob};

fn load(job: &Value) -> (ModelInput, ResolvedJob) {
    let job: Job = serde_json::from_value(job.clone()).unwrap();
    common::prepared(&job)
}

fn device_total(job: &Value) -> u64 {
    let (m, j) = load(job);
    estimate(&m, &j)
        .unwrap()
        .per_gpu
        .peaks
        .device_total
        .unwrap()
}

fn row<'a>(rows: &'a [WhatIf], name: &str) -> &'a WhatIf {
    rows.iter()
        .find(|r| r.technique == name)
        .unwrap_or_else(|| panic!("no row {name}: {rows:?}"))
}

/// `job` with `field` set (an `engine` key when `engine` is true).
fn with(job: &Value, field: &str, v: Value, engine: bool) -> Value {
    let mut j = job.clone();
    if engine {
        j["engine"][field] = v;
    } else {
        j[field] = v;
    }
    j
}

/// What a what-if row should say: its name, its flags, the change it writes into the job
/// (`field`, value, an `engine` key or not; see [`with`]) and what it saves.
struct Expect {
    name: &'static str,
    flags: [&'static str; 2],
    change: (&'static str, Value, bool),
    saved: Saved,
}

/// A row's saving in bytes: worked by hand, whatever the job's estimate less the re-estimate
/// is, or only more than nothing.
enum Saved {
    Exact(i64),
    BaseLessAgain,
    Positive,
}

/// Asserts each of `expect` against `job`'s what-if rows: the flags, the device total equal to
/// the job re-estimated with the row's change written in, and the saving; a failure names the
/// row.
fn assert_rows(job: &Value, expect: &[Expect]) {
    let (m, j) = load(job);
    let rows = what_if(&m, &j).unwrap();
    let base = device_total(job) as i64;
    for e in expect {
        let name = e.name;
        let r = row(&rows, name);
        assert_eq!(r.flags, e.flags, "{name}");
        let (field, v, engine) = &e.change;
        let again = device_total(&with(job, field, v.clone(), *engine));
        assert_eq!(r.device_total, Some(again), "{name}");
        let saved = r.saved.unwrap_or_else(|| panic!("{name}: no saving"));
        match e.saved {
            Saved::Exact(b) => assert_eq!(saved, b, "{name}"),
            Saved::BaseLessAgain => assert_eq!(saved, base - again as i64, "{name}"),
            Saved::Positive => assert!(saved > 0, "{name}: {saved}"),
        }
    }
}

/// Llama-3.1-8B under SGLang on an A100 80GB, TP 1, a 4000-token prompt + 96 generated.
/// From `engines_cli.rs`'s hand calculation: the token pool is 422004 tokens of 131072 B, the
/// free memory at start 85375057920 B, weights 16060522496 B, mem_fraction_static 0.836.
/// - context_length 131072 (the model's maximum) → the job's 4096: max_running_requests =
///   clamp(⌊422004 / 131072 × 512⌋ = 1648, 2048, 4096) = 2048 before and clamp(⌊422004 /
///   4096 × 512⌋ = 52750, …) = 4096 after; the request table (rows + 1) × (context + 4) × 4 B
///   is 2049 × 131076 × 4 = 1074298896 B before, 4097 × 4100 × 4 = 67190800 B after: saved
///   1074298896 − 67190800 = 1007108096 B.
/// - mem_fraction_static 0.836 + 0.05 = 0.886: pool = ⌊(⌊85375057920 × 0.886⌋ =
///   75642301317 − 16060522496) / 131072⌋ = ⌊59581778821 / 131072⌋ = 454572 tokens
///   (454572 × 131072 = 59581661184), 32568 more than 422004: 32568 × 131072 = 4268752896 B
///   more on the device (the request table stays at 2048 rows: ⌊454572 / 131072 × 512⌋ =
///   1775 → 2048).
#[test]
fn sglang_rows_re_estimate() {
    let job = json!({"model": "llama-3.1-8b", "task": "infer", "framework": "sglang",
                     "gpu": "a100-80gb", "seq": 4000, "new_tokens": 96});
    let expect = [
        Expect {
            name: "SGLang context_length = the job's context",
            flags: ["--max-model-len", "4096"],
            change: ("context_length", json!(4096), true),
            saved: Saved::Exact(1_074_298_896 - 67_190_800),
        },
        Expect {
            name: "SGLang mem_fraction_static +0.05",
            flags: ["--mem-fraction-static", "0.886"],
            change: ("mem_fraction_static", json!(0.886), true),
            saved: Saved::Exact(-4_268_752_896),
        },
        Expect {
            name: "8-bit KV cache",
            flags: ["--kv-dtype", "fp8_e5m2"],
            change: ("kv_dtype", json!("fp8_e5m2"), false),
            saved: Saved::BaseLessAgain,
        },
    ];
    assert_rows(&job, &expect);
}

/// Llama-3.1-8B under ollama on an A100 80GB with every layer on the GPU (`num_gpu` 33) and
/// flash attention (no score matrix in the compute buffer): ollama's default num_ctx there is
/// min(262144, the model's 131072) = 131072 (`serving.rs`). One token's f16 KV is 32 layers ×
/// 8 KV heads × 128 × 2 (K, V) × 2 B = 131072 B (65536 values).
/// - num_ctx → the job's 8192: (131072 − 8192) × 131072 B = 16106127360 B saved.
/// - q8_0 KV (34 B per 32 values): 65536 × 131072 / 32 × 34 = 9126805504 B against
///   17179869184 B in f16: 8053063680 B saved.
#[test]
fn ollama_rows_re_estimate() {
    let job = json!({"model": "llama-3.1-8b", "task": "infer", "framework": "ollama",
                     "gpu": "a100-80gb", "seq": 8000, "new_tokens": 192,
                     "attention": "flash", "engine": {"num_gpu": 33}});
    let expect = [
        Expect {
            name: "ollama num_ctx = the job's context",
            flags: ["--max-model-len", "8192"],
            change: ("num_ctx", json!(8192), true),
            saved: Saved::Exact(16_106_127_360),
        },
        Expect {
            name: "8-bit KV cache",
            flags: ["--kv-dtype", "q8_0"],
            change: ("kv_dtype", json!("q8_0"), false),
            saved: Saved::Exact(17_179_869_184 - 9_126_805_504),
        },
        Expect {
            name: "4-bit KV cache",
            flags: ["--kv-dtype", "q4_0"],
            change: ("kv_dtype", json!("q4_0"), false),
            saved: Saved::BaseLessAgain,
        },
        // Half of the 32 blocks on the GPU (`num_gpu` 16), the rest in host RAM.
        Expect {
            name: "llama.cpp: 8/16 of the layers on the GPU",
            flags: ["--n-gpu-layers", "16"],
            change: ("n_gpu_layers", json!(16), true),
            saved: Saved::Positive,
        },
    ];
    assert_rows(&job, &expect);
}

/// vLLM's rows (issue 31, item 3): the engine preallocates its pool from its share of the GPU,
/// so a smaller KV or weight format saves no device bytes; the gain is tokens in the pool and
/// requests at once. Qwen2.5-32B on two L40S 48GB with TP 2: a token is 2 (K, V) × 4 KV heads
/// × 128 × 64 layers per GPU = 65,536 values, 131,072 B in bf16 (a 16-token block 2 MiB),
/// 65,536 B in fp8 (a block 1 MiB). The job's pool is 4,192 blocks (67,072 tokens); with fp8
/// the same bytes (and the remainder under one bf16 block) are cut into 1 MiB blocks: at least
/// 2 × 4,192 = 8,384 and fewer than 8,384 + 2, so 134,144 ≤ tokens < 134,176, and ⌊blocks /
/// 128⌋ = 65 requests of 2,048 tokens (128 blocks each) at once, against ⌊4,192 / 128⌋ = 32.
///
/// The advice (the job does not start: one request of the model's 131,072 positions needs 16
/// GiB of KV per GPU, the pool holds 8 GiB) first lowers max_model_len to what the pool holds,
/// 67,072 (what `fit` launches with), not to the job's 2,048; re-run with its flags, it starts.
#[test]
fn vllm_rows_show_tokens_not_bytes() {
    let job = json!({"model": "qwen2.5-32b", "task": "infer", "framework": "vllm",
                     "gpu": "l40s-48gb", "parallel": {"gpus": 2, "tp": 2}});
    let (m, j) = load(&job);
    let rows = what_if(&m, &j).unwrap();
    let fp8 = row(&rows, "8-bit KV cache");
    assert_eq!(fp8.flags, ["--kv-dtype", "fp8"]);
    let tokens = fp8.kv_tokens.unwrap();
    assert!((134_144..134_176).contains(&tokens), "{fp8:?}");
    assert_eq!(fp8.kv_tokens_gained, Some(tokens as i64 - 67_072));
    assert_eq!(fp8.concurrent_requests, Some(65));
    assert!(fp8.saved.unwrap().unsigned_abs() < 2 << 20, "{fp8:?}");
    let len = row(
        &rows,
        "vLLM max_model_len = the longest request the KV pool holds",
    );
    assert_eq!(len.flags, ["--max-model-len", "67072"]);
    assert_eq!(len.kv_tokens, Some(67_072));
    assert_eq!(len.concurrent_requests, Some(32));

    let advice = vramscope_core::advice::advise(&m, &j).unwrap();
    assert_eq!(advice[0].flags, ["--max-model-len", "67072"]);
    let again = with(&job, "max_model_len", json!(67_072), true);
    let (m2, j2) = load(&again);
    let r = estimate(&m2, &j2).unwrap();
    assert!(r.fit.as_ref().unwrap().fits, "{:?}", r.warnings);
    assert_eq!(r.per_gpu.peaks.device_total, Some(advice[0].device_total));
}
