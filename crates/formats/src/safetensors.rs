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
use crate::hf_names;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Component as PathPart, Path, PathBuf};
use vramscope_core::{DType, Inventory, Tensor};

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
    let file = File::open(path).map_err(|e| FormatError::io(&shown, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(&shown, e))?;
    if !meta.is_file() {
        return Err(FormatError::malformed(&shown, "not a regular file"));
    }
    read_header(file, meta.len(), &shown)
}

// ---------------------------------------------------------------------------------------------
// Header JSON. Seeds carry the tensor name so that serde's messages say which tensor is wrong.

struct RawHeader {
    tensors: Vec<StTensor>,
    metadata: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object mapping tensor names to {dtype, shape, data_offsets}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
        let mut seen = HashSet::new();
        let mut tensors = Vec::new();
        let mut metadata = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if metadata.is_some() {
                    return Err(de::Error::custom("'__metadata__' appears twice"));
                }
                metadata = Some(map.next_value_seed(MetadataSeed)?);
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("tensor '{key}' appears twice")));
            }
            let (dtype, shape, data_offsets) = map.next_value_seed(EntrySeed { name: &key })?;
            tensors.push(StTensor {
                name: key,
                dtype,
                shape,
                data_offsets,
            });
        }
        Ok(RawHeader {
            tensors,
            metadata: metadata.unwrap_or_default(),
        })
    }
}

/// `__metadata__`: an object of strings, or null.
struct MetadataSeed;

impl<'de> DeserializeSeed<'de> for MetadataSeed {
    type Value = BTreeMap<String, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'__metadata__' as an object of strings")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(BTreeMap::new())
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            let what = format!("a string for '__metadata__' key '{k}'");
            let v = map.next_value_seed(StrSeed(&what))?;
            out.insert(k, v);
        }
        Ok(out)
    }
}

/// A JSON string; the `&str` says what it is for in the error.
struct StrSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for StrSeed<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for StrSeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<String, E> {
        Ok(v.to_owned())
    }
}

/// One tensor entry: `{"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}`; other keys are
/// ignored, as the safetensors crate does.
struct EntrySeed<'a> {
    name: &'a str,
}

type Entry = (DType, Vec<u64>, (u64, u64));

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Entry;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Entry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "an object {{dtype, shape, data_offsets}} for tensor '{}'",
            self.name
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Entry, A::Error> {
        let name = self.name;
        let mut dtype: Option<String> = None;
        let mut shape: Option<Vec<u64>> = None;
        let mut offsets: Option<Vec<u64>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let dup = || de::Error::custom(format!("tensor '{name}': '{key}' appears twice"));
            match key.as_str() {
                "dtype" => {
                    if dtype.is_some() {
                        return Err(dup());
                    }
                    let what = format!("a dtype string for tensor '{name}'");
                    dtype = Some(map.next_value_seed(StrSeed(&what))?);
                }
                "shape" | "data_offsets" => {
                    let slot = if key == "shape" {
                        &mut shape
                    } else {
                        &mut offsets
                    };
                    if slot.is_some() {
                        return Err(dup());
                    }
                    *slot = Some(map.next_value_seed(U64ListSeed { name, field: &key })?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing = |f: &str| de::Error::custom(format!("tensor '{name}' has no '{f}'"));
        let dtype = dtype.ok_or_else(|| missing("dtype"))?;
        let dtype = dtype_from_safetensors(&dtype).ok_or_else(|| {
            de::Error::custom(format!("tensor '{name}': unknown dtype '{dtype}'"))
        })?;
        let shape = shape.ok_or_else(|| missing("shape"))?;
        let offsets = offsets.ok_or_else(|| missing("data_offsets"))?;
        let &[begin, end] = offsets.as_slice() else {
            return Err(de::Error::custom(format!(
                "tensor '{name}': data_offsets has {} entries, expected [begin, end]",
                offsets.len()
            )));
        };
        Ok((dtype, shape, (begin, end)))
    }
}

/// A list of non-negative integers (`shape`, `data_offsets`).
struct U64ListSeed<'a> {
    name: &'a str,
    field: &'a str,
}

impl<'de> DeserializeSeed<'de> for U64ListSeed<'_> {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for U64ListSeed<'_> {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a list of non-negative integers for '{}' of tensor '{}'",
            self.field, self.name
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Vec<u64>, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(U64Seed(&self))? {
            out.push(v);
        }
        Ok(out)
    }
}

