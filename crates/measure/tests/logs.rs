//! The log readers on real logs from public threads (tests/fixtures/logs/*/README.md cites
//! each). Every expected figure is read off the quoted log line by hand and converted here with
//! the engine's unit (vLLM's "GB" and every "GiB" = 2^30, "MiB" = 2^20), never taken from the
//! reader's output.

mod common;
use common::contract_components::{ALLOCATED, OUTSIDE};

use serde_json::{json, Value};
use std::path::PathBuf;
use vramscope_measure::logs::{analyze_any_bytes, detect, read_log, LogKind, LogReport, Measured};

fn fixture(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn read(rel: &str) -> LogReport {
    read_log(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn gib(x: f64) -> u64 {
    (x * 1_073_741_824.0).round() as u64
}

fn mib(x: f64) -> u64 {
    (x * 1_048_576.0).round() as u64
}

fn engine(r: &LogReport, key: &str) -> Value {
    r.engine
        .as_ref()
        .and_then(|e| e.get(key).cloned())
        .unwrap_or(Value::Null)
}

// ---------------------------------------------------------------- vLLM

/// Asserts a vLLM memory profile as read: `[weights, non-torch memory, activation peak, KV
/// cache, total GPU memory]` in GiB as the log prints them, and the utilization.
fn assert_vllm_profile(r: &LogReport, gibs: [f64; 5], utilization: f64) {
    let [weights, non_torch, activations, kv, total] = gibs;
    let c = &r.per_gpu.components;
    assert_eq!(c.parameters, Some(gib(weights)));
    assert_eq!(c.cuda_context, Some(gib(non_torch)));
    assert_eq!(c.temporaries, Some(gib(activations)));
    assert_eq!(r.per_gpu.kv_pool, Some(gib(kv)));
    assert_eq!(r.fit.capacity, Some(gib(total)));
    let util = engine(r, "gpu_memory_utilization");
    assert_eq!(util, json!(utilization));
}

#[test]
fn vllm_v0_weights_and_blocks() {
    let r = read("vllm/v0-2024-07-tp4-pr6234.log");
    assert_eq!(r.source, LogKind::Vllm);
    // "Loading model weights took 6.1138 GB" (vLLM's GB = GiB)
    assert_eq!(r.per_gpu.components.parameters, Some(gib(6.1138)));
    // "# GPU blocks: 10039, # CPU blocks: 1310"
    assert_eq!(engine(&r, "num_gpu_blocks"), json!(10039));
    assert_eq!(engine(&r, "num_cpu_blocks"), json!(1310));
    assert_eq!(r.per_gpu.kv_pool, None, "the log states no KV bytes");
    common::assert_warns(&r.warnings, "partial");
}

#[test]
fn vllm_profiling_table() {
    let r = read("vllm/v0-2024-12-profiling-table-pr10511.log");
    // "model weights take   14.96GiB", "non_torch_memory     1.79GiB", "PyTorch activation
    // peak memory       1.26GiB", "available_kv_cache_memory    53.29GiB", "total_gpu_memory
    // 79.22GiB", "gpu_memory_utilization       0.90".
    assert_vllm_profile(&r, [14.96, 1.79, 1.26, 53.29, 79.22], 0.9);
}

#[test]
fn vllm_one_line_profile_and_cuda_blocks() {
    let r = read("vllm/v0-2025-01-cuda-blocks-pr12126.log");
    // "model weights take 19.86GiB; non_torch_memory takes 0.16GiB; PyTorch activation peak
    // memory takes 36.63GiB; the rest of the memory reserved for KV Cache is 14.65GiB."
    // "total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90)"
    assert_vllm_profile(&r, [19.86, 0.16, 36.63, 14.65, 79.22], 0.9);
    // "# CUDA blocks: 6001, # CPU blocks: 1638"
    assert_eq!(engine(&r, "num_gpu_blocks"), json!(6001));
    assert_eq!(engine(&r, "num_cpu_blocks"), json!(1638));
}

#[test]
fn vllm_worker_prefixes() {
    let r = read("vllm/v0-2025-04-workers-pr14447.log");
    // "(VllmWorkerProcess pid=507) ... total_gpu_memory (23.58GiB) x gpu_memory_utilization
    // (0.99) = 23.35GiB" and "model weights take 21.21GiB; ... KV Cache is 1.57GiB."
    assert_eq!(r.fit.capacity, Some(gib(23.58)));
    assert_eq!(engine(&r, "gpu_memory_utilization"), json!(0.99));
    assert_eq!(r.per_gpu.components.parameters, Some(gib(21.21)));
    assert_eq!(r.per_gpu.kv_pool, Some(gib(1.57)));
    assert_eq!(r.per_gpu.components.cuda_context, Some(gib(0.20)));
    assert_eq!(r.per_gpu.components.temporaries, Some(gib(0.37)));
}

#[test]
fn vllm_v1_tokens_and_concurrency() {
    let r = read("vllm/v1-2025-04-pr17122.log");
    // "Model loading took 14.9889 GiB and 3.652170 seconds"
    assert_eq!(r.per_gpu.components.parameters, Some(gib(14.9889)));
    // "GPU KV cache size: 158,656 tokens"
    assert_eq!(engine(&r, "kv_cache_tokens"), json!(158_656));
    // "Maximum concurrency for 32,768 tokens per request: 4.84x"
    assert_eq!(engine(&r, "max_model_len"), json!(32_768));
    assert_eq!(engine(&r, "max_concurrency"), json!(4.84));
    // The contract's vllm-log engine fields the log does not state are there, as null.
    let e = r.engine.as_ref().unwrap();
    assert_eq!(e.get("num_gpu_blocks"), Some(&Value::Null));
    assert_eq!(e.get("gpu_memory_utilization"), Some(&Value::Null));
}

#[test]
fn vllm_v1_behind_html_and_stage_prefixes() {
    let r = read("vllm/v1-2025-09-tp2-html-ragflow9856.log");
    // "[gpu_worker.py:276] Available KV cache memory: 26.13 GiB" (both TP ranks)
    assert_eq!(r.per_gpu.kv_pool, Some(gib(26.13)));
    // "GPU KV cache size: 570,848 tokens"
    assert_eq!(engine(&r, "kv_cache_tokens"), json!(570_848));
    assert_eq!(r.per_gpu.components.parameters, None);

    let r = read("vllm/v1-2026-02-omni-pr1160.log");
    // "Available KV cache memory: 100.43 GiB", "GPU KV cache size: 2,925,232 tokens",
    // "Maximum concurrency for 32,768 tokens per request: 89.27x"
    assert_eq!(r.per_gpu.kv_pool, Some(gib(100.43)));
    assert_eq!(engine(&r, "kv_cache_tokens"), json!(2_925_232));
    assert_eq!(engine(&r, "max_concurrency"), json!(89.27));
}

#[test]
fn vllm_engine_config_implies_the_job() {
    let r = read("vllm/v0-2024-12-engine-config-livepeer230.log");
    // "model='/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct/snapshots/...',
    // dtype=torch.bfloat16, max_seq_len=8192, ... tensor_parallel_size=2,
    // pipeline_parallel_size=1"
    assert_eq!(
        r.job["model"],
        json!("meta-llama/Meta-Llama-3.1-8B-Instruct")
    );
    assert_eq!(r.job["precision"], json!("bf16"));
    assert_eq!(r.job["framework"], json!("vllm"));
    assert_eq!(r.job["parallel"], json!({"gpus": 2, "tp": 2, "pp": 1}));
    assert_eq!(engine(&r, "max_model_len"), json!(8192));
}

#[test]
fn vllm_refusal_to_start() {
    let r = read("vllm/v1-2026-05-kv-too-small-xinference4926.log");
    // "max seq len (262144), (36.0 GiB KV cache is needed, which is larger than the available
    // KV cache memory (6.94 GiB). ... the estimated maximum model length is 50512."
    assert_eq!(engine(&r, "max_model_len"), json!(262_144));
    assert_eq!(engine(&r, "kv_needed"), json!(gib(36.0)));
    assert_eq!(r.per_gpu.kv_pool, Some(gib(6.94)));
    assert_eq!(engine(&r, "estimated_max_model_len"), json!(50_512));
    assert!(common::warns_of(&r.warnings, "--max-model-len 50512"));
}

#[test]
fn vllm_truncated_line_is_not_misread() {
    let r = read("vllm/synthetic-truncated.log");
    // The cut "GPU KV cache size: 158,6" must not become 1586 tokens.
    assert_eq!(engine(&r, "kv_cache_tokens"), Value::Null);
    assert_eq!(r.per_gpu.components.parameters, Some(gib(14.9889)));
    common::assert_warns(&r.warnings, "partial");
}

#[test]
fn vllm_weights_of_driver_and_worker() {
    let r = read("vllm/v0-2025-02-weights-issue12664.log");
    // "Loading model weights took 30.7098 GB" on both ranks
    assert_eq!(r.per_gpu.components.parameters, Some(gib(30.7098)));
}

// ---------------------------------------------------------------- llama.cpp

#[test]
fn llamacpp_two_gpus_old_wording() {
    let r = read("llamacpp/llm_load_tensors-2gpu-pr6122.log");
    assert_eq!(r.source, LogKind::LlamaCpp);
    // Busiest device: CUDA1 ("CUDA1 buffer size = 13989.53 MiB", "CUDA1 KV buffer size =
    // 3584.00 MiB"; its compute line is past the end of the thread's copy).
    assert_eq!(r.per_gpu.device.as_deref(), Some("CUDA1"));
    assert_eq!(r.per_gpu.components.parameters, Some(mib(13989.53)));
    assert_eq!(r.per_gpu.components.kv_cache, Some(mib(3584.00)));
    assert_eq!(r.per_gpu.components.temporaries, None);
    // CUDA0: "CUDA0 buffer size =  5434.38 MiB", "CUDA0 KV buffer size =  1536.00 MiB",
    // "CUDA0 compute buffer size =   672.01 MiB"
    let d0 = r
        .devices
        .iter()
        .find(|d| d.device == "CUDA0")
        .expect("CUDA0");
    assert_eq!(d0.bytes.parameters, Some(mib(5434.38)));
    assert_eq!(d0.bytes.kv_cache, Some(mib(1536.00)));
    assert_eq!(d0.bytes.temporaries, Some(mib(672.01)));
    // "CPU buffer size =  1640.62 MiB"
    assert_eq!(
        r.host.as_ref().and_then(|h| h.parameters),
        Some(mib(1640.62))
    );
    // "offloaded 41/41 layers to GPU", "n_ctx      = 4096", "K (f16)"
    assert_eq!(engine(&r, "n_gpu_layers"), json!(41));
    assert_eq!(engine(&r, "n_layers"), json!(41));
    assert_eq!(engine(&r, "n_ctx"), json!(4096));
    assert_eq!(engine(&r, "kv_type"), json!("f16"));
}

#[test]
fn llamacpp_eight_gpus_quantized_kv() {
    let r = read("llamacpp/init_from_model-8gpu-q4_0-issue9390.log");
    // CUDA2: "model buffer size = 25338.47 MiB" + "KV buffer size =  5824.00 MiB" is the most.
    assert_eq!(r.per_gpu.device.as_deref(), Some("CUDA2"));
    assert_eq!(r.per_gpu.components.parameters, Some(mib(25338.47)));
    assert_eq!(r.per_gpu.components.kv_cache, Some(mib(5824.00)));
    // "type_k = 'q4_0', type_v = 'f16'", "n_ctx         = 16384", "n_seq_max     = 8",
    // "flash_attn    = 0"
    assert_eq!(engine(&r, "kv_type"), json!("q4_0"));
    assert_eq!(engine(&r, "kv_type_v"), json!("f16"));
    assert_eq!(engine(&r, "n_ctx"), json!(16384));
    assert_eq!(engine(&r, "flash_attn"), json!(false));
    // The job: 8 sequences of 16384 / 8 = 2048 tokens ("n_ctx_per_seq = 2048").
    assert_eq!(r.job["batch"], json!(8));
    assert_eq!(r.job["seq"], json!(2048));
    assert_eq!(r.job["kv_dtype"], json!("q4_0"));
    assert_eq!(r.devices.len(), 8, "CUDA0..CUDA7 each appear");
}

#[test]
fn llamacpp_weights_on_the_host() {
    let r = read("llamacpp/lmstudio-cpu-only-900.log");
    // "offloaded 0/25 layers to GPU", "CPU_Mapped model buffer size = 11536.18 MiB",
    // "n_ctx         = 131072", "flash_attn    = 1"
    assert_eq!(engine(&r, "n_gpu_layers"), json!(0));
    assert_eq!(engine(&r, "n_layers"), json!(25));
    assert_eq!(
        r.host.as_ref().and_then(|h| h.parameters),
        Some(mib(11536.18))
    );
    assert_eq!(r.per_gpu.components.parameters, None);
    assert_eq!(engine(&r, "n_ctx"), json!(131_072));
    assert_eq!(engine(&r, "flash_attn"), json!(true));

    let r = read("llamacpp/ik_llama-moe-cpu-issue455.log");
    // "CPU buffer size = 355712.00 MiB", "CUDA_Host buffer size = 497.11 MiB" (both host),
    // "CUDA0 buffer size =  9996.68 MiB"
    assert_eq!(
        r.host.as_ref().and_then(|h| h.parameters),
        Some(mib(355712.00) + mib(497.11))
    );
    assert_eq!(r.per_gpu.components.parameters, Some(mib(9996.68)));
}

#[test]
fn llamacpp_newest_wording_with_colour_codes() {
    let r = read("llamacpp/llama_kv_cache-ansi-issue27680.log");
    // "llama_kv_cache:      CUDA0 KV buffer size =   182.75 MiB", "K (bf16)"
    assert_eq!(r.per_gpu.components.kv_cache, Some(mib(182.75)));
    assert_eq!(engine(&r, "kv_type"), json!("bf16"));
}

#[test]
fn llamacpp_context_wording_and_partial_warning() {
    let r = read("llamacpp/llama_context-no-kv-offload-issue14043.log");
    // "n_ctx         = 240000", "CPU_Mapped model buffer size =  2460.94 MiB"
    assert_eq!(engine(&r, "n_ctx"), json!(240_000));
    assert_eq!(
        r.host.as_ref().and_then(|h| h.parameters),
        Some(mib(2460.94))
    );
    // "CUDA2 model buffer size =     0.75 MiB"
    assert_eq!(r.per_gpu.components.parameters, Some(mib(0.75)));
    // "model params     = 111.06 B"
    assert_eq!(r.job["model"], json!({"params": 111.06e9}));
    common::assert_warns(&r.warnings, "KV buffers");

    let r = read("llamacpp/ollama-runner-init_from_model-issue10114.log");
    // "offloaded 25/25 layers", "CUDA0 model buffer size =   577.22 MiB",
    // "CPU_Mapped model buffer size =   520.30 MiB", "kv_size = 32768 ... type_k = 'f16'"
    assert_eq!(r.per_gpu.components.parameters, Some(mib(577.22)));
    assert_eq!(
        r.host.as_ref().and_then(|h| h.parameters),
        Some(mib(520.30))
    );
    assert_eq!(engine(&r, "n_ctx"), json!(32_768));
    assert_eq!(r.job["kv_dtype"], json!("fp16"));
    assert_eq!(r.job["engine"], json!({"n_gpu_layers": 25}));
}

#[test]
fn llamacpp_malformed_figures_are_refused() {
    let e = read_log(&fixture("llamacpp/synthetic-malformed.log")).unwrap_err();
    assert!(e.to_string().contains("no memory figure"), "{e}");
}

// ---------------------------------------------------------------- ollama

#[test]
fn ollama_offload_record() {
    let r = read("ollama/offload-4gpu-flash-issue9181.log");
    assert_eq!(r.source, LogKind::Ollama);
    let l = r.layout.as_ref().expect("layout");
    // layers.requested=-1 layers.model=81 layers.offload=44 layers.split=11,11,11,11
    assert_eq!(l["layers.requested"], json!(-1));
    assert_eq!(l["layers.model"], json!(81));
    assert_eq!(l["layers.offload"], json!(44));
    assert_eq!(l["layers.split"], json!("11,11,11,11"));
    // memory.required.kv="19.5 GiB" memory.weights.total="87.3 GiB" memory.graph.full="8.2 GiB"
    assert_eq!(l["memory.required.kv"], json!(gib(19.5)));
    assert_eq!(l["memory.weights.total"], json!(gib(87.3)));
    assert_eq!(l["memory.graph.full"], json!(gib(8.2)));
    // memory.available="[22.0 GiB 22.0 GiB 22.0 GiB 22.0 GiB]"
    assert_eq!(l["memory.available"], json!(vec![gib(22.0); 4]));
    // cmd="... --ctx-size 64000 ... --n-gpu-layers 44 ... --flash-attn --parallel 1"
    assert_eq!(engine(&r, "n_ctx"), json!(64_000));
    assert_eq!(engine(&r, "n_gpu_layers"), json!(44));
    assert_eq!(engine(&r, "n_layers"), json!(81));
    assert_eq!(engine(&r, "flash_attn"), json!(true));
    assert_eq!(
        r.job["framework"],
        json!("llama.cpp"),
        "ollama runs llama.cpp's allocator"
    );
}

#[test]
fn ollama_wrapped_offload_record() {
    let r = read("ollama/offload-2gpu-wrapped-issue8430.log");
    let l = r.layout.as_ref().expect("layout");
    // " layers.offload=37 layers.split=37,0 ..." on the second line,
    // ' memory.required.allocations="[11.4 GiB 0 B]"' on the fourth
    assert_eq!(l["layers.offload"], json!(37));
    assert_eq!(l["memory.required.allocations"], json!([gib(11.4), 0]));
    assert_eq!(l["memory.required.full"], json!(gib(14.9)));
}

#[test]
fn ollama_llama_lines_behind_compose_prefix() {
    let r = read("ollama/compose-llm_load_tensors-1of62-issue8447.log");
    // "offloaded 1/62 layers", "CUDA0 model buffer size =  7106.67 MiB",
    // "CPU_Mapped model buffer size = 378582.96 MiB", "CPU KV buffer size =  9600.00 MiB",
    // "CUDA0 KV buffer size =   160.00 MiB"
    assert_eq!(engine(&r, "n_gpu_layers"), json!(1));
    assert_eq!(r.per_gpu.components.parameters, Some(mib(7106.67)));
    assert_eq!(r.per_gpu.components.kv_cache, Some(mib(160.00)));
    let h = r.host.as_ref().expect("host");
    assert_eq!(h.parameters, Some(mib(378582.96)));
    assert_eq!(h.kv_cache, Some(mib(9600.00)));
}

#[test]
fn ollama_engine_lines() {
    let r = read("ollama/ggml-engine-new-memory-pr11090.log");
    // msg="offloaded 41/41 layers to GPU"; "model weights" buffer=CUDA1 size="11.9 GiB" is the
    // larger; buffer=CPU size="680.0 MiB"; "compute graph" backend=CUDA0 size="0 B"
    assert_eq!(engine(&r, "n_gpu_layers"), json!(41));
    assert_eq!(r.per_gpu.device.as_deref(), Some("CUDA1"));
    assert_eq!(r.per_gpu.components.parameters, Some(gib(11.9)));
    assert_eq!(r.host.as_ref().and_then(|h| h.parameters), Some(mib(680.0)));
    let d0 = r
        .devices
        .iter()
        .find(|d| d.device == "CUDA0")
        .expect("CUDA0");
    assert_eq!(d0.bytes.parameters, Some(gib(11.5)));
    assert_eq!(d0.bytes.temporaries, Some(0));

    let r = read("ollama/ggml-engine-model-weights-issue10553.log");
    // buffer=CUDA1 size="12.0 GiB"
    assert_eq!(r.per_gpu.components.parameters, Some(gib(12.0)));
}

#[test]
fn ollama_runner_oom_is_a_warning() {
    let r = read("ollama/journal-rocm-oom-issue5913.log");
    // "ROCm_Host compute buffer size =    20.01 MiB", then "CUDA error: out of memory"
    assert_eq!(
        r.host.as_ref().and_then(|h| h.temporaries),
        Some(mib(20.01))
    );
    assert!(common::warns_of(&r.warnings, "ran out of GPU memory"));
}

// ---------------------------------------------------------------- PyTorch OOM

fn oom(rel: &str) -> (LogReport, vramscope_measure::logs::OomFigures) {
    let r = read(rel);
    assert_eq!(r.source, LogKind::TorchOom, "{rel}");
    let o = r.oom.clone().expect("oom");
    (r, o)
}

#[test]
fn oom_cached_wording() {
    let (r, o) = oom("torch-oom/torch1.2-cached-examples621.txt");
    // "Tried to allocate 26.00 MiB (GPU 0; 1024.00 MiB total capacity; 435.61 MiB already
    // allocated; 24.17 MiB free; 26.39 MiB cached)"; cached = reserved − allocated.
    assert_eq!(o.requested, Some(mib(26.00)));
    assert_eq!(o.capacity, Some(mib(1024.00)));
    assert_eq!(o.allocated, Some(mib(435.61)));
    assert_eq!(o.free, Some(mib(24.17)));
    assert_eq!(o.reserved_unallocated, Some(mib(26.39)));
    assert_eq!(o.reserved, Some(mib(435.61) + mib(26.39)));
    assert_eq!(r.per_gpu.peaks.peak_allocated, Some(mib(435.61)));
    assert_eq!(r.fit.capacity, Some(mib(1024.00)));
    assert!(r.diagnosis.as_deref().unwrap().starts_with("too big"));
}

#[test]
fn oom_reserved_wording_fragmentation() {
    let (r, o) = oom("torch-oom/torch1.x-reserved-maddog11.txt");
    // "Tried to allocate 2.87 GiB (GPU 0; 14.76 GiB total capacity; 8.77 GiB already
    // allocated; 19.75 MiB free; 13.71 GiB reserved in total by PyTorch)": 13.71 − 8.77 =
    // 4.94 GiB held unallocated, more than the 2.87 GiB asked.
    assert_eq!(o.requested, Some(gib(2.87)));
    assert_eq!(o.reserved, Some(gib(13.71)));
    assert_eq!(r.per_gpu.peaks.peak_reserved, Some(gib(13.71)));
    assert_eq!(o.reserved_unallocated, Some(gib(13.71) - gib(8.77)));
    let d = r.diagnosis.unwrap();
    assert!(d.starts_with("fragmentation"), "{d}");
    assert!(d.contains("expandable_segments:True"), "{d}");
}

#[test]
fn oom_new_wording_fields() {
    let (r, o) = oom("torch-oom/torch2.1-capacty-fragmentation-lerf73.txt");
    // "Tried to allocate 3.00 GiB. GPU 0 has a total capacty of 23.65 GiB of which 1.66 GiB is
    // free. Including non-PyTorch memory, this process has 20.81 GiB memory in use. Of the
    // allocated memory 12.09 GiB is allocated by PyTorch, and 4.84 GiB is reserved by PyTorch
    // but unallocated."
    assert_eq!(o.requested, Some(gib(3.00)));
    assert_eq!(o.capacity, Some(gib(23.65)));
    assert_eq!(o.free, Some(gib(1.66)));
    assert_eq!(o.process_in_use, Some(gib(20.81)));
    assert_eq!(o.allocated, Some(gib(12.09)));
    assert_eq!(o.reserved, Some(gib(12.09) + gib(4.84)));
    assert_eq!(r.per_gpu.peaks.device_total, Some(gib(20.81)));
    assert!(r.diagnosis.unwrap().starts_with("fragmentation"));
    // 4.84 GiB unallocated is 20% of the 23.65 GiB device (≥ 5%: large): the expandable
    // segments advice, giving back at most those 4.84 GiB, which with the 1.66 GiB free
    // could hold the 3.00 GiB asked.
    let a = r.allocator.expect("advice");
    assert_eq!(a.env, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    assert_eq!(a.gives_back_up_to, gib(4.84));
    assert_eq!(a.request_could_fit, Some(true));
}

#[test]
fn oom_single_huge_allocation() {
    // "Tried to allocate 55.57 GiB. GPU 0 has a total capacty of 12.00 GiB": no allocator
    // setting can help.
    let (r, _) = oom("torch-oom/torch2.1-huge-alloc-neurolens2.txt");
    let d = r.diagnosis.unwrap();
    assert!(
        d.contains("larger than the GPU") && d.contains("logits"),
        "{d}"
    );

    // "Tried to allocate 17.37 GiB. GPU 0 has a total capacity of 31.50 GiB": 55% of the GPU
    // in one tensor ([30688, 151936] fp32 logits per the thread).
    let (r, _) = oom("torch-oom/torch2.x-logits-grad-effce9.txt");
    let d = r.diagnosis.unwrap();
    assert!(
        d.starts_with("a single allocation") && d.contains("logits"),
        "{d}"
    );
}

#[test]
fn oom_device_simply_full() {
    // "Tried to allocate 22.00 MiB ... 23.65 GiB of which 11.06 MiB is free ... 22.90 GiB is
    // allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated": under 1%
    // of the GPU is held unallocated; the job is too big, and no allocator advice.
    let (r, _) = oom("torch-oom/torch2.2-too-big-pytorch16417.txt");
    assert!(r.diagnosis.unwrap().starts_with("too big"));
    assert_eq!(r.allocator, None);
}

#[test]
fn oom_other_processes() {
    let (r, o) = oom("torch-oom/torch2.x-logits-other-process-slime1951.txt");
    // "Process 1990324 has 3.23 GiB memory in use. Including non-PyTorch memory, this process
    // has 117.07 GiB memory in use."
    assert_eq!(o.other_processes, Some(gib(3.23)));
    assert_eq!(o.process_in_use, Some(gib(117.07)));
    // 20.79 GiB unallocated + 19.41 GiB free hold the 29.39 GiB request.
    assert!(r.diagnosis.unwrap().starts_with("fragmentation"));

    let (r, o) = oom("torch-oom/torch2.x-four-processes-trl5207.txt");
    // "Process 21219 has 284.00 MiB ... Process 21222 has 3.40 GiB ... Process 21213 has
    // 258.00 MiB ... Process 21216 has 10.77 GiB memory in use."
    assert_eq!(
        o.other_processes,
        Some(mib(284.00) + gib(3.40) + mib(258.00) + gib(10.77))
    );
    assert_eq!(o.process_in_use, None);
    assert!(r.diagnosis.unwrap().contains("this one may be among them"));
}

#[test]
fn oom_wrapped_and_impossible() {
    let (r, o) = oom("torch-oom/torch2.0-wrapped-attention-bnb758.txt");
    // Wrapped over three lines: "Tried to allocate 1024.00 MiB (GPU 0; 8.00 GiB total
    // capacity; 12.19 GiB already\nallocated; 0 bytes free; 12.68 GiB reserved in total by
    // PyTorch)" — 12.19 GiB allocated on an 8 GiB GPU cannot be one device's truth.
    assert_eq!(o.requested, Some(mib(1024.00)));
    assert_eq!(o.allocated, Some(gib(12.19)));
    assert_eq!(o.free, Some(0));
    assert!(common::warns_of(&r.warnings, "exceeds the GPU's capacity"));

    let (r, o) = oom("torch-oom/torch2.x-wsl-bogus-process-liger47.txt");
    // "this process has 17179869184.00 GiB memory in use" = 2^64 bytes: not representable.
    assert_eq!(o.process_in_use, None);
    common::assert_warns(&r.warnings, "could not be read");

    let (_, o) = oom("torch-oom/torch2.x-linewrapped-nemo3907.txt");
    // "Tried to allocate 720.00 MiB.\nGPU 0 has a total capacity of 184.31 GiB of which
    // 443.94 MiB is free.\nOf the allocated memory 171.63 GiB is allocated by PyTorch, and
    // 2.00 GiB is reserved by PyTorch but unallocated."
    assert_eq!(o.requested, Some(mib(720.00)));
    assert_eq!(o.capacity, Some(gib(184.31)));
    assert_eq!(o.free, Some(mib(443.94)));
    assert_eq!(o.allocated, Some(gib(171.63)));
}

#[test]
fn oom_truncated_is_partial() {
    let (r, o) = oom("torch-oom/synthetic-truncated.txt");
    assert_eq!(o.requested, Some(gib(29.39)));
    assert_eq!(o.allocated, None);
    assert_eq!(r.diagnosis, None);
    assert!(common::warns_starting(&r.warnings, "partial OOM message"));
}

// ---------------------------------------------------------------- recognition

#[test]
fn every_fixture_is_recognised_as_its_folder() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    let mut n = 0;
    for (dir, kind) in [
        ("vllm", LogKind::Vllm),
        ("llamacpp", LogKind::LlamaCpp),
        ("ollama", LogKind::Ollama),
        ("torch-oom", LogKind::TorchOom),
    ] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(detect(&text), Some(kind), "{}", p.display());
            n += 1;
        }
    }
    assert!(
        n >= 20 + 4,
        "at least 5 real files per format plus the synthetic ones: {n}"
    );
}

#[test]
fn records_and_unknown_text_are_not_logs() {
    let json = br#"{"traceEvents": [{"name": "Loading model weights took 1 GB"}]}"#;
    assert!(!vramscope_measure::logs::is_log(json));
    let e = analyze_any_bytes(b"hello world\n").unwrap_err();
    assert!(
        e.to_string().contains("neither a PyTorch memory record"),
        "{e}"
    );
    let log = fixture("vllm/v1-2025-04-pr17122.log");
    assert!(matches!(
        analyze_any_bytes(log.as_bytes()),
        Ok(Measured::Log(_))
    ));
}

#[test]
fn implied_jobs_are_valid_jobs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    for dir in ["vllm", "llamacpp", "ollama"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                continue;
            }
            let Ok(r) = read_log(&std::fs::read_to_string(&p).unwrap()) else {
                continue;
            };
            let mut job = Value::Object(r.job.clone());
            job.as_object_mut()
                .unwrap()
                .entry("model")
                .or_insert(json!({"params": 1e9}));
            let parsed: vramscope_core::job::Job = serde_json::from_value(job.clone())
                .unwrap_or_else(|e| panic!("{}: {job}: {e}", p.display()));
            parsed
                .resolve(None)
                .unwrap_or_else(|e| panic!("{}: {job}: {e}", p.display()));
        }
    }
}

