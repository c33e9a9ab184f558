//! ollama server logs: llama.cpp's own lines as the runner prints them, plus ollama's
//! (`llm/server.go` `msg=offload` memory layout with `layers.*` and `memory.*` fields, the
//! runner's command line, and the new engine's `ml/backend/ggml/ggml.go` lines
//! `msg="model weights" buffer=CUDA0 size="11.6 GiB"` / `msg="compute graph"`). ollama prints
//! sizes with `format.HumanBytes2`: binary units, binary names.

use super::llamacpp::{Buffers, Kind};
use super::text::{number_and_unit, parse_size, word_after};
use super::{put, LogKind, LogReport};
use serde_json::{Map, Value};

const MARKERS: [&str; 6] = [
    "msg=offload",
    "source=server.go",
    "source=ggml.go",
    "source=sched.go",
    " ollama[",
    "ollama  | ",
];

pub fn recognises(text: &str) -> bool {
    MARKERS.iter().any(|m| text.contains(m))
}

/// The `memory.*` fields of the offload record that are single sizes.
const LAYOUT_SIZES: [&str; 9] = [
    "memory.gpu_overhead",
    "memory.required.full",
    "memory.required.partial",
    "memory.required.kv",
    "memory.weights.total",
    "memory.weights.repeating",
    "memory.weights.nonrepeating",
    "memory.graph.full",
    "memory.graph.partial",
];

pub fn read(text: &str) -> LogReport {
    let mut r = LogReport::new(LogKind::Ollama);
    let mut b = Buffers::default();
    let mut layout = Map::new();
    // The offload record may be wrapped over several lines: its fields are read from the
    // whole text, first occurrence.
    offload_record(text, &mut layout, &mut b.engine);
    for line in text.lines() {
        b.line(line);
        engine_line(line, &mut b);
        runner_line(line, &mut b.engine);
        capacity_line(line, &mut r.fit.capacity);
        if line.contains("CUDA error: out of memory") || line.contains("cudaMalloc failed") {
            b.warnings
                .push(format!("the runner ran out of GPU memory: {}", line.trim()));
        }
    }
    b.finish(&mut r);
    if !layout.is_empty() {
        r.layout = Some(layout);
    }
    r
}

fn offload_record(text: &str, layout: &mut Map<String, Value>, engine: &mut Map<String, Value>) {
    let Some(i) = text.find("msg=offload") else {
        return;
    };
    let rec = &text[i..];
    for key in ["layers.requested", "layers.model", "layers.offload"] {
        if let Some(v) = word_after(rec, &format!("{key}=")).and_then(|v| v.parse::<i64>().ok()) {
            put(layout, key, v);
        }
    }
    if let Some(i) = rec.find("layers.split=") {
        let v = rec[i + "layers.split=".len()..].split_whitespace().next();
        if let Some(v) = v.filter(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b',')) {
            put(layout, "layers.split", v);
        }
    }
    for key in LAYOUT_SIZES {
        if let Some(v) = quoted(rec, key).and_then(size) {
            put(layout, key, v);
        }
    }
    for key in ["memory.available", "memory.required.allocations"] {
        if let Some(list) = quoted(rec, key) {
            put(layout, key, parse_list(list));
        }
    }
    if let Some(n) = layout.get("layers.offload").and_then(Value::as_u64) {
        put(engine, "n_gpu_layers", n);
    }
    if let Some(n) = layout.get("layers.model").and_then(Value::as_u64) {
        put(engine, "n_layers", n);
    }
}

/// `key="11.6 GiB"` → `11.6 GiB`.
fn quoted<'a>(rec: &'a str, key: &str) -> Option<&'a str> {
    let i = rec.find(&format!("{key}=\""))?;
    let rest = &rec[i + key.len() + 2..];
    rest.split_once('"').map(|(v, _)| v)
}

fn size(s: &str) -> Option<u64> {
    let (n, u) = number_and_unit(s.trim())?;
    parse_size(&n, u, false)
}

/// `[22.0 GiB 22.0 GiB 0 B]` → sizes in bytes (unreadable entries dropped).
fn parse_list(list: &str) -> Vec<u64> {
    let words: Vec<&str> = list.trim_matches(['[', ']']).split_whitespace().collect();
    words
        .chunks(2)
        .filter_map(|p| match p {
            [n, u] => parse_size(n, u, false),
            _ => None,
        })
        .collect()
}

/// ollama's engine (`ggml.go`): `msg="model weights" buffer=CUDA0 size="11.5 GiB"`,
/// `msg="kv cache" device=CUDA0 size=...`, `msg="compute graph" backend=CUDA0 ... size="0 B"`;
/// recorded as the llama.cpp reader records its buffer lines.
fn engine_line(line: &str, b: &mut Buffers) {
    let kind = if line.contains("msg=\"model weights\"") {
        Kind::Model
    } else if line.contains("msg=\"kv cache\"") {
        Kind::Kv
    } else if line.contains("msg=\"compute graph\"") {
        Kind::Compute
    } else {
        return;
    };
    let dev = word_after(line, "buffer=")
        .or_else(|| word_after(line, "device="))
        .or_else(|| word_after(line, "backend="));
    let sz = quoted(line, "size");
    let (Some(dev), Some(sz)) = (dev, sz) else {
        return;
    };
    match size(sz) {
        Some(bytes) => b.record(dev.to_string(), kind, bytes),
        None => b
            .warnings
            .push(format!("unreadable figure, skipped: {}", line.trim())),
    }
}

/// The runner's command line: `--ctx-size 64000 --n-gpu-layers 44 --flash-attn --parallel 1`,
/// and `msg="enabling flash attention"`.
fn runner_line(line: &str, e: &mut Map<String, Value>) {
    if line.contains("msg=\"enabling flash attention\"") {
        put(e, "flash_attn", true);
    }
    if !line.contains("msg=\"starting llama server\"") {
        return;
    }
    let arg =
        |flag: &str| word_after(line, &format!("{flag} ")).and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = arg("--ctx-size") {
        put(e, "n_ctx", n);
    }
    if let Some(n) = arg("--n-gpu-layers") {
        put(e, "n_gpu_layers", n);
    }
    if let Some(n) = arg("--parallel") {
        put(e, "n_seq_max", n);
    }
    if line.contains("--flash-attn") {
        put(e, "flash_attn", true);
    }
}

/// `msg="inference compute" ... total="23.6 GiB"`: the first GPU's capacity.
fn capacity_line(line: &str, cap: &mut Option<u64>) {
    if cap.is_none() && line.contains("msg=\"inference compute\"") {
        *cap = quoted(line, "total").and_then(size);
    }
}
