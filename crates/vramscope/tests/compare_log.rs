//! `compare --job JOB LOG`: an engine's log beside the estimate, one row per figure the log
//! states. Expected figures are read off the real fixture by hand (each quoted below).

mod common;
use common::{entry, json_of_cmd, log_fixture as fixture, temp_file, vramscope};
use serde_json::{json, Value};

/// GiB as vLLM prints them (2^30, two decimals), to bytes.
fn gib(x: f64) -> u64 {
    (x * 1_073_741_824.0).round() as u64
}

/// `compare --job JOB LOG --json`, JOB being Llama-3.1-8B served by `framework` on `gpu`.
fn compare(framework: &str, gpu: &str, log: &str) -> Value {
    let job = json!({"model": "llama-3.1-8b", "task": "infer", "framework": framework,
                     "gpu": gpu});
    // One file per test: the tests of this binary run at once.
    let name = format!("job-{}.json", log.replace('/', "_"));
    let p = temp_file("cmplog", &name, job.to_string());
    let args = [
        "compare",
        "--job",
        p.to_str().unwrap(),
        &fixture(log),
        "--json",
    ];
    json_of_cmd(vramscope().args(args), &args)
}

fn row<'a>(c: &'a Value, cat: &str) -> &'a Value {
    entry(&c["rows"], "category", cat)
}

/// vLLM's V0 profiling table (vllm PR 10511's log; fixture README has the URL), serving
/// Llama-3.1-8B on an 80 GB GPU.
#[test]
fn vllm_log_beside_the_estimate() {
    let c = compare(
        "vllm",
        "h100-80gb",
        "vllm/v0-2024-12-profiling-table-pr10511.log",
    );
    assert_eq!(c["source"], "vllm-log");
    // "model weights take   14.96GiB"; the estimate's weights are Llama-3.1-8B's 8030261248
    // parameters × 2 B (bf16) = 16060522496 B = 14.957 GiB.
    let p = row(&c, "parameters");
    assert_eq!(p["measured"], gib(14.96));
    assert_eq!(p["estimated"], 16060522496u64);
    assert_eq!(p["difference"], gib(14.96) as i64 - 16060522496);
    // "non_torch_memory     1.79GiB", "PyTorch activation peak memory       1.26GiB",
    // "available_kv_cache_memory    53.29GiB".
    assert_eq!(row(&c, "cuda_context")["measured"], gib(1.79));
    assert_eq!(row(&c, "temporaries")["measured"], gib(1.26));
    assert_eq!(row(&c, "kv_pool")["measured"], gib(53.29));
    // The log states no gradients, optimizer states or allocation peak: no rows, no residual.
    assert!(c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["category"] != "gradients"));
    assert_eq!(c["residual"]["peak_allocated_difference"], Value::Null);
    assert_eq!(c["residual"]["cuda_context_not_measured"], 0);
}

/// llama.cpp's load log with two GPUs (llama.cpp PR 6122's log): the GPU holding the most,
/// CUDA1, is compared, with only the buffers the log states for it.
#[test]
fn llamacpp_log_rows_are_what_the_log_states() {
    let c = compare(
        "llama.cpp",
        "a100-80gb",
        "llamacpp/llm_load_tensors-2gpu-pr6122.log",
    );
    assert_eq!(c["source"], "llamacpp-log");
    let mib = |x: f64| (x * 1_048_576.0).round() as u64;
    // "CUDA1 buffer size = 13989.53 MiB", "CUDA1 KV buffer size =  3584.00 MiB"; CUDA1's
    // compute line is past the end of the thread's copy: no temporaries row.
    assert_eq!(row(&c, "parameters")["measured"], mib(13989.53));
    assert_eq!(row(&c, "kv_cache")["measured"], mib(3584.00));
    let rows = c["rows"].as_array().unwrap();
    assert!(
        rows.iter().all(|r| r["category"] != "temporaries"),
        "{rows:?}"
    );
    assert_eq!(c["measured"]["device"], "CUDA1");
}

/// `compare` takes the estimate's own flags (issue 31): `compare MODEL --flags FILE` answers
/// exactly what `compare --job FILE` answers for the job file holding the same fields, and a
/// lone positional is still the measurement.
#[test]
fn compare_takes_the_estimates_flags() {
    let log = format!(
        "{}/tests/fixtures/logs/vllm/v1-2025-01-serve-command-pr12569.log",
        env!("CARGO_MANIFEST_DIR").replace("crates/vramscope", "crates/measure")
    );
    let job = temp_file(
        "cmp",
        "job.json",
        r#"{"model": "llama-3.1-8b", "task": "infer", "framework": "vllm", "batch": 4}"#,
    );
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(args)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let by_file = run(&["compare", "--job", job.to_str().unwrap(), &log, "--json"]);
    let by_flags = run(&[
        "compare",
        "llama-3.1-8b",
        "--task",
        "infer",
        "--framework",
        "vllm",
        "--batch",
        "4",
        &log,
        "--json",
    ]);
    assert_eq!(by_file, by_flags);
    let e = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["compare", "--batch", "4"])
        .output()
        .unwrap();
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("FILE is required"));
}
