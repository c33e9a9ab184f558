//! llama.cpp load logs, every wording since 2024: `llm_load_tensors` / `load_tensors` (model
//! buffers per device, "offloaded N/M layers to GPU"), `llama_new_context_with_model` /
//! `llama_init_from_model` / `llama_context` (n_ctx, flash_attn, compute buffers),
//! `llama_kv_cache_init` / `llama_kv_cache_unified` / `llama_kv_cache` (KV buffers, K/V types),
//! and `llama_model_loader` / `print_info` metadata. Sizes are `MiB` = 2^20 bytes
//! (`src/llama-model.cpp`, `src/llama-context.cpp`: `ggml_backend_buffer_get_size(buf) /
//! 1024.0 / 1024.0`).

use super::text::{after, count_after, number_and_unit, parse_size, word_after};
use super::{put, with_nulls, BufferBytes, DeviceBuffers, LogKind, LogReport};
use serde_json::{json, Map, Value};

const MARKERS: [&str; 8] = [
    "llm_load_tensors:",
    "load_tensors:",
    "llama_new_context_with_model:",
    "llama_init_from_model:",
    "llama_context:",
    "llama_kv_cache",
    "llama_model_loader:",
    "llm_load_print_meta:",
];

/// Function prefixes whose `key = value` lines carry the context's settings.
const CONTEXT: [&str; 3] = [
    "llama_new_context_with_model:",
    "llama_init_from_model:",
    "llama_context:",
];

pub fn recognises(text: &str) -> bool {
    MARKERS.iter().any(|m| text.contains(m))
}

pub fn read(text: &str, kind: LogKind) -> LogReport {
    let mut r = LogReport::new(kind);
    let mut b = Buffers::default();
    for line in text.lines() {
        b.line(line);
    }
    b.finish(&mut r);
    r
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Model,
    Kv,
    Compute,
}

impl Kind {
    /// Where a buffer of this kind is counted: model → parameters, KV → kv_cache, compute →
    /// temporaries (the contract's `llamacpp-log` row).
    fn slot(self, b: &mut BufferBytes) -> &mut Option<u64> {
        match self {
            Kind::Model => &mut b.parameters,
            Kind::Kv => &mut b.kv_cache,
            Kind::Compute => &mut b.temporaries,
        }
    }
}

/// The buffers and settings of one load, read line by line (ollama's reader feeds it too).
#[derive(Default)]
pub(super) struct Buffers {
    devices: Vec<DeviceBuffers>,
    host: BufferBytes,
    host_seen: bool,
    /// A KV or compute buffer was seen since the last model buffer (a second load starts when
    /// a device's model buffer comes again after them).
    context_seen: bool,
    loads: usize,
    pub engine: Map<String, Value>,
    pub job: Map<String, Value>,
    pub warnings: Vec<String>,
}

fn add(slot: &mut Option<u64>, v: u64) {
    *slot = Some(slot.unwrap_or(0).saturating_add(v));
}

/// Host buffers: CPU, CPU_Mapped, CUDA_Host, ROCm_Host...
fn is_host(dev: &str) -> bool {
    dev.starts_with("CPU") || dev.ends_with("_Host")
}

impl Buffers {
    pub fn line(&mut self, line: &str) {
        self.buffer_line(line);
        self.offload_line(line);
        self.context_line(line);
        self.kv_type_line(line);
        self.metadata_line(line);
    }

    fn buffer_line(&mut self, line: &str) {
        let Some(at) = line.find(" buffer size") else {
            return;
        };
        let head = &line[..at];
        let (kind, head) = if let Some(h) = head.strip_suffix(" KV") {
            (Kind::Kv, h)
        } else if let Some(h) = head.strip_suffix(" RS") {
            (Kind::Kv, h)
        } else if let Some(h) = head.strip_suffix(" compute") {
            (Kind::Compute, h)
        } else if head.ends_with(" output") {
            return;
        } else if let Some(h) = head.strip_suffix(" model") {
            (Kind::Model, h)
        } else {
            (Kind::Model, head)
        };
        let Some(dev) = head.split_whitespace().last() else {
            return;
        };
        let dev = dev.rsplit(':').next().unwrap_or(dev).to_string();
        let size = after(line, "buffer size")
            .and_then(number_and_unit)
            .and_then(|(n, u)| parse_size(&n, u, false));
        let Some(size) = size else {
            self.warnings
                .push(format!("unreadable figure, skipped: {}", line.trim()));
            return;
        };
        self.record(dev, kind, size);
    }

