//! `fit --json` for a serving engine carries `launch`: the engine's flags for the answer. Each
//! emitted setting is fed back into the estimator: it fits, and one step larger does not.

use assert_cmd::Command;
use serde_json::{json, Value};

fn run(args: &[&str]) -> Value {
    let out = Command::cargo_bin("vramscope")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn estimate(job: &Value) -> Value {
    let dir = std::env::temp_dir().join(format!("vramscope-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("job-{}.json", job.to_string().len()));
    std::fs::write(&p, job.to_string()).unwrap();
    run(&["estimate", "--job", p.to_str().unwrap(), "--json"])
}

/// The value after `flag` in argv.
fn arg(launch: &Value, flag: &str) -> Option<u64> {
    let argv: Vec<&str> = launch["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let i = argv.iter().position(|a| *a == flag)?;
    argv.get(i + 1)?.parse().ok()
}

#[test]
fn vllm_launch_flags_fit_and_one_token_more_does_not() {
    let fit = run(&[
        "fit",
        "llama-3.1-8b",
        "--task",
        "infer",
        "--framework",
        "vllm",
        "--gpu",
        "a100-80gb",
        "--batch",
        "8",
        "--seq",
        "4096",
        "--json",
    ]);
    let l = &fit["launch"];
    assert_eq!(l["engine"], "vllm");
    let ctx = arg(l, "--max-model-len").expect("--max-model-len");
    let seqs = arg(l, "--max-num-seqs").expect("--max-num-seqs");
    assert_eq!(seqs, 8);
    // vLLM loads the preset by its Hugging Face repo (crates/formats/data/presets/index.json).
    assert!(l["command"]
        .as_str()
        .unwrap()
        .starts_with("vllm serve meta-llama/Llama-3.1-8B "));
    for flag in [
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
    ] {
        assert!(l["why"][flag].is_string(), "why {flag}");
    }
    let job = |seq: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "vllm",
               "gpu": "a100-80gb", "batch": seqs, "seq": seq,
               "engine": {"max_model_len": ctx, "gpu_memory_utilization": 0.9}})
    };
    // 8 sequences at the emitted max-model-len fit vLLM's KV pool...
    let kv = |r: &Value| r["per_gpu"]["components"]["kv_cache"].as_u64().unwrap();
    let pool = |r: &Value| r["per_gpu"]["kv_pool"].as_u64().unwrap();
    let r = estimate(&job(ctx));
    assert!(kv(&r) <= pool(&r), "{}", r["per_gpu"]);
    // ...and one token more per sequence does not.
    let r = estimate(&job(ctx + 1));
    assert!(kv(&r) > pool(&r), "{}", r["per_gpu"]);
}

#[test]
fn llamacpp_launch_flags_fit_and_one_layer_more_does_not() {
    // A 70B model at Q4_K_M does not fit a 24 GB card whole: -ngl is the most layers that do.
    let fit = run(&[
        "fit",
        "llama-3.1-70b",
        "--task",
        "infer",
        "--framework",
        "llama.cpp",
        "--gpu",
        "rtx3090-24gb",
        "--weights",
        "gguf:Q4_K_M",
        "--seq",
        "8192",
        "--json",
    ]);
    let l = &fit["launch"];
    assert_eq!(l["engine"], "llama.cpp");
    let ngl = arg(l, "-ngl").expect("-ngl");
    let c = arg(l, "-c").expect("-c");
    assert_eq!(c, 8192, "not every layer fits: the job's own context");
    assert!(ngl < 81, "llama-3.1-70b has 80 blocks + the output layer");
    let job = |ngl: u64| {
        json!({"model": "llama-3.1-70b", "task": "infer", "framework": "llama.cpp",
               "gpu": "rtx3090-24gb", "weights": "gguf:Q4_K_M", "batch": 1, "seq": c,
               "engine": {"n_gpu_layers": ngl}})
    };
    let total = |r: &Value| r["per_gpu"]["device_total"].as_u64().unwrap();
    let cap = |r: &Value| r["fit"]["capacity"].as_u64().unwrap();
    let r = estimate(&job(ngl));
    assert!(total(&r) <= cap(&r), "-ngl {ngl} fits");
    let r = estimate(&job(ngl + 1));
    assert!(total(&r) > cap(&r), "-ngl {} does not", ngl + 1);
}

#[test]
fn llamacpp_all_layers_then_the_longest_context() {
    let fit = run(&[
        "fit",
        "llama-3.1-8b",
        "--task",
        "infer",
        "--framework",
        "llama.cpp",
        "--gpu",
        "rtx3090-24gb",
        "--seq",
        "8192",
        "--json",
    ]);
    let l = &fit["launch"];
    // llama-3.1-8b: 32 blocks + the output layer.
    assert_eq!(arg(l, "-ngl"), Some(33));
    let c = arg(l, "-c").expect("-c");
    let job = |seq: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "llama.cpp",
               "gpu": "rtx3090-24gb", "batch": 1, "seq": seq})
    };
    let total = |r: &Value| r["per_gpu"]["device_total"].as_u64().unwrap();
    let cap = |r: &Value| r["fit"]["capacity"].as_u64().unwrap();
    let r = estimate(&job(c));
    assert!(total(&r) <= cap(&r), "-c {c} fits");
    let r = estimate(&job(c + 1));
    assert!(total(&r) > cap(&r), "-c {} does not", c + 1);
}

