//! Header-only reader of safetensors files and Hugging Face checkpoints: one `.safetensors` file,
//! a directory of them, or a sharded checkpoint with `model.safetensors.index.json`.
//!
//! File layout (safetensors `README.md`; crate 0.8 `src/tensor.rs`): a `u64` little-endian header
//! length N, N bytes of UTF-8 JSON `{"__metadata__": {str: str}, NAME: {"dtype", "shape",
//! "data_offsets": [begin, end)}}` (padded with spaces), then the data buffer. Only the first
//! 8 + N bytes of a file are read, never the data.
//!
//! The header is parsed with our own serde visitors instead of `safetensors::tensor::Metadata`:
//! they name the tensor and rule in every error, reject duplicate tensor names (the crate's
//! `HashMap` keeps the last silently), keep a deterministic order, avoid `usize` limits, and need
//! no extra dependency. The checks are the crate's (`Metadata::validate`, `read_metadata`):
//! header at most 100,000,000 bytes, offsets contiguous from 0 with no overlap or gap,
//! `end - begin` = elements × bits / 8, and `8 + N + data_len` equal to the file size.

use crate::error::{FormatError, Result};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::path::Path;
use vramscope_core::DType;

mod checkpoint;
mod header_json;

pub use checkpoint::*;
use header_json::RawHeader;

/// Largest header the safetensors crate accepts (`MAX_HEADER_SIZE` in 0.8 `src/tensor.rs`).
pub const MAX_HEADER_SIZE: u64 = 100_000_000;

/// Largest index file we read. DeepSeek-V3's index (~91k tensors) is about 9 MB.
pub const MAX_INDEX_SIZE: u64 = 100_000_000;

/// The index `save_pretrained` writes next to sharded safetensors (transformers
/// `SAFE_WEIGHTS_INDEX_NAME`).
pub const INDEX_NAME: &str = "model.safetensors.index.json";

/// The single-file name `save_pretrained` writes (transformers `SAFE_WEIGHTS_NAME`).
pub const SINGLE_NAME: &str = "model.safetensors";

/// Dtypes a safetensors header may name (safetensors 0.8 `Dtype`); `DType::name` is the spelling.
const ST_DTYPES: [DType; 22] = [
    DType::Bool,
    DType::F4,
    DType::F6E2M3,
    DType::F6E3M2,
    DType::U8,
    DType::I8,
    DType::F8E5M2,
    DType::F8E4M3,
    DType::F8E8M0,
    DType::F8E4M3Fnuz,
    DType::F8E5M2Fnuz,
    DType::I16,
    DType::U16,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::F32,
    DType::C64,
    DType::F64,
    DType::I64,
    DType::U64,
];

/// The dtype a safetensors header spells `s` (`BF16`, `F8_E4M3`, `BOOL`, ...); exact spelling
/// only, unlike `DType::parse` which also takes PyTorch names.
pub fn dtype_from_safetensors(s: &str) -> Option<DType> {
    ST_DTYPES.iter().copied().find(|d| d.name() == s)
}

/// One tensor entry of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// `[begin, end)` relative to the start of the data buffer.
    pub data_offsets: (u64, u64),
}

/// A validated header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SafetensorsHeader {
    /// Tensors in data-offset order (ties, i.e. empty tensors, in header order).
    pub tensors: Vec<StTensor>,
    /// `__metadata__` (Hugging Face writes `{"format": "pt"}`).
    pub metadata: BTreeMap<String, String>,
    /// N, the JSON header length in bytes (padding included).
    pub header_len: u64,
    /// Length of the data buffer: the last tensor's end offset.
    pub data_len: u64,
}

/// Reads and validates the header of a safetensors file of `file_len` bytes from `reader`,
/// which must be at the start of the file. Reads exactly 8 + N bytes. `path` only labels errors.
pub fn read_header<R: Read>(mut reader: R, file_len: u64, path: &str) -> Result<SafetensorsHeader> {
    let bad = |reason: String| FormatError::malformed(path, reason);
    if file_len < 8 {
        return Err(bad(format!(
            "file is {file_len} bytes, too short for the 8-byte header length of a safetensors file"
        )));
    }
    let mut len_bytes = [0u8; 8];
    read_exact(
        &mut reader,
        &mut len_bytes,
        path,
        "the 8-byte header length",
    )?;
    let n = u64::from_le_bytes(len_bytes);
    if n > MAX_HEADER_SIZE {
        return Err(bad(format!(
            "header length {n} bytes exceeds the safetensors limit of {MAX_HEADER_SIZE} bytes \
             (not a safetensors file?)"
        )));
    }
    if n > file_len - 8 {
        return Err(bad(format!(
            "header length {n} bytes runs past the end of the {file_len}-byte file (truncated?)"
        )));
    }
    // Both bounds checked above: n <= 100,000,000 and n <= the file.
    let mut buf = vec![0u8; n as usize];
    read_exact(&mut reader, &mut buf, path, "the JSON header")?;
    let text = std::str::from_utf8(&buf).map_err(|e| {
        bad(format!(
            "header is not valid UTF-8 (at byte {} of the header)",
            e.valid_up_to()
        ))
    })?;
    let raw: RawHeader =
        serde_json::from_str(text).map_err(|e| bad(format!("header JSON: {e}")))?;
    validate(raw, n, file_len, path)
}