#[test]
fn per_gpu_has_the_reports_fields() {
    let r = read("vllm/v0-2024-12-profiling-table-pr10511.log");
    let v = serde_json::to_value(&r).unwrap();
    let g = &v["per_gpu"];
    for k in [
        "components",
        "model_states",
        "activation_bytes_per_layer",
        "peak_allocated",
        "peak_reserved",
        "device_total",
        "peak_phase",
        "kv_pool",
    ] {
        assert!(g.get(k).is_some(), "per_gpu.{k}");
    }
    for k in ALLOCATED.iter().chain(&OUTSIDE) {
        assert!(g["components"].get(k).is_some(), "components.{k}");
    }
    // Stated: "model weights take   14.96GiB"; never stated by vLLM: gradients.
    assert_eq!(g["components"]["parameters"], json!(gib(14.96)));
    assert_eq!(g["components"]["gradients"], Value::Null);
    assert_eq!(v["source"], "vllm-log");
}

// ---------------------------------------------------------------- vLLM counts in bytes

/// "GPU KV cache size: 158,656 tokens" (V1, PR 17122) with a block of 16 tokens × 131072 B
/// (Llama-3.1-8B at bf16: 32 layers × 8 KV heads × 128 × 2 × 2 B per token): 158656 / 16 =
/// 9916 blocks × 2097152 B = 20795359232 B; the count, the block's bytes and its size are
/// named in `engine` and a note says the pool is derived.
#[test]
fn vllm_token_count_to_bytes() {
    let mut r = read("vllm/v1-2025-04-pr17122.log");
    assert_eq!(r.per_gpu.kv_pool, None);
    assert!(r.kv_pool_from_count(2_097_152, 16, "llama-3.1-8b"));
    assert_eq!(r.per_gpu.kv_pool, Some(20_795_359_232));
    assert_eq!(engine(&r, "kv_pool_from"), json!("kv_cache_tokens"));
    assert_eq!(engine(&r, "kv_block_bytes"), json!(2_097_152));
    assert_eq!(engine(&r, "block_size"), json!(16));
    assert!(common::warns_starting(&r.warnings, "kv_pool is derived"));
}