/// One entry of a [`U64ListSeed`] list: a JSON integer in 0..=u64::MAX. Negative numbers,
/// fractions and anything else fail with the list's description.
struct U64Seed<'a, 'b>(&'a U64ListSeed<'b>);

impl<'de> DeserializeSeed<'de> for U64Seed<'_, '_> {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl<'de> Visitor<'de> for U64Seed<'_, '_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a non-negative integer in '{}' of tensor '{}'",
            self.0.field, self.0.name
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<u64, E> {
        Ok(v)
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

/// What a checkpoint's headers say: every stored tensor with exact bytes, layer and component.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Tensors file by file (files in name order), each file's in data-offset order. Layers are
    /// numbered as the inventory builder does (`hf_names::assign_layers`).
    pub inventory: Inventory,
    /// The safetensors files read.
    pub files: Vec<PathBuf>,
    /// The index's `metadata.total_size` (sum of tensor bytes), when there is an index.
    pub index_total_size: Option<u64>,
    /// The index's `metadata.total_parameters` (transformers 5.x and later).
    pub index_total_parameters: Option<u64>,
    /// The files' `__metadata__` merged; on conflicting values the first file (by name) wins.
    pub metadata: BTreeMap<String, String>,
}

/// Reads a checkpoint's headers. `path` may be:
/// - a `.safetensors` file;
/// - a `*.safetensors.index.json` file (sharded checkpoint);
/// - a directory: its `model.safetensors.index.json` if present, else its only
///   `*.safetensors.index.json`; else `model.safetensors` if present; else every `*.safetensors`
///   file in it (shards whose index was lost), each tensor in exactly one file. PEFT
///   `adapter_model*.safetensors` files are skipped, because an adapter saved next to its base
///   model is a different set of weights; a directory holding only an adapter reads the adapter.
///
/// The index totals are reported, not checked: older transformers versions computed them
/// differently, so a mismatch is for the caller to show, not a reason to refuse the checkpoint.
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(&shown, e))?;
    if meta.is_dir() {
        read_directory(path)
    } else if file_name(path).ends_with(".index.json") {
        read_sharded(path)
    } else {
        read_files(&[path.to_path_buf()])
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_adapter(name: &str) -> bool {
    name.starts_with("adapter_model")
}

fn read_directory(dir: &Path) -> Result<Checkpoint> {
    let shown = dir.display().to_string();
    let index = dir.join(INDEX_NAME);
    if index.is_file() {
        return read_sharded(&index);
    }
    let mut indexes = Vec::new();
    let mut weights = Vec::new();
    let mut adapters = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| FormatError::io(&shown, e))?;
    for entry in entries {
        let p = entry.map_err(|e| FormatError::io(&shown, e))?.path();
        let name = file_name(&p);
        if !p.is_file() {
            continue;
        }
        if name.ends_with(".safetensors.index.json") && !is_adapter(&name) {
            indexes.push(p);
        } else if name.ends_with(".safetensors") {
            if is_adapter(&name) {
                adapters.push(p);
            } else {
                weights.push(p);
            }
        }
    }
    indexes.sort();
    weights.sort();
    adapters.sort();
    match indexes.len() {
        0 => {}
        1 => return read_sharded(&indexes[0]),
        _ => {
            let names: Vec<String> = indexes.iter().map(|p| file_name(p)).collect();
            return Err(FormatError::malformed(
                shown,
                format!(
                    "several safetensors indexes ({}); pass the one to read",
                    names.join(", ")
                ),
            ));
        }
    }
    let single = dir.join(SINGLE_NAME);
    if single.is_file() {
        return read_files(&[single]);
    }
    if !weights.is_empty() {
        return read_files(&weights);
    }
    if !adapters.is_empty() {
        return read_files(&adapters);
    }
    Err(FormatError::malformed(
        shown,
        format!("no {INDEX_NAME} and no *.safetensors file in this directory"),
    ))
}

/// Headers of independent files, merged; a tensor may appear in only one of them.
fn read_files(files: &[PathBuf]) -> Result<Checkpoint> {
    let mut headers = Vec::with_capacity(files.len());
    for f in files {
        headers.push((f.clone(), read_file_header(f)?));
    }
    checkpoint_of_files(headers)
}

