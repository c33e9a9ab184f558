//! `fit --json` for a serving engine carries `launch`: the engine's flags for the answer. Each
//! emitted setting is fed back into the estimator: it fits, and one step larger does not.

mod common;
use common::argv;
use common::{json_of_cmd, run_json as run, strs, temp_file, vramscope};
use serde_json::{json, Value};

fn estimate(job: &Value) -> Value {
    let name = format!("job-{}.json", job.to_string().len());
    let p = temp_file("launch", &name, job.to_string());
    run(&["estimate", "--job", p.to_str().unwrap(), "--json"])
}

/// The value after `flag` in argv.
fn arg(launch: &Value, flag: &str) -> Option<u64> {
    let argv = strs(&launch["argv"]);
    let i = argv.iter().position(|a| *a == flag)?;
    argv.get(i + 1)?.parse().ok()
}

/// Checks `fit`'s launch line: `vllm serve SERVED …` with `--max-model-len` and
/// `--max-num-seqs` at the values given.
fn assert_vllm_serves(fit: &Value, served: &str, max_model_len: u64, max_num_seqs: u64) {
    let l = &fit["launch"];
    let command = l["command"].as_str().unwrap();
    let want = format!("vllm serve {served} ");
    assert!(command.starts_with(&want), "{command}");
    assert_eq!(arg(l, "--max-model-len"), Some(max_model_len));
    assert_eq!(arg(l, "--max-num-seqs"), Some(max_num_seqs));
}

/// `vramscope` run with the Hub out of reach (no cache, offline): a variant's name is read as
/// its base preset.
fn run_offline(args: &[&str]) -> Value {
    let mut cmd = vramscope();
    cmd.env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", "/nonexistent/hf-cache")
        .env("VRAMSCOPE_CACHE", "/nonexistent/vramscope-cache")
        .args(args);
    json_of_cmd(&mut cmd, &args)
}

/// The vLLM job of issue 31: Qwen2.5-32B on two L40S 48GB with TP 2, at `seq` tokens and
/// `batch` sequences, with `engine` settings.
fn qwen_job(model: &str, batch: u64, seq: u64, engine: Value) -> Value {
    json!({"model": model, "task": "infer", "framework": "vllm", "gpu": "l40s-48gb",
           "parallel": {"gpus": 2, "tp": 2}, "batch": batch, "seq": seq, "engine": engine})
}

fn engine_u64(r: &Value, k: &str) -> u64 {
    r["engine"][k].as_u64().unwrap()
}

/// Whether vLLM would start: the report's verdict (a pool that cannot hold one request of
/// max_model_len is "does not fit" inside the capacity).
fn starts(r: &Value) -> bool {
    r["fit"]["fits"].as_bool().unwrap()
}

/// The launch line checked against vLLM's own argument rules (issue 31, item 1).
///
/// Qwen2.5-32B: 64 layers, 8 KV heads of 128, bf16; TP 2 keeps 4 KV heads per GPU, so a token
/// costs 2 (K, V) × 4 × 128 × 2 B × 64 layers = 131,072 B per GPU and a 16-token block
/// 2,097,152 B. vLLM's rules:
/// - `--max-model-len` ≤ the config's `max_position_embeddings` (`vllm/config/model.py`
///   `_get_and_verify_max_len` refuses more) and one request of it must fit the pool
///   (`vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`): min(limit, blocks × 16).
/// - the scheduler admits waiting requests while free blocks last and fewer than
///   `max_num_seqs` run (`vllm/v1/core/sched/scheduler.py` `schedule`): requests of C tokens
///   at once = ⌊blocks / ⌈C / 16⌉⌋, not "the pool split per sequence".
///
/// With the pool's N blocks (the estimate's `num_blocks`; 4,192 here):
/// - base Qwen/Qwen2.5-32B (limit 131,072): --max-model-len = min(131,072, 4,192 × 16 =
///   67,072) = 67,072; --max-num-seqs at 2,048 tokens = ⌊4,192 / 128⌋ = 32;
/// - --batch 16 --seq 4096: --max-model-len still 67,072 (not 4,192 = 67,072 / 16, the pool
///   split per sequence), --max-num-seqs = ⌊4,192 / 256⌋ = 16;
/// - Qwen/Qwen2.5-32B-Instruct offline (its config says 32,768): --max-model-len 32,768.
#[test]
fn vllm_launch_follows_vllms_own_rules() {
    let args = |model: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "fit",
            model,
            "--task",
            "infer",
            "--framework",
            "vllm",
            "--gpu",
            "l40s-48gb",
            "--gpus",
            "2",
            "--tp",
            "2",
            "--json",
        ];
        a.extend_from_slice(extra);
        a
    };
    let base = estimate(&qwen_job("qwen2.5-32b", 1, 2048, json!({})));
    assert_eq!(engine_u64(&base, "block_bytes"), 2_097_152);
    let blocks = engine_u64(&base, "num_blocks");
    assert_eq!(blocks, 4192, "{}", base["engine"]);

    // The base model: the pool, not its 131,072 positions, limits one request.
    let fit = run(&args("qwen2.5-32b", &[]));
    assert_vllm_serves(&fit, "Qwen/Qwen2.5-32B", 67_072, 32);
    assert_eq!(arg(&fit["launch"], "--tensor-parallel-size"), Some(2));
    assert_eq!(fit["max_batch"], 32, "the same output's own count");
    // Fed back as the launch line sets them: vLLM starts, and 32 requests of 2,048 fit the
    // pool at once (a smaller max_num_seqs than the default 256 only shrinks the CUDA graphs,
    // so the pool is at least the one searched).
    let with = |batch: u64, engine: Value| estimate(&qwen_job("qwen2.5-32b", batch, 2048, engine));
    let launched = json!({"max_model_len": 67_072, "max_num_seqs": 32,
                          "gpu_memory_utilization": 0.9});
    let r = with(32, launched.clone());
    assert!(starts(&r), "{}", r["warnings"]);
    let kv = |r: &Value| r["per_gpu"]["components"]["kv_cache"].as_u64().unwrap();
    let pool = |r: &Value| r["per_gpu"]["kv_pool"].as_u64().unwrap();
    assert!(kv(&r) <= pool(&r));
    // On the pool the search read (vLLM's defaults): 67,072 starts, one block more does not;
    // 32 requests of 2,048 tokens fit at once, 33 do not.
    assert!(starts(&with(32, json!({"max_model_len": 67_072}))));
    assert!(!starts(&with(32, json!({"max_model_len": 67_072 + 16}))));
    let r = with(33, json!({"max_model_len": 67_072}));
    assert!(
        kv(&r) > pool(&r),
        "33 requests of 2,048 tokens need more blocks"
    );

    // 16 × 4,096: the longest request is still what one request may hold.
    let fit = run(&args("qwen2.5-32b", &["--batch", "16", "--seq", "4096"]));
    assert_eq!(arg(&fit["launch"], "--max-model-len"), Some(67_072));
    assert_eq!(arg(&fit["launch"], "--max-num-seqs"), Some(16));

    // The Instruct variant, read offline as the base preset: served by its own name, at its
    // own config's 32,768 positions.
    let fit = run_offline(&args("Qwen/Qwen2.5-32B-Instruct", &[]));
    assert_vllm_serves(&fit, "Qwen/Qwen2.5-32B-Instruct", 32_768, 32);
    assert_eq!(fit["model_max_positions"], 32_768);
}

