//! The SGLang and ollama profiles end to end: their defaults and budgets as their sources set
//! them, each expected figure worked by hand below from the sources' rules.

mod common;
use common::argv;
use common::{json_of_cmd, vramscope};
use serde_json::Value;

fn estimate(args: &[&str]) -> Value {
    json_of_cmd(vramscope().arg("estimate").args(args).arg("--json"), &args)
}

/// SGLang on an A100 80GB (85899345920 B = 81920 MiB), Llama-3.1-8B, TP 1
/// (server_args.py `_handle_gpu_memory_settings`, model_runner.py `profile_max_num_token`):
/// - chunked_prefill_size 8192 and cuda_graph_max_bs 256 (60 GiB ≤ memory < 160 GiB, TP < 4);
/// - reserved = 512 + 8192 × 1.5 + 256 × 2 + 1 × 1 / 8 × 1024 = 13440 MiB;
///   mem_fraction_static = round((81920 − 13440) / 81920, 3) = round(0.83594, 3) = 0.836;
/// - free at start = 85899345920 − the CUDA context (524288000 B, vramscope's context figure
///   for an A100 with lazy loading) = 85375057920; static share = 0.836 × that =
///   71373548421 B; weights 8030261248 params × 2 B = 16060522496; the rest 55313025925 B;
/// - one token's cell = 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131072 B;
///   max_total_num_tokens = ⌊55313025925 / 131072⌋ = 422004.
#[test]
fn sglang_budget_on_an_a100() {
    let r = estimate(&argv(
        "llama-3.1-8b --task infer --framework sglang --gpu a100-80gb",
    ));
    let e = &r["engine"];
    assert_eq!(e["mem_fraction_static"], 0.836);
    assert_eq!(e["chunked_prefill_size"], 8192);
    assert_eq!(e["cuda_graph_max_bs"], 256);
    assert_eq!(e["cell_bytes"], 131072);
    assert_eq!(e["max_total_tokens"], 422004);
    assert_eq!(r["per_gpu"]["kv_pool"], 422004u64 * 131072);
    // context_length defaults to the model's 131072 positions; max_running_requests =
    // clamp(⌊422004 / 131072 × 512⌋ = 1648, 2048, 4096) = 2048.
    assert_eq!(e["context_length"], 131072);
    assert_eq!(e["max_running_requests"], 2048);
    assert_eq!(r["fit"]["fits"], true);
}

/// A static fraction that leaves no room for the pool: SGLang refuses to start
/// (model_runner.py "Not enough memory"), and the job does not fit.
#[test]
fn sglang_without_a_pool_does_not_start() {
    let r = estimate(&argv(
        "llama-3.1-8b --task infer --framework sglang --gpu t4-16gb",
    ));
    // The T4's 16106127360 B = 15360 MiB: chunk 2048, graphs 8; reserved = 512 + 3072 + 16 +
    // 128 = 3728 MiB; mem_fraction_static = round(11632 / 15360, 3) = 0.757; the static share
    // is under 0.757 × 15 GiB = 11.36 GiB, less than the 14.96 GiB of bf16 weights.
    assert_eq!(r["engine"]["mem_fraction_static"], 0.757);
    assert_eq!(r["engine"]["max_total_tokens"], 0);
    assert_eq!(r["fit"]["fits"], false);
    let w = r["warnings"].to_string();
    assert!(w.contains("SGLang would not start"), "{w}");
}

/// ollama's default num_ctx by VRAM (server/routes.go: 262144 from 47 GiB, 32768 from 23 GiB,
/// else 4096), capped at the model's training context (server/sched.go): Llama-3.1-8B has
/// 131072 positions.
#[test]
fn ollama_num_ctx_by_vram_tier() {
    let ctx = |gpu: &str| {
        let r = estimate(&[
            "llama-3.1-8b",
            "--task",
            "infer",
            "--framework",
            "ollama",
            "--gpu",
            gpu,
        ]);
        r["engine"]["num_ctx"].as_u64().unwrap()
    };
    assert_eq!(ctx("t4-16gb"), 4096);
    assert_eq!(ctx("rtx3090-24gb"), 32768);
    assert_eq!(ctx("a100-80gb"), 131072);
}

/// ollama without num_gpu: the most layers that leave llama-server's 1024 MiB fit margin
/// free; with it, the split as llama.cpp's for that many layers.
#[test]
fn ollama_places_layers_with_the_fit_margin() {
    let r = estimate(&argv(
        "llama-3.1-70b --task infer --framework ollama --gpu rtx3090-24gb --weights gguf:Q4_K_M",
    ));
    let e = &r["engine"];
    assert_eq!(e["layers_auto"], true);
    let ngl = e["n_gpu_layers"].as_u64().unwrap();
    assert!((1..81).contains(&ngl), "{e}");
    let total = r["per_gpu"]["device_total"].as_u64().unwrap();
    let cap = r["fit"]["capacity"].as_u64().unwrap();
    assert!(total + 1024 * 1024 * 1024 <= cap, "the margin is left free");
}