#[test]
fn training_has_no_launch() {
    let fit = run(&[
        "fit", "gpt2", "--gpu", "t4-16gb", "--batch", "1", "--seq", "256", "--json",
    ]);
    assert!(fit.get("launch").is_none());
}

/// A key of the launch's `options` (ollama's model options).
fn option(launch: &Value, key: &str) -> Option<u64> {
    launch["options"][key].as_u64()
}

#[test]
fn sglang_launch_flags_fit_and_one_token_more_does_not() {
    let fit = run(&[
        "fit",
        "llama-3.1-8b",
        "--task",
        "infer",
        "--framework",
        "sglang",
        "--gpu",
        "a100-80gb",
        "--batch",
        "8",
        "--seq",
        "4096",
        "--json",
    ]);
    let l = &fit["launch"];
    assert_eq!(l["engine"], "sglang");
    let ctx = arg(l, "--context-length").expect("--context-length");
    assert_eq!(arg(l, "--max-running-requests"), Some(8));
    let argv: Vec<&str> = l["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let i = argv
        .iter()
        .position(|a| *a == "--mem-fraction-static")
        .unwrap();
    let mfs: f64 = argv[i + 1].parse().unwrap();
    assert!(l["command"]
        .as_str()
        .unwrap()
        .starts_with("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B "));
    let job = |seq: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "sglang",
               "gpu": "a100-80gb", "batch": 8, "seq": seq,
               "engine": {"mem_fraction_static": mfs, "context_length": ctx,
                          "max_running_requests": 8}})
    };
    let kv = |r: &Value| r["per_gpu"]["components"]["kv_cache"].as_u64().unwrap();
    let pool = |r: &Value| r["per_gpu"]["kv_pool"].as_u64().unwrap();
    // 8 sequences at the emitted context fit SGLang's token pool and the GPU...
    let r = estimate(&job(ctx));
    assert!(kv(&r) <= pool(&r), "{}", r["per_gpu"]);
    assert_eq!(r["fit"]["fits"], true, "{}", r["warnings"]);
    // ...and one token more per sequence does not fit the pool.
    let r = estimate(&job(ctx + 1));
    assert!(kv(&r) > pool(&r), "{}", r["per_gpu"]);
}

#[test]
fn ollama_launch_options_fit_and_one_layer_more_does_not() {
    // A 70B model at Q4_K_M does not fit a 24 GiB card whole: num_gpu is the most layers that
    // do at ollama's default num_ctx for 24 GiB (32768: server/routes.go, 23 GiB ≤ VRAM < 47).
    let fit = run(&[
        "fit",
        "llama-3.1-70b",
        "--task",
        "infer",
        "--framework",
        "ollama",
        "--gpu",
        "rtx3090-24gb",
        "--weights",
        "gguf:Q4_K_M",
        "--json",
    ]);
    let l = &fit["launch"];
    assert_eq!(l["engine"], "ollama");
    let ngl = option(l, "num_gpu").expect("num_gpu");
    let c = option(l, "num_ctx").expect("num_ctx");
    assert_eq!(
        c, 32768,
        "not every layer fits: ollama's default context for 24 GiB"
    );
    assert!(ngl < 81, "llama-3.1-70b has 80 blocks + the output layer");
    assert!(l["argv"]
        .as_array()
        .unwrap()
        .contains(&json!("OLLAMA_CONTEXT_LENGTH=32768")));
    let job = |ngl: u64| {
        json!({"model": "llama-3.1-70b", "task": "infer", "framework": "ollama",
               "gpu": "rtx3090-24gb", "weights": "gguf:Q4_K_M", "batch": 1, "seq": 2048,
               "engine": {"num_gpu": ngl, "num_ctx": c}})
    };
    let total = |r: &Value| r["per_gpu"]["device_total"].as_u64().unwrap();
    let cap = |r: &Value| r["fit"]["capacity"].as_u64().unwrap();
    let r = estimate(&job(ngl));
    assert!(total(&r) <= cap(&r), "num_gpu {ngl} fits");
    let r = estimate(&job(ngl + 1));
    assert!(total(&r) > cap(&r), "num_gpu {} does not", ngl + 1);
}

#[test]
fn ollama_all_layers_then_the_longest_num_ctx() {
    let fit = run(&[
        "fit",
        "llama-3.1-8b",
        "--task",
        "infer",
        "--framework",
        "ollama",
        "--gpu",
        "rtx3090-24gb",
        "--json",
    ]);
    let l = &fit["launch"];
    // llama-3.1-8b: 32 blocks + the output layer.
    assert_eq!(option(l, "num_gpu"), Some(33));
    let c = option(l, "num_ctx").expect("num_ctx");
    let job = |c: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "ollama",
               "gpu": "rtx3090-24gb", "batch": 1, "seq": 2048,
               "engine": {"num_gpu": 33, "num_ctx": c}})
    };
    let total = |r: &Value| r["per_gpu"]["device_total"].as_u64().unwrap();
    let cap = |r: &Value| r["fit"]["capacity"].as_u64().unwrap();
    let r = estimate(&job(c));
    assert!(total(&r) <= cap(&r), "num_ctx {c} fits");
    let r = estimate(&job(c + 1));
    assert!(total(&r) > cap(&r), "num_ctx {} does not", c + 1);
}
