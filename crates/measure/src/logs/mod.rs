//! Engine logs and error text as measurements: vLLM start-up logs, llama.cpp and ollama load
//! logs, and PyTorch's CUDA out-of-memory message, recognised by their content (never by the
//! file name) and read into the contract's `analyze` shape with only the figures the text states;
//! everything else stays `null`.
//!
//! Units are read as each program means them: vLLM divides by 2^30 and labels the result `GB`
//! (`vllm/worker/model_runner.py`: `self.model_memory_usage / float(2**30)`), llama.cpp's `MiB`
//! is 2^20 (`ggml_backend_buffer_get_size(buf) / 1024.0 / 1024.0`), ollama's `format.HumanBytes2`
//! and PyTorch's `format_size` print binary units with binary names.

pub mod fit;
mod llamacpp;
mod ollama;
mod text;
pub mod torch_oom;
mod vllm;
mod vllm_command;

use crate::analysis::PeakFigures;
use serde::Serialize;
use serde_json::{Map, Value};

pub use text::parse_size;
pub use vllm::{kv_count, KvCount};

/// Largest log read: logs are text of a few MB at most; beyond this it is not a log.
pub const MAX_LOG_BYTES: usize = 64 << 20;

/// What the text was recognised as (`"source"` in the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LogKind {
    #[serde(rename = "vllm-log")]
    Vllm,
    #[serde(rename = "llamacpp-log")]
    LlamaCpp,
    #[serde(rename = "ollama-log")]
    Ollama,
    #[serde(rename = "torch-oom")]
    TorchOom,
}

impl LogKind {
    pub fn name(self) -> &'static str {
        match self {
            LogKind::Vllm => "vllm-log",
            LogKind::LlamaCpp => "llamacpp-log",
            LogKind::Ollama => "ollama-log",
            LogKind::TorchOom => "torch-oom",
        }
    }
}

/// `per_gpu.components` of a log: each category the log states, else `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogComponents {
    pub parameters: Option<u64>,
    pub gradients: Option<u64>,
    pub optimizer_states: Option<u64>,
    pub master_weights: Option<u64>,
    pub activations: Option<u64>,
    pub kv_cache: Option<u64>,
    pub temporaries: Option<u64>,
    pub cuda_context: Option<u64>,
    pub allocator_reserve: Option<u64>,
    /// A log attributes every figure it states: always `null` (a measured record's field).
    pub unattributed: Option<u64>,
}

/// `per_gpu` of a log: the most-loaded GPU, in the Report's field names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LogPerGpu {
    pub components: LogComponents,
    /// A serving engine's preallocated KV pool (vLLM).
    pub kv_pool: Option<u64>,
    /// The Report's fields a log never states, `null` so the shapes compare field by field.
    pub model_states: Option<Value>,
    /// What the log states of the Report's peaks (a PyTorch OOM message: allocated, reserved,
    /// the process's use), the rest null.
    #[serde(flatten)]
    pub peaks: PeakFigures,
    /// Which device of the log this is (`CUDA1`, `GPU 0`), when the log names it.
    pub device: Option<String>,
}

/// `fit` of a log: the device's capacity where the log states it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogFit {
    pub capacity: Option<u64>,
}

/// The PyTorch OOM message's figures (`torch-oom`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OomFigures {
    pub requested: Option<u64>,
    pub capacity: Option<u64>,
    pub free: Option<u64>,
    /// This process's use of the device, CUDA context included ("this process has X in use").
    pub process_in_use: Option<u64>,
    pub allocated: Option<u64>,
    /// All bytes the caching allocator holds (allocated + reserved-but-unallocated).
    pub reserved: Option<u64>,
    /// Reserved by PyTorch but unallocated (the old message's "cached").
    pub reserved_unallocated: Option<u64>,
    /// Other processes on the device ("Process N has X memory in use"), summed.
    pub other_processes: Option<u64>,
    pub device: Option<u32>,
}

/// One device's buffers in a llama.cpp / ollama log: its name beside its bytes (one JSON
/// object: `device`, `parameters`, `kv_cache`, `temporaries`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceBuffers {
    pub device: String,
    #[serde(flatten)]
    pub bytes: BufferBytes,
}

/// The bytes of one side's buffers in a llama.cpp / ollama log, a device's or the host's (CPU,
/// CPU_Mapped, CUDA_Host), each `null` until the log states it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BufferBytes {
    /// The model buffer ("CUDA0 model buffer size", "CPU buffer size"): the weights.
    pub parameters: Option<u64>,
    /// The KV buffer ("CUDA0 KV buffer size").
    pub kv_cache: Option<u64>,
    /// The compute buffer ("CUDA0 compute buffer size"): the graph's scratch.
    pub temporaries: Option<u64>,
}

