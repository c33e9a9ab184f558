//! Strict reader for GGUF v2/v3 headers (llama.cpp's model files): metadata, tensor infos, and
//! the exact inventory they imply. Tensor data is never read.
//!
//! Layout (ggml `docs/gguf.md`; llama.cpp `ggml/src/gguf.cpp` `gguf_init_from_reader`), all
//! little-endian:
//!
//! ```text
//! "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//! kv × kv_count:         string key | u32 value_type | value
//! tensor × tensor_count: string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset
//! padding to general.alignment (default 32) | tensor data (offsets relative to its start)
//! string = u64 length + UTF-8 bytes;  array = u32 element type + u64 count + elements
//! ```
//!
//! Every count and length is checked against the bytes left in the file before anything is
//! allocated, and collections grow only as items are actually read, so a hostile header costs
//! at most what the file itself holds. Checks that llama.cpp's loader also makes (duplicate
//! keys and tensor names, alignment a power of two stored as u32, rows made of whole blocks)
//! are errors here too; on top of that zero-sized tensors, n_dims = 0, bools other than 0/1
//! and overlapping tensors are refused. Unlike llama.cpp, tensors need not be stored in header
//! order: any aligned, non-overlapping placement inside the file is accepted.

use crate::error::{FormatError, Result};
use serde::Serialize;
use std::collections::HashSet;
use std::io::{BufReader, Read};
use std::path::Path;
use vramscope_core::ggml::GgmlType;
use vramscope_core::{Component, DType, Inventory, Tensor};