fn read_exact<R: Read>(reader: &mut R, buf: &mut [u8], path: &str, what: &str) -> Result<()> {
    reader.read_exact(buf).map_err(|e| {
        if e.kind() == ErrorKind::UnexpectedEof {
            FormatError::malformed(path, format!("file ends inside {what} (truncated?)"))
        } else {
            FormatError::io(path, e)
        }
    })
}

/// Checks a parsed header against the file (as the safetensors crate's `validate` does): each
/// tensor's span, the data buffer tiled without gaps or overlaps, nothing after it.
fn validate(raw: RawHeader, n: u64, file_len: u64, path: &str) -> Result<SafetensorsHeader> {
    let mut tensors = raw.tensors;
    for t in &tensors {
        check_span(t, path)?;
    }
    tensors.sort_by_key(|t| t.data_offsets);
    let data_len = contiguous_data_len(&tensors, path)?;
    check_file_end(n, data_len, file_len, path)?;
    Ok(SafetensorsHeader {
        tensors,
        metadata: raw.metadata,
        header_len: n,
        data_len,
    })
}

/// A tensor's `data_offsets` span exactly the bytes its shape and dtype need.
fn check_span(t: &StTensor, path: &str) -> Result<()> {
    let bad = |reason: String| FormatError::malformed(path, reason);
    let (begin, end) = t.data_offsets;
    if begin > end {
        return Err(bad(format!(
            "tensor '{}': data_offsets [{begin}, {end}] has begin > end",
            t.name
        )));
    }
    let elements = t
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            bad(format!(
                "tensor '{}': element count of shape {:?} overflows 64 bits",
                t.name, t.shape
            ))
        })?;
    let bits = u128::from(elements) * u128::from(t.dtype.bits().unwrap_or(0));
    if !bits.is_multiple_of(8) {
        return Err(bad(format!(
            "tensor '{}': {elements} elements of {} are {bits} bits, not whole bytes",
            t.name, t.dtype
        )));
    }
    let span = end - begin;
    if u128::from(span) != bits / 8 {
        return Err(bad(format!(
            "tensor '{}': data_offsets [{begin}, {end}] span {span} bytes, but shape {:?} \
             of {} needs {} bytes",
            t.name,
            t.shape,
            t.dtype,
            bits / 8
        )));
    }
    Ok(())
}

/// The data buffer's length: the tensors (sorted by offset) must tile it from byte 0 with no
/// overlap and no gap.
fn contiguous_data_len(tensors: &[StTensor], path: &str) -> Result<u64> {
    let bad = |reason: String| FormatError::malformed(path, reason);
    let mut data_len = 0u64;
    let mut prev: Option<&StTensor> = None;
    for t in tensors {
        let (begin, end) = t.data_offsets;
        if let Some(p) = prev.filter(|_| begin < data_len) {
            return Err(bad(format!(
                "tensor '{}' data [{begin}, {end}) overlaps tensor '{}' data [{}, {})",
                t.name, p.name, p.data_offsets.0, p.data_offsets.1
            )));
        }
        if begin > data_len {
            return Err(bad(format!(
                "tensor '{}' starts at data byte {begin}, leaving bytes [{data_len}, {begin}) \
                 of the data buffer unused (offsets must be contiguous)",
                t.name
            )));
        }
        data_len = end;
        prev = Some(t);
    }
    Ok(data_len)
}

/// The 8-byte length, the `n`-byte header and the data buffer end exactly at the end of the file.
fn check_file_end(n: u64, data_len: u64, file_len: u64, path: &str) -> Result<()> {
    let bad = |reason: String| FormatError::malformed(path, reason);
    // n <= 1e8 and data_len is a u64: the sum can still overflow for a hostile data_len.
    let data_end = 8u64
        .checked_add(n)
        .and_then(|x| x.checked_add(data_len))
        .ok_or_else(|| bad(format!("data buffer of {data_len} bytes overflows 64 bits")))?;
    if data_end > file_len {
        return Err(bad(format!(
            "header describes {data_len} bytes of data ending at byte {data_end}, but the file \
             is {file_len} bytes (truncated?)"
        )));
    }
    if data_end < file_len {
        return Err(bad(format!(
            "file has {} bytes after the data buffer that ends at byte {data_end} \
             (safetensors rejects trailing bytes)",
            file_len - data_end
        )));
    }
    Ok(())
}

/// Reads the header of the safetensors file at `path`.
pub fn read_file_header(path: &Path) -> Result<SafetensorsHeader> {
    let shown = path.display().to_string();
    let (file, len) = crate::files::open_regular(path).map_err(|e| FormatError::io(&shown, e))?;
    read_header(file, len, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_spellings_are_the_crates() {
        // The 22 names of safetensors 0.8 `Dtype` (README table), each mapping back to itself.
        let names = [
            "BOOL",
            "F4",
            "F6_E2M3",
            "F6_E3M2",
            "U8",
            "I8",
            "F8_E5M2",
            "F8_E4M3",
            "F8_E8M0",
            "F8_E4M3FNUZ",
            "F8_E5M2FNUZ",
            "I16",
            "U16",
            "F16",
            "BF16",
            "I32",
            "U32",
            "F32",
            "C64",
            "F64",
            "I64",
            "U64",
        ];
        for n in names {
            assert_eq!(dtype_from_safetensors(n).map(|d| d.name()), Some(n));
        }
        for n in ["bf16", "bfloat16", "Q4_K", "float32", ""] {
            assert_eq!(dtype_from_safetensors(n), None, "{n}");
        }
    }
}
