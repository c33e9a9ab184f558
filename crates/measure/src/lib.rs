//! vramscope-measure: read what PyTorch records about GPU memory — CUDA caching-allocator
//! snapshots (`torch.cuda.memory._dump_snapshot`), profiler memory timelines
//! (`export_memory_timeline`) and Chrome traces — and say where every byte went, in the same
//! categories as the estimate (`vramscope_core::report::Category`).
//!
//! Every reader is bounded: pickles are parsed by a non-executing VM ([`pickle`]) whose length
//! prefixes are checked against the file size; JSON input is capped at [`MAX_JSON_BYTES`], its
//! gzip expansion at [`MAX_GZIP_RATIO`] and its strings at [`MAX_JSON_STRING`] (`bounded`).

pub mod alloc_replay;
pub mod allocator_section;
pub mod analysis;
pub mod attribute;
mod bounded;
pub mod calibrate;
pub mod chrome;
mod fxhash;
pub mod infer;
pub mod logs;
pub mod pickle;
pub mod profiler;
mod replay;
mod site;
pub mod snapshot;
mod snapshot_replay;
pub mod traced_device;

pub use analysis::{Analysis, MeasuredComponents, MeasuredPerGpu};

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

pub use bounded::{MAX_GZIP_RATIO, MAX_JSON_BYTES, MAX_JSON_STRING};

/// Largest memory timeline (a list of lists, read whole into a JSON tree: several times its
/// size in memory); `export_memory_timeline` writes a few MB for a long run.
pub const MAX_TIMELINE_BYTES: u64 = 256 << 20;

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
        Some(_) => analyze_json_reader(json_reader(bytes)?),
        None => Err(MeasureError::Format("empty file".into())),
    }
}

/// Reads from `r` into `prefix` until `enough(prefix)` or end of input, 64 KiB at most.
fn read_prefix<R: Read>(
    r: &mut R,
    prefix: &mut Vec<u8>,
    enough: impl Fn(&[u8]) -> bool,
) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    while !enough(prefix) && prefix.len() < 1 << 16 {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        prefix.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// A buffered reader of a JSON record, gunzipped when it is gzipped, that fails past
/// [`MAX_JSON_BYTES`] (a gzip bomb stops there).
fn json_reader<'a, R: Read + 'a>(mut r: R) -> Result<Box<dyn BufRead + 'a>, MeasureError> {
    let mut prefix = Vec::new();
    read_prefix(&mut r, &mut prefix, |p| p.len() >= 2)?;
    let gz = prefix.starts_with(&[0x1f, 0x8b]);
    let whole = std::io::Cursor::new(prefix).chain(r);
    Ok(if gz {
        let count = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = bounded::Counting {
            inner: whole,
            count: count.clone(),
        };
        let d = flate2::read::GzDecoder::new(counted);
        Box::new(BufReader::new(bounded::Bounded::gunzipped(d, count)))
    } else {
        Box::new(BufReader::new(bounded::Bounded::new(whole)))
    })
}

/// The first two bytes that are not whitespace (the second only after a `[`).
fn sniff(prefix: &[u8]) -> (Option<u8>, Option<u8>) {
    let mut it = prefix.iter().copied().filter(|b| !b.is_ascii_whitespace());
    let first = it.next();
    let second = if first == Some(b'[') { it.next() } else { None };
    (first, second)
}

/// Chrome traces (an object, or a list of event objects) are read as a stream; memory
/// timelines (lists of lists, small) whole.
fn analyze_json_reader(mut r: Box<dyn BufRead + '_>) -> Result<Analysis, MeasureError> {
    let mut prefix = Vec::new();
    read_prefix(&mut r, &mut prefix, |p| {
        let (a, b) = sniff(p);
        a.is_some() && (a != Some(b'[') || b.is_some())
    })
    .map_err(io_format)?;
    let kind = sniff(&prefix);
    let r = std::io::Cursor::new(prefix).chain(r);
    match kind {
        (Some(b'{'), _) | (Some(b'['), Some(b'{')) => chrome::analyze_reader(BufReader::new(r)),
        (Some(b'['), _) => {
            let mut bytes = Vec::new();
            r.take(MAX_TIMELINE_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(io_format)?;
            if bytes.len() as u64 > MAX_TIMELINE_BYTES {
                return Err(MeasureError::Format(format!(
                    "a memory timeline of more than {MAX_TIMELINE_BYTES} bytes (they are a few MB)"
                )));
            }
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| MeasureError::Format(format!("JSON: {e}")))?;
            profiler::analyze_json(&v)
        }
        _ => Err(MeasureError::Format(
            "not a PyTorch memory record: expected a pickle (snapshot), JSON or gzipped JSON \
             (profiler timeline, Chrome trace)"
                .into(),
        )),
    }
}

/// Read errors of JSON records (a corrupt gzip stream, a bomb) as format errors.
fn io_format(e: std::io::Error) -> MeasureError {
    MeasureError::Format(e.to_string())
}

/// Analyzes a JSON record (gzipped or not) as it streams from `r`: never held whole.
pub fn analyze_json_stream<R: Read>(r: R) -> Result<Analysis, MeasureError> {
    analyze_json_reader(json_reader(r)?)
}

/// Analyzes a record file. Pickles and Chrome traces are streamed (the file is never held
/// whole in memory).
pub fn analyze_file(path: &Path) -> Result<Analysis, MeasureError> {
    let (mut file, len) = vramscope_formats::files::open_regular(path)?;
    let mut head = [0u8; 1];
    let n = file.read(&mut head)?;
    if n == 0 {
        return Err(MeasureError::Format("empty file".into()));
    }
    let whole = std::io::Cursor::new(head).chain(file);
    if head[0] == 0x80 {
        // The pickle reader buffers by itself: the file goes in unbuffered.
        let snap = snapshot::read_streaming(whole, len, pickle::Limits::default())?;
        return Ok(analysis::analyze_snapshot(&snap));
    }
    analyze_json_reader(json_reader(whole)?)
}