/// A pool holding more requests than the setting it was sized with (vLLM's default
/// `max_num_seqs` 256): the launch keeps 256, since more would grow the CUDA graphs
/// (`max_capture_size` follows `max_num_seqs`) and shrink the pool it was sized on.
/// Llama-3.1-8B on an H200 at 256-token requests: weights ~15 GiB of 0.9 × 141 GiB leave
/// ~100 GiB, at 128 KiB a token (32 layers × 8 KV heads × 128 × 2 × 2 B) ~800,000 tokens =
/// ~3,100 requests of 256.
#[test]
fn vllm_max_num_seqs_stays_at_the_setting_the_pool_was_sized_with() {
    let fit = run(&argv(
        "fit llama-3.1-8b --task infer --framework vllm --gpu h200-141gb --seq 256 --json",
    ));
    assert!(
        fit["max_batch"].as_u64().unwrap() > 3000,
        "{}",
        fit["max_batch"]
    );
    assert_eq!(arg(&fit["launch"], "--max-num-seqs"), Some(256));
    assert_eq!(arg(&fit["launch"], "--max-model-len"), Some(131_072));
}

#[test]
fn llamacpp_launch_flags_fit_and_one_layer_more_does_not() {
    // A 70B model at Q4_K_M does not fit a 24 GB card whole: -ngl is the most layers that do.
    let fit = run(&argv("fit llama-3.1-70b --task infer --framework llama.cpp --gpu rtx3090-24gb --weights gguf:Q4_K_M --seq 8192 --json"));
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
    fits_then_not(job, ngl, "-ngl");
}

#[test]
fn llamacpp_all_layers_then_the_longest_context() {
    let fit = run(&argv(
        "fit llama-3.1-8b --task infer --framework llama.cpp --gpu rtx3090-24gb --seq 8192 --json",
    ));
    let l = &fit["launch"];
    // llama-3.1-8b: 32 blocks + the output layer.
    assert_eq!(arg(l, "-ngl"), Some(33));
    let c = arg(l, "-c").expect("-c");
    let job = |seq: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "llama.cpp",
               "gpu": "rtx3090-24gb", "batch": 1, "seq": seq})
    };
    fits_then_not(job, c, "-c");
}

#[test]
fn training_has_no_launch() {
    let fit = run(&[
        "fit", "gpt2", "--gpu", "t4-16gb", "--batch", "1", "--seq", "256", "--json",
    ]);
    assert!(fit.get("launch").is_none());
}

/// A report's device total.
fn total(r: &Value) -> u64 {
    r["per_gpu"]["device_total"].as_u64().unwrap()
}

/// A report's capacity (the GPU's memory).
fn cap(r: &Value) -> u64 {
    r["fit"]["capacity"].as_u64().unwrap()
}

