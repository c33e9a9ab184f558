//! vLLM start-up logs, V0 and V1 wordings (`vllm/worker/model_runner.py`, `worker.py`,
//! `executor_base.py`, `v1/worker/gpu_model_runner.py`, `gpu_worker.py`,
//! `v1/core/kv_cache_utils.py`, `engine/llm_engine.py`), and the `vllm serve` command line above
//! them (`vllm_command.rs`). Every figure is in GiB whatever its label: vLLM divides by 2^30 and
//! prints `GB` in the older lines.

use super::text::{count_after, decimal_after, size_after, word_after};
use super::{put, with_nulls, LogKind, LogReport};
use serde_json::{json, Map, Value};

/// Lines only vLLM prints.
const MARKERS: [&str; 12] = [
    "Loading model weights took",
    "Model loading took",
    "# GPU blocks:",
    "# CUDA blocks:",
    "GPU KV cache size:",
    "Available KV cache memory:",
    "Memory profiling",
    "model weights take",
    "the current vLLM instance can use",
    "LLM engine (v",
    "available_kv_cache_memory",
    "KV cache is needed, which is larger than the available KV cache memory",
];

pub fn recognises(text: &str) -> bool {
    MARKERS.iter().any(|m| text.contains(m))
}

/// Figures gathered line by line; several workers (TP/PP) print the same lines, and the
/// most-loaded GPU's (the largest) figure is kept.
#[derive(Default)]
struct Seen {
    weights: Option<u64>,
    non_torch: Option<u64>,
    activation_peak: Option<u64>,
    kv_pool: Option<u64>,
    capacity: Option<u64>,
}

fn keep_max(slot: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *slot = Some(slot.map_or(v, |s| s.max(v)));
    }
}

pub fn read(text: &str) -> LogReport {
    let mut r = LogReport::new(LogKind::Vllm);
    let mut seen = Seen::default();
    let mut engine = Map::new();
    for line in text.lines() {
        memory_line(line, &mut seen);
        engine_line(line, &mut engine);
        config_line(line, &mut r.job, &mut engine);
        failure_line(line, &mut seen, &mut engine, &mut r.warnings);
    }
    // After the engine's own lines: `put` keeps the first value, so what the engine states it
    // applied wins over what the command asked for.
    super::vllm_command::read(text, &mut r.job, &mut engine);
    let c = &mut r.per_gpu.components;
    c.parameters = seen.weights;
    c.cuda_context = seen.non_torch;
    c.temporaries = seen.activation_peak;
    r.per_gpu.kv_pool = seen.kv_pool;
    r.fit.capacity = seen.capacity;
    partial_warnings(&mut r, &engine);
    with_nulls(
        &mut engine,
        &[
            "gpu_memory_utilization",
            "num_gpu_blocks",
            "max_model_len",
            "max_concurrency",
        ],
    );
    r.engine = Some(engine);
    put(&mut r.job, "framework", "vllm");
    put(&mut r.job, "task", "infer");
    r
}

fn memory_line(line: &str, s: &mut Seen) {
    let gib = |key: &str| size_after(line, key, true);
    keep_max(&mut s.weights, gib("Loading model weights took"));
    keep_max(&mut s.weights, gib("Model loading took"));
    keep_max(&mut s.weights, gib("model weights take"));
    keep_max(&mut s.non_torch, gib("non_torch_memory takes"));
    if !line.contains("non_torch_memory takes") {
        keep_max(&mut s.non_torch, gib("non_torch_memory"));
    }
    keep_max(
        &mut s.activation_peak,
        gib("PyTorch activation peak memory takes"),
    );
    if !line.contains("peak memory takes") {
        keep_max(
            &mut s.activation_peak,
            gib("PyTorch activation peak memory"),
        );
    }
    keep_max(
        &mut s.kv_pool,
        gib("the rest of the memory reserved for KV Cache is"),
    );
    keep_max(&mut s.kv_pool, gib("available_kv_cache_memory"));
    // V0 (v0.6.3–0.6.4) `determine_num_available_blocks`: "Memory profiling results: ...
    // non_torch_memory=0.43GiB kv_cache_size=54.44GiB gpu_memory_utilization=0.90", the
    // `available_kv_cache_memory` the blocks are cut from.
    keep_max(&mut s.kv_pool, gib("kv_cache_size"));
    keep_max(&mut s.kv_pool, gib("Available KV cache memory:"));
    keep_max(&mut s.capacity, gib("total_gpu_memory"));
}

