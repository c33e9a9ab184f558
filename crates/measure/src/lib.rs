//! vramscope-measure: read what PyTorch records about GPU memory — CUDA caching-allocator
//! snapshots (`torch.cuda.memory._dump_snapshot`), profiler memory timelines
//! (`export_memory_timeline`) and Chrome traces — and say where every byte went, in the same
//! categories as the estimate (`vramscope_core::report::Category`).
//!
//! Every reader is bounded: pickles are parsed by a non-executing VM ([`pickle`]) whose length
//! prefixes are checked against the file size; JSON input is capped at [`MAX_JSON_BYTES`].

pub mod analysis;
pub mod attribute;
pub mod calibrate;
mod fxhash;
pub mod infer;
pub mod pickle;
pub mod profiler;
mod replay;
pub mod snapshot;
mod snapshot_replay;

pub use analysis::{Analysis, MeasuredComponents, MeasuredPerGpu};

use std::io::{BufReader, Read};
use std::path::Path;

/// Largest JSON (after gunzip) read: timelines of long runs are tens of MB; a gzip bomb stops
/// here.
pub const MAX_JSON_BYTES: u64 = 2 << 30;

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Pickle(#[from] pickle::PickleError),
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads a snapshot pickle from memory.
pub fn read_snapshot_bytes(bytes: &[u8]) -> Result<snapshot::Snapshot, MeasureError> {
    snapshot::read_streaming(bytes, bytes.len() as u64, pickle::Limits::default())
}

/// Analyzes a record held in memory, whatever its format (pickle, JSON, gzipped JSON).
pub fn analyze_bytes(bytes: &[u8]) -> Result<Analysis, MeasureError> {
    match bytes.first() {
        Some(0x80) => {
            let snap = read_snapshot_bytes(bytes)?;
            Ok(analysis::analyze_snapshot(&snap))
        }
        Some(0x1f) if bytes.get(1) == Some(&0x8b) => {
            let text = gunzip(bytes)?;
            analyze_json_bytes(&text)
        }
        Some(_) => analyze_json_bytes(bytes),
        None => Err(MeasureError::Format("empty file".into())),
    }
}

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, MeasureError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_JSON_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| MeasureError::Format(format!("gzip: {e}")))?;
    if out.len() as u64 > MAX_JSON_BYTES {
        return Err(MeasureError::Format(format!(
            "gzip: expands to more than {MAX_JSON_BYTES} bytes"
        )));
    }
    Ok(out)
}

fn analyze_json_bytes(bytes: &[u8]) -> Result<Analysis, MeasureError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if !matches!(first, Some(b'[') | Some(b'{')) {
        return Err(MeasureError::Format(
            "not a PyTorch memory record: expected a pickle (snapshot), JSON or gzipped JSON \
             (profiler timeline, Chrome trace)"
                .into(),
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| MeasureError::Format(format!("JSON: {e}")))?;
    profiler::analyze_json(&v)
}

/// Analyzes a record file. Pickles are streamed (the file is never held whole in memory).
pub fn analyze_file(path: &Path) -> Result<Analysis, MeasureError> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut head = [0u8; 1];
    let n = file.read(&mut head)?;
    if n == 0 {
        return Err(MeasureError::Format("empty file".into()));
    }
    if head[0] == 0x80 {
        // The pickle reader buffers by itself: the file goes in unbuffered.
        let snap = snapshot::read_streaming(
            std::io::Cursor::new(head).chain(file),
            len,
            pickle::Limits::default(),
        )?;
        return Ok(analysis::analyze_snapshot(&snap));
    }
    let mut r = BufReader::new(file);
    if len > MAX_JSON_BYTES {
        return Err(MeasureError::Format(format!(
            "{len} bytes: larger than the {MAX_JSON_BYTES}-byte limit for JSON records"
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    bytes.push(head[0]);
    r.read_to_end(&mut bytes)?;
    analyze_bytes(&bytes)
}