/// The job of setting `what` at `n` fits the GPU, and at `n` + 1 does not: `n` is the most.
fn fits_then_not(job: impl Fn(u64) -> Value, n: u64, what: &str) {
    let r = estimate(&job(n));
    assert!(total(&r) <= cap(&r), "{what} {n} fits");
    let r = estimate(&job(n + 1));
    assert!(total(&r) > cap(&r), "{what} {} does not", n + 1);
}

/// A key of the launch's `options` (ollama's model options).
fn option(launch: &Value, key: &str) -> Option<u64> {
    launch["options"][key].as_u64()
}

/// SGLang's token pool is shared as vLLM's is (issue 31): a request is cut at
/// min(context_length, pool tokens) − 1 (`tp_worker.py` `max_req_len`) and the scheduler admits
/// requests while free tokens last. Llama-3.1-8B on an A100 80GB: a token is 32 layers × 8 KV
/// heads × 128 × 2 (K, V) × 2 B = 131,072 B; the pool holds 422,004 tokens (`engine_whatif.rs`'
/// hand calculation), so --context-length = min(131,072, 422,004) = 131,072, the model's own,
/// not the 4,096 × 8 split; --max-running-requests = ⌊422,004 / 4,096⌋ = 103 requests of 4,096.
#[test]
fn sglang_launch_follows_sglangs_own_rules() {
    let fit = run(&argv("fit llama-3.1-8b --task infer --framework sglang --gpu a100-80gb --batch 8 --seq 4096 --json"));
    let l = &fit["launch"];
    assert_eq!(l["engine"], "sglang");
    assert_eq!(arg(l, "--context-length"), Some(131_072));
    assert_eq!(arg(l, "--max-running-requests"), Some(103));
    let argv = strs(&l["argv"]);
    let i = argv
        .iter()
        .position(|a| *a == "--mem-fraction-static")
        .unwrap();
    let mfs: f64 = argv[i + 1].parse().unwrap();
    assert!(l["command"]
        .as_str()
        .unwrap()
        .starts_with("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B "));
    let job = |batch: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "sglang",
               "gpu": "a100-80gb", "batch": batch, "seq": 4096,
               "engine": {"mem_fraction_static": mfs, "context_length": 131_072,
                          "max_running_requests": 103}})
    };
    let kv = |r: &Value| r["per_gpu"]["components"]["kv_cache"].as_u64().unwrap();
    let pool = |r: &Value| r["per_gpu"]["kv_pool"].as_u64().unwrap();
    // 103 requests of 4,096 fit the pool as launched, and the engine fits the GPU...
    let r = estimate(&job(103));
    assert_eq!(r["engine"]["max_total_tokens"], 422_004, "{}", r["engine"]);
    assert!(kv(&r) <= pool(&r), "{}", r["per_gpu"]);
    assert_eq!(r["fit"]["fits"], true, "{}", r["warnings"]);
    // ...and 104 do not fit the pool at once.
    let r = estimate(&job(104));
    assert!(kv(&r) > pool(&r), "{}", r["per_gpu"]);
}

#[test]
fn ollama_launch_options_fit_and_one_layer_more_does_not() {
    // A 70B model at Q4_K_M does not fit a 24 GiB card whole: num_gpu is the most layers that
    // do at ollama's default num_ctx for 24 GiB (32768: server/routes.go, 23 GiB ≤ VRAM < 47).
    let fit = run(&argv("fit llama-3.1-70b --task infer --framework ollama --gpu rtx3090-24gb --weights gguf:Q4_K_M --json"));
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
    // ollama places the layers itself leaving llama-server's fit margin (--fit-target, 1024
    // MiB) free: num_gpu is that count, the one `estimate` reports ollama picking (issue 31:
    // fit said 38 where estimate said 36), so it fits with 1 GiB to spare and one layer more
    // does not.
    let margin = 1024 << 20;
    let r = estimate(&job(ngl));
    assert!(
        total(&r) + margin <= cap(&r),
        "num_gpu {ngl} fits with the margin"
    );
    let r = estimate(&job(ngl + 1));
    assert!(total(&r) + margin > cap(&r), "num_gpu {} does not", ngl + 1);
    let mut auto = job(0);
    auto["engine"] = json!({"num_ctx": c});
    let r = estimate(&auto);
    assert_eq!(
        r["engine"]["n_gpu_layers"], ngl,
        "estimate's own choice: {}",
        r["engine"]
    );
}

#[test]
fn ollama_all_layers_then_the_longest_num_ctx() {
    let fit = run(&argv(
        "fit llama-3.1-8b --task infer --framework ollama --gpu rtx3090-24gb --json",
    ));
    let l = &fit["launch"];
    // llama-3.1-8b: 32 blocks + the output layer.
    assert_eq!(option(l, "num_gpu"), Some(33));
    let c = option(l, "num_ctx").expect("num_ctx");
    let job = |c: u64| {
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "ollama",
               "gpu": "rtx3090-24gb", "batch": 1, "seq": 2048,
               "engine": {"num_gpu": 33, "num_ctx": c}})
    };
    fits_then_not(job, c, "num_ctx");
}