/// The 4 bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// `GGML_MAX_DIMS` in ggml.h.
pub const MAX_DIMS: u32 = 4;
/// Longest string accepted, as llama.cpp's `GGUF_MAX_STRING_LENGTH` (1 GiB).
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Most elements in one array, as llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`.
pub const MAX_ARRAY_LEN: u64 = 1 << 30;
/// Deepest array nesting accepted (an array of arrays is depth 2). llama.cpp reads none;
/// gguf-py can write them; real files stay at 1.
pub const MAX_ARRAY_DEPTH: u32 = 8;

/// Smallest encoding of one metadata entry: key length (8) + value type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoding of one tensor info: name length + n_dims + one dim + type + offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Never reserve more than this many slots up front; vectors grow as items arrive.
const RESERVE_CAP: u64 = 4096;

/// The 13 GGUF metadata value types (`enum gguf_type` in gguf.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl GgufValueType {
    /// The type for an id as stored in the file.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// llama.cpp's short name (`GGUF_TYPE_NAME` in gguf.cpp).
    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "str",
            Array => "arr",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Fewest bytes one value of this type takes in the file (a string is at least its length
    /// field, an array at least its element type and count).
    fn min_size(self) -> u64 {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 4 + 8,
        }
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed metadata array; `Array` holds nested arrays, each with its own element type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<GgufArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufArray {
    pub fn len(&self) -> usize {
        use GgufArray::*;
        match self {
            U8(v) => v.len(),
            I8(v) => v.len(),
            U16(v) => v.len(),
            I16(v) => v.len(),
            U32(v) => v.len(),
            I32(v) => v.len(),
            F32(v) => v.len(),
            Bool(v) => v.len(),
            String(v) => v.len(),
            Array(v) => v.len(),
            U64(v) => v.len(),
            I64(v) => v.len(),
            F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type as stored in the file.
    pub fn element_type(&self) -> GgufValueType {
        use GgufArray as A;
        use GgufValueType as T;
        match self {
            A::U8(_) => T::U8,
            A::I8(_) => T::I8,
            A::U16(_) => T::U16,
            A::I16(_) => T::I16,
            A::U32(_) => T::U32,
            A::I32(_) => T::I32,
            A::F32(_) => T::F32,
            A::Bool(_) => T::Bool,
            A::String(_) => T::String,
            A::Array(_) => T::Array,
            A::U64(_) => T::U64,
            A::I64(_) => T::I64,
            A::F64(_) => T::F64,
        }
    }

    /// Integer elements as u64 (`None` for non-integer arrays or a negative element).
    pub fn to_u64s(&self) -> Option<Vec<u64>> {
        use GgufArray::*;
        fn conv<T: Copy + TryInto<u64>>(v: &[T]) -> Option<Vec<u64>> {
            v.iter().map(|&x| x.try_into().ok()).collect()
        }
        match self {
            U8(v) => conv(v),
            I8(v) => conv(v),
            U16(v) => conv(v),
            I16(v) => conv(v),
            U32(v) => conv(v),
            I32(v) => conv(v),
            U64(v) => conv(v),
            I64(v) => conv(v),
            _ => None,
        }
    }
}

impl GgufValue {
    pub fn value_type(&self) -> GgufValueType {
        use GgufValue as V;
        use GgufValueType as T;
        match self {
            V::U8(_) => T::U8,
            V::I8(_) => T::I8,
            V::U16(_) => T::U16,
            V::I16(_) => T::I16,
            V::U32(_) => T::U32,
            V::I32(_) => T::I32,
            V::F32(_) => T::F32,
            V::Bool(_) => T::Bool,
            V::String(_) => T::String,
            V::Array(_) => T::Array,
            V::U64(_) => T::U64,
            V::I64(_) => T::I64,
            V::F64(_) => T::F64,
        }
    }

    /// A scalar integer of any width as u64; `None` for other types or negative values.
    /// (Writers differ: gguf-py stores most counts as u32, some converters as u64 or i32.)
    pub fn as_u64(&self) -> Option<u64> {
        use GgufValue::*;
        match *self {
            U8(x) => Some(x.into()),
            U16(x) => Some(x.into()),
            U32(x) => Some(x.into()),
            U64(x) => Some(x),
            I8(x) => x.try_into().ok(),
            I16(x) => x.try_into().ok(),
            I32(x) => x.try_into().ok(),
            I64(x) => x.try_into().ok(),
            _ => None,
        }
    }

    /// A scalar number as f64 (integers converted).
    pub fn as_f64(&self) -> Option<f64> {
        use GgufValue::*;
        match *self {
            F32(x) => Some(x.into()),
            F64(x) => Some(x),
            I8(x) => Some(x.into()),
            I16(x) => Some(x.into()),
            I32(x) => Some(x.into()),
            I64(x) => Some(x as f64),
            _ => self.as_u64().map(|x| x as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor info, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Dimensions as stored: `ne[0]` first, the innermost (fastest-varying) one. A PyTorch
    /// `[out, in]` weight is stored as `[in, out]`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section ([`GgufFile::data_offset`]).
    pub offset: u64,
    /// Exact size of the data: elements / block size × bytes per block.
    pub bytes: u64,
}

impl GgufTensorInfo {
    /// Number of elements (checked against overflow when the header was read).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufFile {
    /// The path (or label) given to the reader, used in error messages.
    pub path: String,
    pub version: u32,
    /// Metadata in file order (keys are unique).
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<GgufTensorInfo>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// Absolute file offset of the data section: the header end rounded up to `alignment`.
    pub data_offset: u64,
}

/// The headline facts of a model, from the usual llama.cpp keys (`{arch}.block_count`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GgufSummary {
    pub architecture: Option<String>,
    pub name: Option<String>,
    pub block_count: Option<u64>,
    pub embedding_length: Option<u64>,
    /// The largest entry when a model stores it per layer (an array).
    pub feed_forward_length: Option<u64>,
    /// The largest entry when stored per layer.
    pub head_count: Option<u64>,
    /// The largest entry when stored per layer.
    pub head_count_kv: Option<u64>,
    pub context_length: Option<u64>,
    pub expert_count: Option<u64>,
    pub expert_used_count: Option<u64>,
    /// Length of `tokenizer.ggml.tokens`, else `{arch}.vocab_size`.
    pub vocab_size: Option<u64>,
    /// `general.file_type` (a `llama_ftype`).
    pub file_type: Option<u32>,
    /// Its name in llama.h, e.g. `MOSTLY_Q4_K_M`.
    pub file_type_name: Option<String>,
}

impl GgufFile {
    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `general.architecture` (`llama`, `qwen2`, ...), the prefix of the model's keys.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(GgufValue::as_str)
    }

    /// `{arch}.{suffix}` as an integer; arrays (per-layer values) give their largest entry.
    fn arch_u64(&self, suffix: &str) -> Option<u64> {
        let arch = self.architecture()?;
        let v = self.get(&format!("{arch}.{suffix}"))?;
        match v {
            GgufValue::Array(a) => a.to_u64s()?.into_iter().max(),
            v => v.as_u64(),
        }
    }

    pub fn summary(&self) -> GgufSummary {
        let vocab_size = match self.get("tokenizer.ggml.tokens") {
            Some(GgufValue::Array(a)) => Some(a.len() as u64),
            _ => self.arch_u64("vocab_size"),
        };
        let file_type = self
            .get("general.file_type")
            .and_then(GgufValue::as_u64)
            .and_then(|x| u32::try_from(x).ok());
        GgufSummary {
            architecture: self.architecture().map(str::to_owned),
            name: self
                .get("general.name")
                .and_then(GgufValue::as_str)
                .map(str::to_owned),
            block_count: self.arch_u64("block_count"),
            embedding_length: self.arch_u64("embedding_length"),
            feed_forward_length: self.arch_u64("feed_forward_length"),
            head_count: self.arch_u64("attention.head_count"),
            head_count_kv: self.arch_u64("attention.head_count_kv"),
            context_length: self.arch_u64("context_length"),
            expert_count: self.arch_u64("expert_count"),
            expert_used_count: self.arch_u64("expert_used_count"),
            vocab_size,
            file_type,
            file_type_name: file_type.and_then(ftype_name),
        }
    }

    /// Sum of the tensors' exact bytes (no padding).
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }

    /// One [`Tensor`] per tensor info. Shapes are in PyTorch order (dims reversed, outermost
    /// first), so `blk.0.attn_q.weight` reads `[out, in]` like the HF weight it came from.
    /// ggml's plain types map to the plain dtypes (F32/F16/BF16/F64/I8/I16/I32/I64) so that
    /// per-dtype totals read the same as for safetensors; block types stay `DType::Ggml`.
    /// `layer` is the `blk.N` index (encoder blocks first, then `dec.blk.N`); components
    /// follow llama.cpp's tensor names (`TENSOR_NAMES` in gguf-py `constants.py`), see
    /// [`tensor_component`].
    pub fn inventory(&self) -> Result<Inventory> {
        let enc_layers = self
            .tensors
            .iter()
            .filter_map(|t| match split_block(&t.name) {
                Some((Stack::Encoder, n, _)) => n.checked_add(1),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let mut out = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let shape: Vec<u64> = t.dims.iter().rev().copied().collect();
            let layer = match split_block(&t.name) {
                Some((Stack::Decoder, n, _)) => enc_layers.checked_add(n),
                Some((_, n, _)) => Some(n),
                None => None,
            };
            let tensor = Tensor::new(
                t.name.clone(),
                shape,
                plain_dtype(t.ggml_type),
                layer,
                tensor_component(&t.name),
            )
            .map_err(|source| FormatError::Core {
                path: self.path.clone(),
                source,
            })?;
            out.push(tensor);
        }
        Ok(Inventory::new(out))
    }
}

/// The plain dtype for ggml's non-block types, else `DType::Ggml`.
pub fn plain_dtype(t: GgmlType) -> DType {
    match t {
        GgmlType::F32 => DType::F32,
        GgmlType::F16 => DType::F16,
        GgmlType::BF16 => DType::BF16,
        GgmlType::F64 => DType::F64,
        GgmlType::I8 => DType::I8,
        GgmlType::I16 => DType::I16,
        GgmlType::I32 => DType::I32,
        GgmlType::I64 => DType::I64,
        other => DType::Ggml(other),
    }
}

/// The name of a `general.file_type` value, from `enum llama_ftype` in llama.cpp
/// `include/llama.h` (same values as gguf-py `LlamaFileType`). Ids 4–6 and 33–35 are
/// commented out there (removed) but old files still carry them. Bit 1024
/// (`LLAMA_FTYPE_GUESSED`) adds " (guessed)".
pub fn ftype_name(ftype: u32) -> Option<String> {
    const GUESSED: u32 = 1024;
    if ftype & GUESSED != 0 && ftype != GUESSED {
        return ftype_name(ftype & !GUESSED).map(|n| format!("{n} (guessed)"));
    }
    let name = match ftype {
        0 => "ALL_F32",
        1 => "MOSTLY_F16",
        2 => "MOSTLY_Q4_0",
        3 => "MOSTLY_Q4_1",
        4 => "MOSTLY_Q4_1_SOME_F16",
        5 => "MOSTLY_Q4_2",
        6 => "MOSTLY_Q4_3",
        7 => "MOSTLY_Q8_0",
        8 => "MOSTLY_Q5_0",
        9 => "MOSTLY_Q5_1",
        10 => "MOSTLY_Q2_K",
        11 => "MOSTLY_Q3_K_S",
        12 => "MOSTLY_Q3_K_M",
        13 => "MOSTLY_Q3_K_L",
        14 => "MOSTLY_Q4_K_S",
        15 => "MOSTLY_Q4_K_M",
        16 => "MOSTLY_Q5_K_S",
        17 => "MOSTLY_Q5_K_M",
        18 => "MOSTLY_Q6_K",
        19 => "MOSTLY_IQ2_XXS",
        20 => "MOSTLY_IQ2_XS",
        21 => "MOSTLY_Q2_K_S",
        22 => "MOSTLY_IQ3_XS",
        23 => "MOSTLY_IQ3_XXS",
        24 => "MOSTLY_IQ1_S",
        25 => "MOSTLY_IQ4_NL",
        26 => "MOSTLY_IQ3_S",
        27 => "MOSTLY_IQ3_M",
        28 => "MOSTLY_IQ2_S",
        29 => "MOSTLY_IQ2_M",
        30 => "MOSTLY_IQ4_XS",
        31 => "MOSTLY_IQ1_M",
        32 => "MOSTLY_BF16",
        33 => "MOSTLY_Q4_0_4_4",
        34 => "MOSTLY_Q4_0_4_8",
        35 => "MOSTLY_Q4_0_8_8",
        36 => "MOSTLY_TQ1_0",
        37 => "MOSTLY_TQ2_0",
        38 => "MOSTLY_MXFP4_MOE",
        39 => "MOSTLY_NVFP4",
        40 => "MOSTLY_Q1_0",
        GUESSED => "GUESSED",
        _ => return None,
    };
    Some(name.to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    /// `blk.N.` (decoder-only models, and T5-encoder-only files)
    Main,
    /// `enc.blk.N.` (T5 encoder)
    Encoder,
    /// `dec.blk.N.` (T5 decoder)
    Decoder,
    /// `v.blk.N.`, `a.blk.N.` (vision/audio towers of mmproj files)
    Tower,
}

/// Splits `[enc.|dec.|v.|a.]blk.N.rest` into its stack, N and `rest`.
fn split_block(name: &str) -> Option<(Stack, u32, &str)> {
    let (stack, tail) = if let Some(t) = name.strip_prefix("blk.") {
        (Stack::Main, t)
    } else if let Some(t) = name.strip_prefix("enc.blk.") {
        (Stack::Encoder, t)
    } else if let Some(t) = name.strip_prefix("dec.blk.") {
        (Stack::Decoder, t)
    } else if let Some(t) = name
        .strip_prefix("v.blk.")
        .or_else(|| name.strip_prefix("a.blk."))
    {
        (Stack::Tower, t)
    } else {
        return None;
    };
    let (num, rest) = tail.split_once('.')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stack, num.parse().ok()?, rest))
}

/// The `blk.N` index of a tensor name (also `enc.blk.N`, `dec.blk.N`, `v.blk.N`, `a.blk.N`).
pub fn tensor_block(name: &str) -> Option<u32> {
    split_block(name).map(|(_, n, _)| n)
}

/// Which part of the model a llama.cpp tensor name belongs to (names from `TENSOR_NAMES` in
/// gguf-py `constants.py`, which mirrors llama.cpp's `src/llama-arch.cpp`). Rules, in order:
/// routed experts (`*_exps`, `*_chexps`) → experts; `ffn_gate_inp*`, `exp_probs_b` and
/// `altup_router` → router; token/position/type embeddings (and `token_embd_norm`, which
/// vramscope-core counts with the embedding) → embedding; `output`, `cls*`, `dense_2/3` → head;
/// any norm → norm; sequence mixers (`attn_*`, `cross_attn_*`, `ssm_*`, `time_mix_*`,
/// `shortconv`, MLA's `attn_q_a`/`attn_kv_a_mqa`/`attn_kv_b`, rope tables) → attention;
/// everything else (`ffn_*` incl. `*_shexp` shared experts, `channel_mix_*`, ...) → mlp.
pub fn tensor_component(name: &str) -> Component {
    let (in_block, base) = match split_block(name) {
        Some((_, _, rest)) => (true, rest),
        None => (false, name),
    };
    // Drop a trailing `.weight` / `.bias` / `.scale` (and the like) to get the tensor's stem.
    let stem = match base.rsplit_once('.') {
        Some((s, "weight" | "bias" | "scale" | "scales")) => s,
        _ => base,
    };
    let first = stem.split('.').next().unwrap_or(stem);
    if stem.contains("_exps") || stem.contains("_chexps") {
        return Component::Experts;
    }
    if first.starts_with("ffn_gate_inp") || first == "exp_probs_b" || first == "altup_router" {
        return Component::Router;
    }
    if !in_block {
        let top = stem.strip_prefix("v.").unwrap_or(stem);
        if (top.contains("embd") && !top.starts_with("output")) || stem == "token_types" {
            return Component::Embedding;
        }
        if stem == "output" || stem.starts_with("cls") || stem.starts_with("dense_") {
            return Component::Head;
        }
    }
    let is_norm = stem.contains("norm")
        || stem
            .split(['.', '_'])
            .any(|p| matches!(p, "ln" | "ln1" | "ln2" | "layernorm"));
    if is_norm {
        return Component::Norm;
    }
    let mixer = ["attn", "cross_attn", "vis_attn", "ssm", "time_mix", "rope"];
    if mixer.iter().any(|p| first.starts_with(p))
        || first == "shortconv"
        || first == "indexer"
        || stem.starts_with("attn.")
    {
        return Component::Attention;
    }
    Component::Mlp
}

/// Reads a GGUF header from `reader`, whose whole file is `file_len` bytes (needed to bound
/// every count and to check that tensor data fits). Only the header is read.
pub fn read_gguf<R: Read>(reader: R, file_len: u64, path: &str) -> Result<GgufFile> {
    Parser {
        r: reader,
        pos: 0,
        len: file_len,
        path,
    }
    .parse()
}

/// Opens `path` and reads its GGUF header (buffered; the tensor data is not read).
pub fn read_gguf_path(path: &Path) -> Result<GgufFile> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| FormatError::io(&shown, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(&shown, e))?;
    if !meta.is_file() {
        return Err(FormatError::malformed(&shown, "not a regular file"));
    }
    read_gguf(BufReader::with_capacity(1 << 16, file), meta.len(), &shown)
}

struct Parser<'a, R> {
    r: R,
    /// Bytes consumed so far (≤ len).
    pos: u64,
    len: u64,
    path: &'a str,
}

impl<R: Read> Parser<'_, R> {
    fn err(&self, reason: impl Into<String>) -> FormatError {
        FormatError::malformed(self.path, reason)
    }

    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn truncated(&self, what: &dyn Fn() -> String) -> FormatError {
        self.err(format!(
            "file ends inside {} (byte {} of {})",
            what(),
            self.pos,
            self.len
        ))
    }

    fn read_into(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        if buf.len() as u64 > self.remaining() {
            return Err(self.truncated(what));
        }
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.truncated(what)),
            Err(e) => Err(FormatError::io(self.path, e)),
        }
    }

    fn bytes<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.read_into(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.bytes(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.bytes(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed UTF-8 string; the buffer grows only as bytes actually arrive.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let n = self.u64(&|| format!("the length of {}", what()))?;
        if n > MAX_STRING_LEN {
            return Err(self.err(format!(
                "{} claims a length of {n} bytes (limit {MAX_STRING_LEN})",
                what()
            )));
        }
        if n > self.remaining() {
            return Err(self.err(format!(
                "{} claims {n} bytes but only {} remain in the file",
                what(),
                self.remaining()
            )));
        }
        let mut buf = Vec::new();
        match (&mut self.r).take(n).read_to_end(&mut buf) {
            Ok(got) if got as u64 == n => self.pos += n,
            Ok(got) => {
                self.pos += got as u64;
                return Err(self.truncated(what));
            }
            Err(e) => return Err(FormatError::io(self.path, e)),
        }
        String::from_utf8(buf).map_err(|e| {
            self.err(format!(
                "{} is not valid UTF-8 (bad byte at {})",
                what(),
                e.utf8_error().valid_up_to()
            ))
        })
    }

    fn parse(mut self) -> Result<GgufFile> {
        let magic: [u8; 4] = self.bytes(&|| "the magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(self.err(format!(
                "not a GGUF file (starts with {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\")",
                magic[0], magic[1], magic[2], magic[3]
            )));
        }
        let version = self.u32(&|| "the version".into())?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(self.err(
                    "GGUF version 1 is not supported (only versions 2 and 3; v1 used 32-bit \
                     counts and was dropped by llama.cpp)",
                ))
            }
            v if v != 0 && v & 0xffff == 0 => {
                return Err(self.err(format!(
                    "GGUF version field reads {v:#010x}: a big-endian file? only little-endian \
                     GGUF versions 2 and 3 are supported"
                )))
            }
            v => {
                return Err(self.err(format!(
                    "GGUF version {v} is not supported (only versions 2 and 3)"
                )))
            }
        }
        let n_tensors = self.u64(&|| "the tensor count".into())?;
        let n_kv = self.u64(&|| "the metadata count".into())?;
        let rem = self.remaining();
        let kv_min = u128::from(n_kv) * u128::from(MIN_KV_BYTES);
        if kv_min > u128::from(rem) {
            return Err(self.err(format!(
                "metadata count {n_kv} is impossible: it needs at least {kv_min} bytes but only \
                 {rem} remain"
            )));
        }
        let all_min = kv_min + u128::from(n_tensors) * u128::from(MIN_TENSOR_INFO_BYTES);
        if all_min > u128::from(rem) {
            return Err(self.err(format!(
                "tensor count {n_tensors} is impossible: with {n_kv} metadata entries the header \
                 needs at least {all_min} bytes but only {rem} remain"
            )));
        }

        let mut metadata = Vec::with_capacity(n_kv.min(RESERVE_CAP) as usize);
        let mut keys = HashSet::new();
        for i in 0..n_kv {
            let key = self.string(&|| format!("the key of metadata entry {i}"))?;
            if key.is_empty() {
                return Err(self.err(format!("metadata entry {i} has an empty key")));
            }
            if keys.contains(&key) {
                return Err(self.err(format!("metadata key '{key}' appears twice")));
            }
            let what = || format!("the value of metadata '{key}'");
            let id = self.u32(&|| format!("the value type of metadata '{key}'"))?;
            let ty = GgufValueType::from_id(id).ok_or_else(|| {
                self.err(format!(
                    "metadata '{key}' has unknown value type {id} (known: 0-12)"
                ))
            })?;
            let value = self.value(ty, &what, 0)?;
            keys.insert(key.clone());
            metadata.push((key, value));
        }

        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, GgufValue::U32(a))) => u64::from(*a),
            Some((_, v)) => {
                return Err(self.err(format!(
                    "general.alignment must be a u32 (as llama.cpp requires), found {}",
                    v.value_type().name()
                )))
            }
        };
        if !alignment.is_power_of_two() {
            return Err(self.err(format!(
                "general.alignment {alignment} is not a power of two"
            )));
        }

        let mut tensors: Vec<GgufTensorInfo> =
            Vec::with_capacity(n_tensors.min(RESERVE_CAP) as usize);
        let mut names = HashSet::new();
        for i in 0..n_tensors {
            let name = self.string(&|| format!("the name of tensor {i}"))?;
            if names.contains(&name) {
                return Err(self.err(format!("tensor name '{name}' appears twice")));
            }
            let t = self.tensor_info(name, alignment)?;
            names.insert(t.name.clone());
            tensors.push(t);
        }

        let header_end = self.pos;
        // header_end ≤ file_len < 2^64 and alignment ≤ 2^31, so this cannot overflow in
        // practice; checked anyway.
        let data_offset = header_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| self.err("data section offset overflows 64 bits"))?;
        for t in &tensors {
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.bytes));
            match end {
                Some(end) if end <= self.len => {}
                _ => {
                    return Err(self.err(format!(
                        "tensor '{}' ({} bytes at data offset {}) runs past the end of the file \
                         ({} bytes, data section starts at {data_offset})",
                        t.name, t.bytes, t.offset, self.len
                    )))
                }
            }
        }
        let mut order: Vec<&GgufTensorInfo> = tensors.iter().collect();
        order.sort_by_key(|t| t.offset);
        for pair in order.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // Both end inside the file (checked above), so the sum cannot overflow.
            if a.offset + a.bytes > b.offset {
                return Err(self.err(format!(
                    "tensors '{}' (bytes {}..{}) and '{}' (from {}) overlap",
                    a.name,
                    a.offset,
                    a.offset + a.bytes,
                    b.name,
                    b.offset
                )));
            }
        }

        Ok(GgufFile {
            path: self.path.to_owned(),
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    fn tensor_info(&mut self, name: String, alignment: u64) -> Result<GgufTensorInfo> {
        let n_dims = self.u32(&|| format!("the dimension count of tensor '{name}'"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.err(format!(
                "tensor '{name}' has {n_dims} dimensions (must be 1 to {MAX_DIMS})"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut elements: u64 = 1;
        for j in 0..n_dims {
            let d = self.u64(&|| format!("dimension {j} of tensor '{name}'"))?;
            if d == 0 {
                return Err(self.err(format!("tensor '{name}' has dimension {j} of size 0")));
            }
            elements = elements
                .checked_mul(d)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or_else(|| {
                    self.err(format!(
                        "tensor '{name}' has an element count that overflows 63 bits"
                    ))
                })?;
            dims.push(d);
        }
        let id = self.u32(&|| format!("the type of tensor '{name}'"))?;
        let ggml_type = GgmlType::from_id(id)
            .ok_or_else(|| self.err(format!("tensor '{name}' has unknown ggml type id {id}")))?;
        let block = ggml_type.block_size();
        if dims[0].checked_rem(block) != Some(0) {
            return Err(self.err(format!(
                "tensor '{name}' has rows of {} elements, not a multiple of the {} block size {block}",
                dims[0],
                ggml_type.name()
            )));
        }
        let bytes = ggml_type.bytes_for(elements).ok_or_else(|| {
            self.err(format!(
                "tensor '{name}' has a byte size that overflows 64 bits"
            ))
        })?;
        let offset = self.u64(&|| format!("the data offset of tensor '{name}'"))?;
        if offset.checked_rem(alignment) != Some(0) {
            return Err(self.err(format!(
                "tensor '{name}' data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        Ok(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            bytes,
        })
    }

    /// Checks an array's claimed length against the bytes left, before reading any element.
    fn array_len(&mut self, elem: GgufValueType, what: &dyn Fn() -> String) -> Result<u64> {
        let n = self.u64(&|| format!("the length of {}", what()))?;
        if n > MAX_ARRAY_LEN {
            return Err(self.err(format!(
                "{} claims {n} elements (limit {MAX_ARRAY_LEN})",
                what()
            )));
        }
        let need = u128::from(n) * u128::from(elem.min_size());
        if need > u128::from(self.remaining()) {
            return Err(self.err(format!(
                "{} claims {n} {} elements, at least {need} bytes, but only {} remain",
                what(),
                elem.name(),
                self.remaining()
            )));
        }
        Ok(n)
    }

    fn value(
        &mut self,
        ty: GgufValueType,
        what: &dyn Fn() -> String,
        depth: u32,
    ) -> Result<GgufValue> {
        use GgufValueType as T;
        Ok(match ty {
            T::U8 => GgufValue::U8(u8::from_le_bytes(self.bytes(what)?)),
            T::I8 => GgufValue::I8(i8::from_le_bytes(self.bytes(what)?)),
            T::U16 => GgufValue::U16(u16::from_le_bytes(self.bytes(what)?)),
            T::I16 => GgufValue::I16(i16::from_le_bytes(self.bytes(what)?)),
            T::U32 => GgufValue::U32(u32::from_le_bytes(self.bytes(what)?)),
            T::I32 => GgufValue::I32(i32::from_le_bytes(self.bytes(what)?)),
            T::F32 => GgufValue::F32(f32::from_le_bytes(self.bytes(what)?)),
            T::Bool => GgufValue::Bool(self.bool(what)?),
            T::String => GgufValue::String(self.string(what)?),
            T::U64 => GgufValue::U64(u64::from_le_bytes(self.bytes(what)?)),
            T::I64 => GgufValue::I64(i64::from_le_bytes(self.bytes(what)?)),
            T::F64 => GgufValue::F64(f64::from_le_bytes(self.bytes(what)?)),
            T::Array => GgufValue::Array(self.array(what, depth + 1)?),
        })
    }

    fn bool(&mut self, what: &dyn Fn() -> String) -> Result<bool> {
        match self.bytes::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(format!(
                "{} is a bool of value {b} (must be 0 or 1)",
                what()
            ))),
        }
    }

    /// An array header and its elements; `depth` is 1 for a top-level array.
    fn array(&mut self, what: &dyn Fn() -> String, depth: u32) -> Result<GgufArray> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(self.err(format!(
                "{} nests arrays deeper than {MAX_ARRAY_DEPTH} levels",
                what()
            )));
        }
        let id = self.u32(&|| format!("the element type of {}", what()))?;
        let elem = GgufValueType::from_id(id).ok_or_else(|| {
            self.err(format!(
                "{} is an array of unknown value type {id} (known: 0-12)",
                what()
            ))
        })?;
        let n = self.array_len(elem, what)?;
        let cap = n.min(RESERVE_CAP) as usize;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                let mut v: Vec<$t> = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push(<$t>::from_le_bytes(self.bytes(what)?));
                }
                GgufArray::$variant(v)
            }};
        }
        use GgufValueType as T;
        Ok(match elem {
            T::U8 => fixed!(U8, u8),
            T::I8 => fixed!(I8, i8),
            T::U16 => fixed!(U16, u16),
            T::I16 => fixed!(I16, i16),
            T::U32 => fixed!(U32, u32),
            T::I32 => fixed!(I32, i32),
            T::F32 => fixed!(F32, f32),
            T::U64 => fixed!(U64, u64),
            T::I64 => fixed!(I64, i64),
            T::F64 => fixed!(F64, f64),
            T::Bool => {
                let mut v = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push(self.bool(what)?);
                }
                GgufArray::Bool(v)
            }
            T::String => {
                let mut v = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push(self.string(what)?);
                }
                GgufArray::String(v)
            }
            T::Array => {
                let mut v = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push(self.array(what, depth + 1)?);
                }
                GgufArray::Array(v)
            }
        })
    }
}