/// A checkpoint from the headers of independent files (read from disk or fetched): a tensor may
/// appear in only one of them.
pub fn checkpoint_of_files(headers: Vec<(PathBuf, SafetensorsHeader)>) -> Result<Checkpoint> {
    let mut owner: HashMap<&str, &Path> = HashMap::new();
    for (f, h) in &headers {
        for t in &h.tensors {
            if let Some(first) = owner.insert(&t.name, f) {
                return Err(FormatError::malformed(
                    f.display().to_string(),
                    format!(
                        "tensor '{}' is also in {}; a checkpoint stores each tensor once",
                        t.name,
                        first.display()
                    ),
                ));
            }
        }
    }
    build(headers, None, None)
}

fn read_sharded(index_path: &Path) -> Result<Checkpoint> {
    let shown = index_path.display().to_string();
    let index = read_index(index_path)?;
    let dir = match index_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let shards = index.shards(&shown)?;
    let mut headers = Vec::with_capacity(shards.len());
    for (shard, listed) in &shards {
        let file = dir.join(shard);
        let header = match std::fs::metadata(&file) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(FormatError::malformed(
                    &shown,
                    format!(
                        "shard '{shard}' (for {} tensor(s), e.g. '{}') does not exist in {}",
                        listed.len(),
                        listed[0],
                        dir.display()
                    ),
                ));
            }
            _ => read_file_header(&file)?,
        };
        headers.push((file, header));
    }
    checkpoint_of_shards(&index, headers, &shown)
}

impl Index {
    /// Shard file name → the tensors the index puts there; every name must be a plain file name
    /// inside the checkpoint directory. `shown` labels errors.
    pub fn shards(&self, shown: &str) -> Result<BTreeMap<&str, Vec<&str>>> {
        let mut shards: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tensor, shard) in &self.weight_map {
            if !is_plain_relative(shard) {
                return Err(FormatError::malformed(
                    shown,
                    format!(
                        "weight_map puts tensor '{tensor}' in '{shard}', which is not a file \
                         name inside the checkpoint directory"
                    ),
                ));
            }
            shards.entry(shard).or_default().push(tensor);
        }
        Ok(shards)
    }
}

/// A sharded checkpoint from its index and each shard's header (read from disk or fetched),
/// in the index's shard order: every tensor in exactly the shard the index names.
pub fn checkpoint_of_shards(
    index: &Index,
    headers: Vec<(PathBuf, SafetensorsHeader)>,
    shown: &str,
) -> Result<Checkpoint> {
    let shards = index.shards(shown)?;
    if shards.len() != headers.len() {
        return Err(FormatError::malformed(
            shown,
            format!(
                "the index names {} shards but {} headers were read",
                shards.len(),
                headers.len()
            ),
        ));
    }
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for ((shard, _), (file, header)) in shards.iter().zip(&headers) {
        for t in &header.tensors {
            if let Some(other) = owner.insert(&t.name, shard) {
                return Err(FormatError::malformed(
                    shown,
                    format!(
                        "tensor '{}' is in both shard '{other}' and '{shard}'",
                        t.name
                    ),
                ));
            }
            match index.weight_map.get(&t.name) {
                Some(s) if s == shard => {}
                Some(s) => {
                    return Err(FormatError::malformed(
                        shown,
                        format!(
                            "tensor '{}' is in {} but weight_map puts it in '{s}'",
                            t.name,
                            file.display()
                        ),
                    ))
                }
                None => {
                    return Err(FormatError::malformed(
                        shown,
                        format!(
                            "tensor '{}' is in {} but not in weight_map",
                            t.name,
                            file.display()
                        ),
                    ))
                }
            }
        }
    }
    if owner.len() != index.weight_map.len() {
        if let Some((t, s)) = index
            .weight_map
            .iter()
            .find(|(t, _)| !owner.contains_key(t.as_str()))
        {
            return Err(FormatError::malformed(
                shown,
                format!("weight_map puts tensor '{t}' in '{s}', but that shard has no such tensor"),
            ));
        }
    }
    build(headers, index.total_size, index.total_parameters)
}

/// A shard name from an index must stay inside the checkpoint directory: relative, made of
/// plain names only (no `..`, `.`, root or drive prefix). Symlinks are not resolved: the
/// Hugging Face cache links snapshot files to blobs outside the snapshot directory.
fn is_plain_relative(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, PathPart::Normal(_)))
}

/// A `model.safetensors.index.json`: tensor → shard, and the totals it states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub weight_map: BTreeMap<String, String>,
    pub total_size: Option<u64>,
    pub total_parameters: Option<u64>,
}