/// "# GPU blocks: 10039" (V0, PR 6234) alone: the count stays in `engine`, `kv_pool` stays
/// null, and a note says why.
#[test]
fn vllm_block_count_alone_is_noted() {
    let mut r = read("vllm/v0-2024-07-tp4-pr6234.log");
    r.note_kv_count_only();
    assert_eq!(r.per_gpu.kv_pool, None);
    assert_eq!(engine(&r, "num_gpu_blocks"), json!(10039));
    common::assert_warns(&r.warnings, "only as 10039 GPU blocks");
    // A log that states the bytes itself keeps them: "available_kv_cache_memory 53.29GiB".
    let mut t = read("vllm/v0-2024-12-profiling-table-pr10511.log");
    assert!(!t.kv_pool_from_count(2_097_152, 16, "x"));
    assert_eq!(t.per_gpu.kv_pool, Some(gib(53.29)));
}

// ------------------------------------------------- vLLM: kv_cache_size, the command line

/// V0 v0.6.4's one-line profiling summary: its `kv_cache_size` is the KV pool
/// (`available_kv_cache_memory`, the bytes the GPU blocks are cut from).
#[test]
fn vllm_v0_profiling_results_kv_cache_size() {
    let r = read("vllm/synthetic-v0-profiling-kv-cache-size.log");
    // "kv_cache_size=54.44GiB" = 5444 × 1,073,741,824 / 100 = 58,454,504,898.56 → …899 B.
    assert_eq!(r.per_gpu.kv_pool, Some(58_454_504_899));
    assert_eq!(r.per_gpu.kv_pool, Some(gib(54.44)));
    // "total_gpu_memory=79.15GiB", "non_torch_memory=0.43GiB", "gpu_memory_utilization=0.90."
    assert_eq!(r.fit.capacity, Some(gib(79.15)));
    assert_eq!(r.per_gpu.components.cuda_context, Some(gib(0.43)));
    assert_eq!(engine(&r, "gpu_memory_utilization"), json!(0.9));
    // "Loading model weights took 14.9888 GB"; "# GPU blocks: 27872".
    assert_eq!(r.per_gpu.components.parameters, Some(gib(14.9888)));
    assert_eq!(engine(&r, "num_gpu_blocks"), json!(27872));
    common::assert_never_warns(&r.warnings, "KV cache memory");
}

