//! The header parser: reads the GGUF layout section by section, checking every count and length
//! against the bytes left in the file before anything is allocated.

use super::{
    GgufArray, GgufFile, GgufTensorInfo, GgufValue, GgufValueType, DEFAULT_ALIGNMENT, GGUF_MAGIC,
    MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_STRING_LEN, MIN_KV_BYTES, MIN_TENSOR_INFO_BYTES,
    RESERVE_CAP,
};
use crate::error::{FormatError, Result};
use std::collections::HashSet;
use std::io::Read;
use vramscope_core::ggml::GgmlType;

pub(super) struct Parser<'a, R> {
    r: R,
    /// Bytes consumed so far (≤ len).
    pos: u64,
    len: u64,
    path: &'a str,
}

impl<'a, R: Read> Parser<'a, R> {
    /// A parser at the start of a file of `len` bytes; `path` names it in errors.
    pub(super) fn new(r: R, len: u64, path: &'a str) -> Self {
        Parser {
            r,
            pos: 0,
            len,
            path,
        }
    }

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

    /// The whole header, section by section as the file lays it out (gguf.md in ggml's docs):
    /// header, metadata key-values, tensor infos; then the data section's alignment and bounds.
    pub(super) fn parse(mut self) -> Result<GgufFile> {
        let (version, n_tensors, n_kv) = self.header()?;
        let metadata = self.metadata(n_kv)?;
        let alignment = self.alignment(&metadata)?;
        let tensors = self.tensor_infos(n_tensors, alignment)?;
        let data_offset = self.data_section(&tensors, alignment)?;
        Ok(GgufFile {
            path: self.path.to_owned(),
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    /// Magic, version (2 or 3, little-endian) and the two counts, each count checked against
    /// the smallest bytes its entries could take in what remains of the file.
    fn header(&mut self) -> Result<(u32, u64, u64)> {
        let magic: [u8; 4] = self.bytes(&|| "the magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(self.err(format!(
                "not a GGUF file (starts with {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\")",
                magic[0], magic[1], magic[2], magic[3]
            )));
        }
        let version = self.u32(&|| "the version".into())?;
        self.check_version(version)?;
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
        Ok((version, n_tensors, n_kv))
    }

    /// Versions 2 and 3 are read; version 1 (32-bit counts) and big-endian files are refused.
    fn check_version(&self, version: u32) -> Result<()> {
        match version {
            2 | 3 => Ok(()),
            1 => Err(self.err(
                "GGUF version 1 is not supported (only versions 2 and 3; v1 used 32-bit \
                 counts and was dropped by llama.cpp)",
            )),
            v if v != 0 && v & 0xffff == 0 => Err(self.err(format!(
                "GGUF version field reads {v:#010x}: a big-endian file? only little-endian \
                 GGUF versions 2 and 3 are supported"
            ))),
            v => Err(self.err(format!(
                "GGUF version {v} is not supported (only versions 2 and 3)"
            ))),
        }
    }

    /// The `n_kv` metadata key-values in file order; keys are non-empty and unique.
    fn metadata(&mut self, n_kv: u64) -> Result<Vec<(String, GgufValue)>> {
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
        Ok(metadata)
    }

    /// `general.alignment` (a u32 power of two, as llama.cpp requires), else 32.
    fn alignment(&self, metadata: &[(String, GgufValue)]) -> Result<u64> {
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
        Ok(alignment)
    }

    /// The `n_tensors` tensor infos in file order; names are unique.
    fn tensor_infos(&mut self, n_tensors: u64, alignment: u64) -> Result<Vec<GgufTensorInfo>> {
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
        Ok(tensors)
    }

    /// The data section's offset (the header's end, aligned); every tensor must lie inside the
    /// file and no two may overlap.
    fn data_section(&self, tensors: &[GgufTensorInfo], alignment: u64) -> Result<u64> {
        let header_end = self.pos;
        // header_end ≤ file_len < 2^64 and alignment ≤ 2^31, so this cannot overflow in
        // practice; checked anyway.
        let data_offset = header_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| self.err("data section offset overflows 64 bits"))?;
        for t in tensors {
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
        Ok(data_offset)
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