    pub fn record(&mut self, dev: String, kind: Kind, size: u64) {
        if matches!(kind, Kind::Model) {
            let again = self
                .devices
                .iter()
                .any(|d| d.device == dev && d.bytes.parameters.is_some());
            if again && self.context_seen {
                self.devices.clear();
                self.host = BufferBytes::default();
                self.host_seen = false;
                self.loads += 1;
            }
            self.context_seen = false;
        } else {
            self.context_seen = true;
        }
        if is_host(&dev) {
            self.host_seen = true;
            return add(kind.slot(&mut self.host), size);
        }
        let i = match self.devices.iter().position(|d| d.device == dev) {
            Some(i) => i,
            None => {
                self.devices.push(DeviceBuffers {
                    device: dev,
                    ..Default::default()
                });
                self.devices.len() - 1
            }
        };
        add(kind.slot(&mut self.devices[i].bytes), size);
    }

    /// "offloaded 33/33 layers to GPU" (llama.cpp) and `msg="offloaded 41/41 layers to GPU"`
    /// (ollama's engine).
    fn offload_line(&mut self, line: &str) {
        let Some(rest) = after(line, "offloaded ") else {
            return;
        };
        let Some((n, m)) = rest.split_once('/') else {
            return;
        };
        let n: Option<u64> = n.trim().parse().ok();
        let m = m.split(' ').next().and_then(|m| m.parse::<u64>().ok());
        match (n, m) {
            (Some(n), Some(m)) if m > 0 && n <= m => {
                self.engine.insert("n_gpu_layers".into(), n.into());
                self.engine.insert("n_layers".into(), m.into());
            }
            _ => self
                .warnings
                .push(format!("impossible layer count, skipped: {}", line.trim())),
        }
    }

    fn context_line(&mut self, line: &str) {
        let Some(body) = CONTEXT.iter().find_map(|p| after(line, p)) else {
            return;
        };
        let Some((k, v)) = body.split_once('=') else {
            return;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "n_ctx" => {
                if let Ok(n) = v.parse::<u64>() {
                    self.engine.insert("n_ctx".into(), n.into());
                }
            }
            "n_seq_max" => {
                if let Ok(n) = v.parse::<u64>() {
                    self.engine.insert("n_seq_max".into(), n.into());
                }
            }
            "flash_attn" => {
                let on = match v {
                    "1" | "true" | "enabled" | "on" => Value::Bool(true),
                    "0" | "false" | "disabled" | "off" => Value::Bool(false),
                    other => Value::String(other.to_string()),
                };
                self.engine.insert("flash_attn".into(), on);
            }
            _ => {}
        }
    }

    /// `type_k = 'q4_0', type_v = 'f16'` (llama_kv_cache_init) or `K (f16): ..., V (f16): ...`
    /// ("KV self size" and the newer `llama_kv_cache: size = ...` lines).
    fn kv_type_line(&mut self, line: &str) {
        let k = word_after(line, "type_k =")
            .map(str::to_string)
            .or_else(|| paren_type(line, "K ("));
        let v = word_after(line, "type_v =")
            .map(str::to_string)
            .or_else(|| paren_type(line, "V ("));
        if let Some(k) = k {
            put(&mut self.engine, "kv_type", k);
        }
        if let Some(v) = v {
            put(&mut self.engine, "kv_type_v", v);
        }
    }

    fn metadata_line(&mut self, line: &str) {
        if let Some(a) = word_after(line, "general.architecture str") {
            put(&mut self.engine, "architecture", a);
        }
        if line.contains(".block_count u32") {
            if let Some(n) = count_after(line, "=") {
                put(&mut self.engine, "n_layers", n);
            }
        }
        if let Some(p) = after(line, "model params").and_then(number_and_unit) {
            let scale = match p.1 {
                "B" => 1e9,
                "M" => 1e6,
                "K" => 1e3,
                _ => 0.0,
            };
            if let Ok(x) = p.0.parse::<f64>() {
                if scale > 0.0 {
                    put(&mut self.job, "model", json!({"params": x * scale}));
                }
            }
        }
        for key in ["model ftype", "file type"] {
            if let Some(t) = after(line, key).and_then(ftype) {
                put(&mut self.job, "weights", format!("gguf:{t}"));
            }
        }
    }

