//! A vLLM log's KV count in bytes (`analyze`, `compare --job`) and `fit --measured LOG`, on
//! the real fixtures of `crates/measure/tests/fixtures/logs` (each cited in its README). Every
//! expected figure is read off the log line quoted beside it and worked by hand.

mod common;
use common::{json_of_cmd, log_fixture as fixture, temp_file, vramscope};
use serde_json::{json, Value};

fn run(args: &[&str]) -> Value {
    json_of_cmd(vramscope().args(args).arg("--json"), &args)
}

fn job_file(name: &str, job: &Value) -> String {
    let p = temp_file("logfit", name, job.to_string());
    p.to_string_lossy().into_owned()
}

/// One vLLM block of Llama-3.1-8B at bf16: 16 tokens × 32 layers × 8 KV heads × 128 × 2
/// (K, V) × 2 B = 16 × 131072 = 2097152 B.
const BLOCK: u64 = 2_097_152;

/// "GPU KV cache size: 158,656 tokens" (PR 17122) beside a Llama-3.1-8B job: 158656 / 16 =
/// 9916 blocks × 2097152 B = 20795359232 B, and the kv_pool row compares it.
#[test]
fn compare_sizes_a_v1_token_count_with_the_job() {
    let job = json!({"model": "llama-3.1-8b", "task": "infer", "framework": "vllm",
                     "gpu": "h100-80gb"});
    let p = job_file("v1.json", &job);
    let c = run(&[
        "compare",
        "--job",
        &p,
        &fixture("vllm/v1-2025-04-pr17122.log"),
    ]);
    assert_eq!(c["measured"]["kv_pool"], 9916 * BLOCK);
    let row = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["category"] == "kv_pool")
        .expect("a kv_pool row");
    assert_eq!(row["measured"], 20_795_359_232u64);
    assert!(c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().starts_with("kv_pool is derived")));
}

/// `analyze` alone: "# GPU blocks: 10039" (PR 6234) names no model: the count, no bytes, a
/// note. The synthetic log whose engine-config line names meta-llama/Llama-3.1-8B (a preset:
/// no Hub) at bf16, TP 1, with "# GPU blocks: 2000": 2000 × 2097152 = 4194304000 B.
#[test]
fn analyze_sizes_blocks_only_from_the_logs_own_model() {
    let a = run(&["analyze", &fixture("vllm/v0-2024-07-tp4-pr6234.log")]);
    assert_eq!(a["per_gpu"]["kv_pool"], Value::Null);
    assert_eq!(a["engine"]["num_gpu_blocks"], 10039);
    assert!(a["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("only as 10039 GPU blocks")));
    let s = run(&["analyze", &fixture("vllm/synthetic-config-and-blocks.log")]);
    assert_eq!(s["per_gpu"]["kv_pool"], 4_194_304_000u64);
    assert_eq!(s["engine"]["kv_pool_from"], "num_gpu_blocks");
    assert_eq!(s["engine"]["kv_block_bytes"], BLOCK);
}

/// `fit --measured` on vLLM's profiling table (PR 10511): "available_kv_cache_memory
/// 53.29GiB" = 5329 × 2^30 / 100 = 57219701801 B, cut into whole blocks: ⌊57219701801 /
/// 2097152⌋ = 27284 blocks = 57218695168 B = 436544 tokens.
/// - at a 4096-token context (4000 + 96) one sequence is 4096 × 131072 = 536870912 B:
///   ⌊57218695168 / 536870912⌋ = 106 sequences;
/// - at 4 sequences each holds ⌊27284 / 4⌋ = 6821 blocks = 109136 tokens.
///
/// "model weights take 14.96GiB" = 16063177687 B is listed beside the estimate's 8030261248
/// × 2 B = 16060522496 B.
#[test]
fn fit_on_a_vllm_log_uses_its_pool() {
    let log = fixture("vllm/v0-2024-12-profiling-table-pr10511.log");
    let mut base = common::argv(
        "fit llama-3.1-8b --task infer --framework vllm --gpu h100-80gb --seq 4000 \
         --new-tokens 96 --measured",
    );
    base.push(&log);
    let f = run(&base);
    assert_eq!(f["source"], "vllm-log");
    assert_eq!(f["max_batch"], 106);
    let rows = f["from_log"].as_array().unwrap();
    let weights = rows.iter().find(|r| r["figure"] == "parameters").unwrap();
    assert_eq!(weights["log"], 16_063_177_687u64);
    assert_eq!(weights["estimated"], 16_060_522_496u64);
    let pool = rows.iter().find(|r| r["figure"] == "kv_pool").unwrap();
    assert_eq!(pool["log"], 57_219_701_801u64);
    let mut four = base.clone();
    four.extend(["--batch", "4"]);
    assert_eq!(run(&four)["max_context"], 109_136);
}

/// A PyTorch OOM message states no breakdown to fit with: a clear error, exit 2.
#[test]
fn fit_on_an_oom_message_is_refused() {
    let out = vramscope()
        .args([
            "fit",
            "llama-3.1-8b",
            "--gpu",
            "a100-80gb",
            "--measured",
            &fixture("torch-oom/torch1.x-reserved-maddog11.txt"),
        ])
        .output()
        .unwrap();
    let err = common::refused_with(&out, &"fit on an OOM message");
    assert!(err.contains("out-of-memory message"), "{err}");
}

/// `fit --measured` on llama.cpp's two-GPU load log (PR 6122): the most-loaded device, CUDA1,
/// "CUDA1 buffer size = 13989.53 MiB" = 1398953 × 2^20 / 100 = 14669085409 B and "CUDA1 KV
/// buffer size = 3584.00 MiB" = 3758096384 B for n_ctx 4096, i.e. 3758096384 / 4096 =
/// 917504 B per context cell. The copy stops before CUDA1's compute line: that one figure is
/// the estimate's, and a note says so. Both limits divide the same room by the same 917504 B
/// per cell, so the sequences at 4096 tokens are the tokens at one sequence / 4096, floored.
#[test]
fn fit_on_a_llamacpp_log_uses_its_buffers() {
    let log = fixture("llamacpp/llm_load_tensors-2gpu-pr6122.log");
    let args = |batch: &'static str, seq: &'static str| {
        run(&[
            "fit",
            "llama-3.1-8b",
            "--task",
            "infer",
            "--framework",
            "llama.cpp",
            "--gpu",
            "a100-80gb",
            "--batch",
            batch,
            "--seq",
            seq,
            "--new-tokens",
            "0",
            "--measured",
            &log,
        ])
    };
    let at_4096 = args("1", "4096");
    assert_eq!(at_4096["source"], "llamacpp-log");
    let rows = at_4096["from_log"].as_array().unwrap();
    let get = |f: &str| {
        rows.iter()
            .find(|r| r["figure"] == f)
            .map(|r| r["log"].clone())
    };
    assert_eq!(get("parameters"), Some(json!(14_669_085_409u64)));
    assert_eq!(get("kv_cache"), Some(json!(3_758_096_384u64)));
    assert_eq!(get("temporaries"), None);
    assert!(at_4096["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("no compute buffer")));
    let tokens = at_4096["max_context"].as_u64().unwrap();
    assert_eq!(at_4096["max_batch"].as_u64().unwrap(), tokens / 4096);
}