/// A log that starts with the `vllm serve` command: the command states the utilization (0.98)
/// no later line does, and the model; the engine's own lines the rest.
#[test]
fn vllm_serve_command_line_states_its_flags() {
    let r = read("vllm/v1-2025-01-serve-command-pr12569.log");
    assert_eq!(r.source, LogKind::Vllm);
    // "--gpu-memory-utilization 0.98", "--max-model-len 2048"
    assert_eq!(engine(&r, "gpu_memory_utilization"), json!(0.98));
    assert_eq!(engine(&r, "max_model_len"), json!(2048));
    assert_eq!(
        r.job.get("model"),
        Some(&json!(
            "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8"
        ))
    );
    // "Loading model weights took 67.7229 GB"; "# GPU blocks: 1381"; "10.79x".
    assert_eq!(r.per_gpu.components.parameters, Some(gib(67.7229)));
    assert_eq!(engine(&r, "num_gpu_blocks"), json!(1381));
    assert_eq!(engine(&r, "max_concurrency"), json!(10.79));
}

/// The command asks, the engine's lines state what it applied: where both give a setting the
/// engine's is kept; `--flag=value`, `--flag value`, underscores and continuation lines read
/// alike; the parallel sizes and an fp8 KV cache land in the job.
#[test]
fn vllm_serve_command_forms_and_precedence() {
    let log = "$ CUDA_VISIBLE_DEVICES=0,1 vllm serve org/m \\\n  --max_model_len 8192 \
               --gpu-memory-utilization=0.85 \\\n  -tp 2 --kv-cache-dtype fp8_e5m2 --block-size 32\n\
               INFO 01-01 worker.py:1] the current vLLM instance can use total_gpu_memory \
               (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB\n\
               INFO 01-01 executor_base.py:95] # CUDA blocks: 6001, # CPU blocks: 1638\n";
    let r = read_log(log).unwrap();
    assert_eq!(
        engine(&r, "gpu_memory_utilization"),
        json!(0.9),
        "the engine's line wins"
    );
    assert_eq!(engine(&r, "max_model_len"), json!(8192));
    assert_eq!(engine(&r, "block_size"), json!(32));
    assert_eq!(r.job.get("model"), Some(&json!("org/m")));
    assert_eq!(
        r.job.get("parallel"),
        Some(&json!({"gpus": 2, "tp": 2, "pp": 1}))
    );
    assert_eq!(r.job.get("kv_dtype"), Some(&json!("fp8")));
    // Not at the start of the log: a command quoted later is not this engine's.
    let later = format!(
        "{}\n{}\n",
        "INFO x\n".repeat(6),
        "vllm serve other/m --max-model-len 4"
    );
    let r = read_log(&format!(
        "INFO 01-01 executor_base.py:95] # CUDA blocks: 1\n{later}"
    ))
    .unwrap();
    assert_eq!(r.job.get("model"), None);
}