impl BufferBytes {
    /// All three buffers, unstated ones as 0.
    pub fn total(&self) -> u64 {
        [self.parameters, self.kv_cache, self.temporaries]
            .iter()
            .map(|b| b.unwrap_or(0))
            .sum()
    }
}

/// What `analyze` returns for a log or an error message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogReport {
    pub source: LogKind,
    pub per_gpu: LogPerGpu,
    /// A log has no event timeline: always empty.
    pub timeline: Vec<Value>,
    pub fit: LogFit,
    /// Engine settings the log states (per source: see the contract's `analyze` table).
    pub engine: Option<Map<String, Value>>,
    /// llama.cpp / ollama: the CPU side.
    pub host: Option<BufferBytes>,
    /// llama.cpp / ollama: every device's buffers, in the log's order.
    pub devices: Vec<DeviceBuffers>,
    /// ollama's own memory layout (`msg=offload`), in bytes, as it logged it.
    pub layout: Option<Map<String, Value>>,
    pub oom: Option<OomFigures>,
    /// One line: why the OOM happened and what to change.
    pub diagnosis: Option<String>,
    /// `torch-oom` with a large reserved-but-unallocated share: what
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` could give back. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator: Option<torch_oom::AllocatorAdvice>,
    /// Job fields the log implies (model, framework, engine settings), for `--job`.
    pub job: Map<String, Value>,
    pub warnings: Vec<String>,
}

impl LogReport {
    fn new(source: LogKind) -> Self {
        LogReport {
            source,
            per_gpu: LogPerGpu::default(),
            timeline: Vec::new(),
            fit: LogFit::default(),
            engine: None,
            host: None,
            devices: Vec::new(),
            layout: None,
            oom: None,
            diagnosis: None,
            allocator: None,
            job: Map::new(),
            warnings: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{0}")]
    Unreadable(String),
}

/// Which kind of log the text is, by its content; `None` when no known line is in it.
pub fn detect(text: &str) -> Option<LogKind> {
    if ollama::recognises(text) {
        Some(LogKind::Ollama)
    } else if llamacpp::recognises(text) {
        Some(LogKind::LlamaCpp)
    } else if vllm::recognises(text) {
        Some(LogKind::Vllm)
    } else if torch_oom::recognises(text) {
        Some(LogKind::TorchOom)
    } else {
        None
    }
}

/// True when the bytes look like text that [`detect`] recognises (a cheap test for callers
/// that must choose between a record and a log).
pub fn is_log(bytes: &[u8]) -> bool {
    if bytes.len() > MAX_LOG_BYTES || matches!(bytes.first(), Some(0x80) | Some(0x1f) | None) {
        return false;
    }
    let text = String::from_utf8_lossy(bytes);
    let head = text.trim_start();
    // A JSON record (profiler timeline, Chrome trace) is read as a record even when a string in
    // it quotes a log line.
    if (head.starts_with('{') || head.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(head).is_ok()
    {
        return false;
    }
    detect(&text).is_some()
}

/// Reads a log or an OOM message. A recognised log from which no figure could be read is an
/// error (exit 2); a partial one comes back with warnings saying what is missing.
pub fn read_log(text: &str) -> Result<LogReport, LogError> {
    let kind = detect(text).ok_or_else(|| {
        LogError::Unreadable(
            "not a recognised log: expected a vLLM start-up log, a llama.cpp or ollama load log, \
             or PyTorch's \"CUDA out of memory\" message"
                .into(),
        )
    })?;
    let mut r = match kind {
        LogKind::Vllm => vllm::read(text),
        LogKind::LlamaCpp => llamacpp::read(text, LogKind::LlamaCpp),
        LogKind::Ollama => ollama::read(text),
        LogKind::TorchOom => torch_oom::read(text),
    };
    if kind != LogKind::TorchOom && torch_oom::recognises(text) {
        // An engine that died of an OOM: its message is read beside the engine's figures.
        let o = torch_oom::read(text);
        r.oom = o.oom;
        r.diagnosis = o.diagnosis;
    }
    if !has_figures(&r) {
        return Err(LogError::Unreadable(format!(
            "recognised as a {} but no memory figure could be read from it (truncated or \
             malformed?)",
            kind.name()
        )));
    }
    Ok(r)
}

fn has_figures(r: &LogReport) -> bool {
    let c = &r.per_gpu.components;
    let any_component = [
        c.parameters,
        c.kv_cache,
        c.temporaries,
        c.cuda_context,
        c.activations,
        c.allocator_reserve,
    ]
    .iter()
    .any(Option::is_some);
    any_component
        || r.per_gpu.kv_pool.is_some()
        || r.per_gpu.peaks.peak_allocated.is_some()
        || r.fit.capacity.is_some()
        || r.engine
            .as_ref()
            .is_some_and(|e| e.values().any(|v| !v.is_null()))
        || r.host.is_some()
        || r.layout.is_some()
        || r.oom.as_ref().is_some_and(|o| o.requested.is_some())
}

/// Puts `value` under `key` in `map` unless the key is already there (first statement wins).
pub(crate) fn put(map: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    map.entry(key.to_string()).or_insert_with(|| value.into());
}

/// What `analyze` read: a PyTorch memory record or an engine log / OOM message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Measured {
    Record(Box<crate::Analysis>),
    Log(Box<LogReport>),
}

fn log_error(e: LogError) -> crate::MeasureError {
    crate::MeasureError::Format(e.to_string())
}

/// Analyzes bytes that may be a record (pickle, JSON, gzipped JSON) or a log.
pub fn analyze_any_bytes(bytes: &[u8]) -> Result<Measured, crate::MeasureError> {
    if is_log(bytes) {
        let text = String::from_utf8_lossy(bytes);
        return read_log(&text)
            .map(|r| Measured::Log(Box::new(r)))
            .map_err(log_error);
    }
    let head = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let record_like =
        matches!(bytes.first(), Some(0x80) | Some(0x1f)) || matches!(head, Some(b'{') | Some(b'['));
    if !record_like && !bytes.is_empty() {
        return Err(crate::MeasureError::Format(
            "neither a PyTorch memory record (pickle snapshot, profiler timeline, Chrome trace) \
             nor a recognised log (vLLM start-up, llama.cpp / ollama load, PyTorch's CUDA \
             out-of-memory message)"
                .into(),
        ));
    }
    crate::analyze_bytes(bytes).map(|a| Measured::Record(Box::new(a)))
}

/// Largest pickle read from a stream of unknown length (stdin): held whole, as the record's
/// length must be known to bound its reader (a file is streamed whatever its size).
pub const MAX_STREAM_PICKLE: u64 = 1 << 30;

/// Analyzes what a stream of unknown length (stdin) holds, never more than it must in memory:
/// up to `MAX_LOG_BYTES` it is read whole, as [`analyze_any_bytes`] reads bytes; past that it
/// is no log, and a JSON record (gzipped or not) is streamed, a pickle read whole up to
/// [`MAX_STREAM_PICKLE`].
pub fn analyze_any_stream<R: std::io::Read>(mut r: R) -> Result<Measured, crate::MeasureError> {
    use std::io::Read;
    let mut head = Vec::new();
    (&mut r)
        .take(MAX_LOG_BYTES as u64 + 1)
        .read_to_end(&mut head)?;
    if head.len() <= MAX_LOG_BYTES {
        return analyze_any_bytes(&head);
    }
    let pickle = head[0] == 0x80;
    let whole = std::io::Cursor::new(head).chain(r);
    if !pickle {
        return crate::analyze_json_stream(whole).map(|a| Measured::Record(Box::new(a)));
    }
    let mut bytes = Vec::new();
    whole.take(MAX_STREAM_PICKLE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_STREAM_PICKLE {
        return Err(crate::MeasureError::Format(format!(
            "a snapshot pickle of more than {MAX_STREAM_PICKLE} bytes on a stream; name its \
             file instead (a file is streamed whatever its size)"
        )));
    }
    crate::analyze_bytes(&bytes).map(|a| Measured::Record(Box::new(a)))
}

/// Analyzes a file that may be a record or a log; pickles are still streamed.
pub fn analyze_any_file(path: &std::path::Path) -> Result<Measured, crate::MeasureError> {
    use std::io::Read;
    let (mut file, len) = vramscope_formats::files::open_regular(path)?;
    let mut head = [0u8; 1];
    let n = file.read(&mut head)?;
    if n == 0 {
        return Err(crate::MeasureError::Format("empty file".into()));
    }
    if matches!(head[0], 0x80 | 0x1f) || len > MAX_LOG_BYTES as u64 {
        return crate::analyze_file(path).map(|a| Measured::Record(Box::new(a)));
    }
    let mut bytes = vec![head[0]];
    // Stated under the cap; read under it too (a file may grow while it is read).
    file.take(MAX_LOG_BYTES as u64).read_to_end(&mut bytes)?;
    analyze_any_bytes(&bytes)
}

/// Adds each of the contract's `keys` the log did not state, as `null`.
pub(crate) fn with_nulls(map: &mut Map<String, Value>, keys: &[&str]) {
    for k in keys {
        map.entry(k.to_string()).or_insert(Value::Null);
    }
}