    /// Fills the report: the GPU holding the most is `per_gpu`, the CPU side is `host`.
    pub fn finish(mut self, r: &mut LogReport) {
        let top = self.devices.iter().max_by_key(|d| d.bytes.total()).cloned();
        if let Some(d) = top {
            let c = &mut r.per_gpu.components;
            c.parameters = d.bytes.parameters;
            c.kv_cache = d.bytes.kv_cache;
            c.temporaries = d.bytes.temporaries;
            r.per_gpu.device = Some(d.device);
        }
        if self.host_seen {
            r.host = Some(self.host.clone());
        }
        self.partial_warnings(r.per_gpu.device.is_some(), r.source);
        // ollama runs llama.cpp's allocator; the estimator models it as llama.cpp.
        self.implied_job("llama.cpp");
        r.devices = self.devices;
        with_nulls(
            &mut self.engine,
            &["n_gpu_layers", "n_layers", "n_ctx", "flash_attn", "kv_type"],
        );
        r.engine = Some(self.engine);
        r.job = self.job;
        r.warnings.extend(self.warnings);
    }

    fn partial_warnings(&mut self, gpu: bool, source: LogKind) {
        if self.loads > 0 {
            self.warnings.push(format!(
                "the log holds {} loads; the last one is read",
                self.loads + 1
            ));
        }
        let mut missing = Vec::new();
        if !gpu && !self.host_seen {
            missing.push("any buffer size");
        }
        if !self.engine.contains_key("n_gpu_layers") {
            missing.push("the offloaded layers (\"offloaded N/M layers to GPU\")");
        }
        if !self.engine.contains_key("n_ctx") {
            missing.push("n_ctx");
        }
        let kv =
            self.devices.iter().any(|d| d.bytes.kv_cache.is_some()) || self.host.kv_cache.is_some();
        if !kv {
            missing.push("the KV buffers (\"KV buffer size\")");
        }
        if !missing.is_empty() {
            self.warnings.push(format!(
                "partial {}: it does not state {}",
                source.name(),
                missing.join(", ")
            ));
        }
    }

    fn implied_job(&mut self, framework: &str) {
        put(&mut self.job, "framework", framework);
        put(&mut self.job, "task", "infer");
        let e = &self.engine;
        let ctx = e.get("n_ctx").and_then(Value::as_u64);
        let seqs = e
            .get("n_seq_max")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        if let Some(ctx) = ctx {
            put(&mut self.job, "seq", (ctx / seqs).max(1));
        }
        if seqs > 1 {
            put(&mut self.job, "batch", seqs);
        }
        if let Some(n) = e.get("n_gpu_layers").and_then(Value::as_u64) {
            put(&mut self.job, "engine", json!({"n_gpu_layers": n}));
        }
        let kv = e
            .get("kv_type")
            .and_then(Value::as_str)
            .and_then(|t| match t {
                "f16" => Some("fp16"),
                "bf16" => Some("bf16"),
                "q8_0" => Some("q8_0"),
                "q4_0" => Some("q4_0"),
                _ => None,
            });
        if let Some(kv) = kv {
            put(&mut self.job, "kv_dtype", kv);
        }
    }
}

/// The type in `K (f16):` / `V (q8_0):`.
fn paren_type(line: &str, open: &str) -> Option<String> {
    let i = line.find(open)?;
    let rest = &line[i + open.len()..];
    let (t, tail) = rest.split_once(')')?;
    (tail.starts_with(':') && !t.is_empty() && t.len() <= 8).then(|| t.to_string())
}

/// llama-quantize's file type from `Q4_K - Medium`, `Q8_0`, `IQ2_XXS - 2.0625 bpw`.
fn ftype(s: &str) -> Option<String> {
    let mut words = s.split_whitespace();
    let t = words.next()?;
    let ok = (t.starts_with('Q') || t.starts_with("IQ") || t == "F16" || t == "BF16")
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return None;
    }
    let suffix = match (words.next(), words.next()) {
        (Some("-"), Some("Medium")) => "_M",
        (Some("-"), Some("Small")) => "_S",
        (Some("-"), Some("Large")) => "_L",
        _ => "",
    };
    Some(format!("{t}{suffix}"))
}
