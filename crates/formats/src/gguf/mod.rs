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
use std::io::{BufReader, Read};
use std::path::Path;
use vramscope_core::ggml::GgmlType;
use vramscope_core::{DType, Inventory, Tensor};

mod names;
mod parser;

pub use names::{ftype_name, tensor_block, tensor_component};
use names::{split_block, Stack};
use parser::Parser;

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

/// The 13 GGUF metadata value types in one table (`enum gguf_type` in gguf.h, ids in file
/// order; names as llama.cpp's `GGUF_TYPE_NAME` in gguf.cpp): each row is the variant, its id,
/// its short name, the Rust type of one value and of one array element. [`GgufValueType`],
/// [`GgufValue`] and [`GgufArray`] and the maps between them are made from it.
macro_rules! gguf_types {
    ($($name:ident = $id:literal, $short:literal, $value:ty, $element:ty;)*) => {
        /// The 13 GGUF metadata value types (`enum gguf_type` in gguf.h).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum GgufValueType {
            $($name = $id,)*
        }

        impl GgufValueType {
            /// The type for an id as stored in the file.
            pub fn from_id(id: u32) -> Option<Self> {
                match id {
                    $($id => Some(Self::$name),)*
                    _ => None,
                }
            }

            /// llama.cpp's short name (`GGUF_TYPE_NAME` in gguf.cpp).
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$name => $short,)*
                }
            }
        }

        /// A metadata value.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum GgufValue {
            $($name($value),)*
        }

        /// A typed metadata array; `Array` holds nested arrays, each with its own element type.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum GgufArray {
            $($name(Vec<$element>),)*
        }

        impl GgufValue {
            pub fn value_type(&self) -> GgufValueType {
                match self {
                    $(Self::$name(_) => GgufValueType::$name,)*
                }
            }
        }

        impl GgufArray {
            pub fn len(&self) -> usize {
                match self {
                    $(Self::$name(v) => v.len(),)*
                }
            }

            /// The element type as stored in the file.
            pub fn element_type(&self) -> GgufValueType {
                match self {
                    $(Self::$name(_) => GgufValueType::$name,)*
                }
            }
        }
    };
}

gguf_types! {
    U8 = 0, "u8", u8, u8;
    I8 = 1, "i8", i8, i8;
    U16 = 2, "u16", u16, u16;
    I16 = 3, "i16", i16, i16;
    U32 = 4, "u32", u32, u32;
    I32 = 5, "i32", i32, i32;
    F32 = 6, "f32", f32, f32;
    Bool = 7, "bool", bool, bool;
    String = 8, "str", String, String;
    Array = 9, "arr", GgufArray, GgufArray;
    U64 = 10, "u64", u64, u64;
    I64 = 11, "i64", i64, i64;
    F64 = 12, "f64", f64, f64;
}

impl GgufValueType {
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

impl GgufArray {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

/// Reads a GGUF header from `reader`, whose whole file is `file_len` bytes (needed to bound
/// every count and to check that tensor data fits). Only the header is read.
pub fn read_gguf<R: Read>(reader: R, file_len: u64, path: &str) -> Result<GgufFile> {
    Parser::new(reader, file_len, path).parse()
}

/// Opens `path` and reads its GGUF header (buffered; the tensor data is not read).
pub fn read_gguf_path(path: &Path) -> Result<GgufFile> {
    let shown = path.display().to_string();
    let (file, len) = crate::files::open_regular(path).map_err(|e| FormatError::io(&shown, e))?;
    read_gguf(BufReader::with_capacity(1 << 16, file), len, &shown)
}