fn read_index(path: &Path) -> Result<Index> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|e| FormatError::io(&shown, e))?;
    let len = file
        .metadata()
        .map_err(|e| FormatError::io(&shown, e))?
        .len();
    if len > MAX_INDEX_SIZE {
        return Err(FormatError::malformed(
            &shown,
            format!("index is {len} bytes, more than the {MAX_INDEX_SIZE}-byte limit"),
        ));
    }
    let mut text = String::new();
    file.take(MAX_INDEX_SIZE)
        .read_to_string(&mut text)
        .map_err(|e| FormatError::io(&shown, e))?;
    parse_index(&text, &shown)
}

/// Parses index text (from a file or fetched; the caller bounds its size by
/// [`MAX_INDEX_SIZE`]). `shown` labels errors.
pub fn parse_index(text: &str, shown: &str) -> Result<Index> {
    let shown = shown.to_string();
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| FormatError::malformed(&shown, format!("index is not valid JSON: {e}")))?;
    let field = |field: &str, reason: String| FormatError::Field {
        path: shown.clone(),
        field: field.into(),
        reason,
    };
    let obj = value
        .as_object()
        .ok_or_else(|| FormatError::malformed(&shown, "index is not a JSON object"))?;
    let map = obj
        .get("weight_map")
        .ok_or_else(|| field("weight_map", "missing".into()))?
        .as_object()
        .ok_or_else(|| {
            field(
                "weight_map",
                "not an object of tensor name → shard file".into(),
            )
        })?;
    if map.is_empty() {
        return Err(field("weight_map", "is empty".into()));
    }
    let mut weight_map = BTreeMap::new();
    for (k, v) in map {
        let shard = v.as_str().ok_or_else(|| {
            field(
                &format!("weight_map.{k}"),
                format!("expected a shard file name, found {v}"),
            )
        })?;
        weight_map.insert(k.clone(), shard.to_owned());
    }
    let (mut total_size, mut total_parameters) = (None, None);
    match obj.get("metadata") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(m)) => {
            let count = |key: &str| -> Result<Option<u64>> {
                match m.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => json_count(v).map(Some).ok_or_else(|| {
                        field(
                            &format!("metadata.{key}"),
                            format!("expected a non-negative integer, found {v}"),
                        )
                    }),
                }
            };
            total_size = count("total_size")?;
            total_parameters = count("total_parameters")?;
        }
        Some(v) => return Err(field("metadata", format!("expected an object, found {v}"))),
    }
    Ok(Index {
        weight_map,
        total_size,
        total_parameters,
    })
}

/// A non-negative integer, also when a writer stored it as an integral float (`1.5e9`).
fn json_count(v: &serde_json::Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    // 2^64 as f64 is exact; anything below it with no fraction converts losslessly.
    (f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0).then_some(f as u64)
}

fn build(
    headers: Vec<(PathBuf, SafetensorsHeader)>,
    index_total_size: Option<u64>,
    index_total_parameters: Option<u64>,
) -> Result<Checkpoint> {
    let mut tensors = Vec::new();
    let mut metadata = BTreeMap::new();
    let mut files = Vec::with_capacity(headers.len());
    for (file, header) in headers {
        for (k, v) in header.metadata {
            metadata.entry(k).or_insert(v);
        }
        for t in header.tensors {
            let (layer, component) = hf_names::classify(&t.name);
            let tensor = Tensor::new(t.name, t.shape, t.dtype, layer, component).map_err(|e| {
                FormatError::Core {
                    path: file.display().to_string(),
                    source: e,
                }
            })?;
            tensors.push(tensor);
        }
        files.push(file);
    }
    hf_names::assign_layers(&mut tensors);
    Ok(Checkpoint {
        inventory: Inventory::new(tensors),
        files,
        index_total_size,
        index_total_parameters,
        metadata,
    })
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

    #[test]
    fn shard_names() {
        for ok in ["model-00001-of-00002.safetensors", "sub/x.safetensors"] {
            assert!(is_plain_relative(ok), "{ok}");
        }
        for bad in [
            "",
            "../x.safetensors",
            "/etc/passwd",
            "a/../../b",
            "./x",
            ".",
        ] {
            assert!(!is_plain_relative(bad), "{bad}");
        }
    }

    #[test]
    fn counts_from_json() {
        use serde_json::json;
        assert_eq!(json_count(&json!(247424)), Some(247424));
        assert_eq!(json_count(&json!(1.5e9)), Some(1_500_000_000));
        assert_eq!(json_count(&json!(1.5)), None);
        assert_eq!(json_count(&json!(-1)), None);
        assert_eq!(json_count(&json!(1e30)), None);
        assert_eq!(json_count(&json!("12")), None);
    }
}