fn engine_line(line: &str, e: &mut Map<String, Value>) {
    if let Some(u) = decimal_after(line, "gpu_memory_utilization") {
        put(e, "gpu_memory_utilization", u);
    }
    for key in ["# GPU blocks:", "# CUDA blocks:"] {
        if let Some(n) = count_after(line, key) {
            put(e, "num_gpu_blocks", n);
        }
    }
    if let Some(n) = count_after(line, "# CPU blocks:") {
        put(e, "num_cpu_blocks", n);
    }
    if let Some(n) = count_after(line, "GPU KV cache size:") {
        put(e, "kv_cache_tokens", n);
    }
    if let Some(rest) = line.split("Maximum concurrency for ").nth(1) {
        if let Some(len) = count_after(rest, "") {
            put(e, "max_model_len", len);
        }
        if let Some(x) = decimal_after(rest, "tokens per request:") {
            put(e, "max_concurrency", x);
        }
    }
    for key in ["Using max model len", "'max_model_len':"] {
        if let Some(n) = count_after(line, key) {
            put(e, "max_model_len", n);
        }
    }
}

/// The engine config line (`Initializing an LLM engine (v0.6.3) with config: model='...',
/// dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=2, ...`).
fn config_line(line: &str, job: &mut Map<String, Value>, e: &mut Map<String, Value>) {
    if !line.contains("with config:") {
        return;
    }
    if let Some(m) = word_after(line, "config: model=") {
        put(job, "model", super::vllm_command::model_name(m));
    }
    if let Some(n) = count_after(line, "max_seq_len=") {
        put(e, "max_model_len", n);
    }
    if let Some(d) = word_after(line, "dtype=torch.") {
        let p = match d {
            "bfloat16" => "bf16",
            "float16" => "fp16",
            "float32" => "fp32",
            _ => "",
        };
        if !p.is_empty() {
            put(job, "precision", p);
        }
    }
    if let Some(k) = word_after(line, "kv_cache_dtype=") {
        if k.starts_with("fp8") {
            put(job, "kv_dtype", "fp8");
        }
    }
    let tp = count_after(line, "tensor_parallel_size=");
    let pp = count_after(line, "pipeline_parallel_size=");
    if tp.is_some() || pp.is_some() {
        let (tp, pp) = (tp.unwrap_or(1), pp.unwrap_or(1));
        put(
            job,
            "parallel",
            json!({"gpus": tp * pp, "tp": tp, "pp": pp}),
        );
    }
}

/// V1's refusal to start (`_check_enough_kv_cache_memory`): the max length, the KV it needs and
/// what is available.
fn failure_line(line: &str, s: &mut Seen, e: &mut Map<String, Value>, w: &mut Vec<String>) {
    if !line.contains("KV cache is needed") {
        return;
    }
    if let Some(n) = count_after(line, "max seq len") {
        put(e, "max_model_len", n);
    }
    keep_max(
        &mut s.kv_pool,
        size_after(line, "larger than the available KV cache memory", true),
    );
    let need = line
        .split("max seq len")
        .nth(1)
        .and_then(|r| r.split_once("),"))
        .and_then(|(_, r)| size_after(r, "", true));
    if let Some(n) = need {
        put(e, "kv_needed", n);
    }
    let est = count_after(line, "estimated maximum model length is");
    if let Some(n) = est {
        put(e, "estimated_max_model_len", n);
    }
    w.push(format!(
        "vLLM refused to start: one request at max_model_len needs more KV cache than is \
         available{}",
        est.map(|n| format!("; at most --max-model-len {n} fits"))
            .unwrap_or_default()
    ));
}

fn partial_warnings(r: &mut LogReport, e: &Map<String, Value>) {
    let mut missing = Vec::new();
    if r.per_gpu.components.parameters.is_none() {
        missing.push("the model weights (\"Loading model weights took\" / \"Model loading took\")");
    }
    if r.per_gpu.kv_pool.is_none() {
        missing.push("the KV cache memory (\"Available KV cache memory\" / profiling lines)");
    }
    if r.fit.capacity.is_none() {
        missing.push("the GPU's total memory (\"total_gpu_memory\")");
    }
    if !e.contains_key("max_model_len") {
        missing.push("max_model_len");
    }
    if !missing.is_empty() {
        r.warnings.push(format!(
            "partial vllm-log: it does not state {}",
            missing.join(", ")
        ));
    }
}

/// The count vLLM states for its KV pool when it does not state the bytes: V0's `# GPU blocks:
/// N` (`vllm/worker/worker.py`, blocks of `block_size` tokens) or V1's `GPU KV cache size: N
/// tokens` (`vllm/v1/core/kv_cache_utils.py`: `num_blocks × block_size` tokens). `None` when
/// the log states neither.
pub fn kv_count(e: &Map<String, Value>) -> Option<KvCount> {
    let get = |k: &str| e.get(k).and_then(Value::as_u64);
    get("num_gpu_blocks")
        .map(KvCount::Blocks)
        .or_else(|| get("kv_cache_tokens").map(KvCount::Tokens))
}

/// A KV pool stated as a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCount {
    Blocks(u64),
    Tokens(u64),
}

impl KvCount {
    /// The pool's bytes on one GPU: blocks × the bytes of one block (`block_bytes`, one block of
    /// `block_size` tokens over this GPU's layers: vLLM's `CacheEngine.get_cache_block_size` /
    /// V1's `page_size_bytes`); a token count is whole blocks of `block_size` (rounded up).
    pub fn bytes(self, block_bytes: u64, block_size: u64) -> Option<u64> {
        let blocks = match self {
            KvCount::Blocks(n) => n,
            KvCount::Tokens(t) => t.div_ceil(block_size.max(1)),
        };
        blocks.checked_mul(block_bytes)
    }

    fn key(self) -> &'static str {
        match self {
            KvCount::Blocks(_) => "num_gpu_blocks",
            KvCount::Tokens(_) => "kv_cache_tokens",
        }
    }
}

impl LogReport {
    /// A vLLM log that states its KV pool only as a count: `per_gpu.kv_pool` = the count in bytes,
    /// with `engine.kv_pool_from` naming the count and `engine.kv_block_bytes` /
    /// `engine.block_size` the figures it was multiplied by, and a note saying whose they are
    /// (`of`: e.g. "llama-3.1-8b's KV at bf16, tp 1 (the job)"). Nothing changes when the log
    /// states the bytes itself or no count; returns whether `kv_pool` was filled.
    pub fn kv_pool_from_count(&mut self, block_bytes: u64, block_size: u64, of: &str) -> bool {
        if self.source != LogKind::Vllm || self.per_gpu.kv_pool.is_some() || block_bytes == 0 {
            return false;
        }
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        let Some(count) = kv_count(engine) else {
            return false;
        };
        let Some(bytes) = count.bytes(block_bytes, block_size) else {
            return false;
        };
        self.per_gpu.kv_pool = Some(bytes);
        engine.insert("kv_pool_from".into(), count.key().into());
        engine.insert("kv_block_bytes".into(), block_bytes.into());
        engine.insert("block_size".into(), block_size.into());
        self.warnings.retain(|w| !w.starts_with(KV_COUNT_ONLY));
        self.warnings.push(format!(
            "kv_pool is derived, not stated: the log's {} × {block_bytes} B per block of \
             {block_size} tokens ({of})",
            count.key()
        ));
        true
    }

    /// The note for a vLLM log whose KV pool is only a count and no model sizes it.
    pub fn note_kv_count_only(&mut self) {
        if self.source != LogKind::Vllm || self.per_gpu.kv_pool.is_some() {
            return;
        }
        let Some(count) = self.engine.as_ref().and_then(kv_count) else {
            return;
        };
        let what = match count {
            KvCount::Blocks(n) => format!("{n} GPU blocks"),
            KvCount::Tokens(n) => format!("{n} tokens of KV cache"),
        };
        self.warnings.push(format!(
            "{KV_COUNT_ONLY} {what}, not their bytes, and names no model vramscope can size \
             without the Hub: `vramscope compare --job JOB LOG` gives them in bytes"
        ));
    }
}

/// How the count-only note begins (so a later derivation can replace it).
const KV_COUNT_ONLY: &str = "the log states its KV pool only as";
