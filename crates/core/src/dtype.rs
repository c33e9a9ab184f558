//! Storage data types of tensors and their exact byte sizes.

use crate::ggml::GgmlType;
use std::fmt;

/// The storage type of a tensor: a plain element type (as safetensors and PyTorch name them)
/// or a ggml block-quantized type from a GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    /// float8 e4m3 (`torch.float8_e4m3fn`)
    F8E4M3,
    F8E5M2,
    F8E8M0,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    /// 6-bit MX floats (packed)
    F6E2M3,
    F6E3M2,
    /// 4-bit MX float (packed)
    F4,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
    C64,
    /// A ggml block type (quantized or not) as read from a GGUF header.
    Ggml(GgmlType),
}

impl DType {
    /// Bits per element for plain types; `None` for ggml block types (use [`DType::bytes_for`]).
    pub fn bits(self) -> Option<u64> {
        use DType::*;
        Some(match self {
            F64 | I64 | U64 | C64 => 64,
            F32 | I32 | U32 => 32,
            F16 | BF16 | I16 | U16 => 16,
            F8E4M3 | F8E5M2 | F8E8M0 | F8E4M3Fnuz | F8E5M2Fnuz | I8 | U8 | Bool => 8,
            F6E2M3 | F6E3M2 => 6,
            F4 => 4,
            Ggml(_) => return None,
        })
    }

    /// Exact bytes for `elements` values. Sub-byte types pack elements (as safetensors does), so
    /// the bit count must fill whole bytes; ggml types need whole blocks. `None` when the size is
    /// not representable (partial byte or block, or overflow).
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        match self {
            DType::Ggml(t) => t.bytes_for(elements),
            plain => {
                let bits = (elements as u128) * (plain.bits()? as u128);
                if !bits.is_multiple_of(8) {
                    return None;
                }
                u64::try_from(bits / 8).ok()
            }
        }
    }

    /// Bytes per element as a float (block overhead included for ggml types).
    pub fn bytes_per_element(self) -> f64 {
        match self {
            DType::Ggml(t) => t.bits_per_element() / 8.0,
            plain => plain.bits().unwrap_or(0) as f64 / 8.0,
        }
    }

    /// Whether the type holds floating-point values (trainable weights).
    pub fn is_float(self) -> bool {
        use DType::*;
        !matches!(self, I64 | I32 | I16 | I8 | U64 | U32 | U16 | U8 | Bool)
    }

    /// The safetensors spelling (`BF16`, `F8_E4M3`, ...) or the ggml name.
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F64 => "F64",
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            F8E4M3 => "F8_E4M3",
            F8E5M2 => "F8_E5M2",
            F8E8M0 => "F8_E8M0",
            F8E4M3Fnuz => "F8_E4M3FNUZ",
            F8E5M2Fnuz => "F8_E5M2FNUZ",
            F6E2M3 => "F6_E2M3",
            F6E3M2 => "F6_E3M2",
            F4 => "F4",
            I64 => "I64",
            I32 => "I32",
            I16 => "I16",
            I8 => "I8",
            U64 => "U64",
            U32 => "U32",
            U16 => "U16",
            U8 => "U8",
            Bool => "BOOL",
            C64 => "C64",
            Ggml(t) => t.name(),
        }
    }

    /// Parses a safetensors dtype string, a ggml type name, or a PyTorch/HF spelling
    /// (`bfloat16`, `float16`, `float32`, `torch.float16`, `half`, `float`, `fp16`, `bf16`, ...).
    pub fn parse(s: &str) -> Option<Self> {
        use DType::*;
        let t = s.trim();
        let t = t.strip_prefix("torch.").unwrap_or(t);
        let lower = t.to_ascii_lowercase();
        let plain = match lower.as_str() {
            "f64" | "float64" | "double" | "fp64" => Some(F64),
            "f32" | "float32" | "float" | "fp32" => Some(F32),
            "f16" | "float16" | "half" | "fp16" => Some(F16),
            "bf16" | "bfloat16" => Some(BF16),
            "f8_e4m3" | "float8_e4m3fn" | "fp8" | "fp8_e4m3" => Some(F8E4M3),
            "f8_e5m2" | "float8_e5m2" => Some(F8E5M2),
            "f8_e8m0" | "float8_e8m0fnu" => Some(F8E8M0),
            "f8_e4m3fnuz" | "float8_e4m3fnuz" => Some(F8E4M3Fnuz),
            "f8_e5m2fnuz" | "float8_e5m2fnuz" => Some(F8E5M2Fnuz),
            "f6_e2m3" => Some(F6E2M3),
            "f6_e3m2" => Some(F6E3M2),
            "f4" => Some(F4),
            "i64" | "int64" | "long" => Some(I64),
            "i32" | "int32" | "int" => Some(I32),
            "i16" | "int16" | "short" => Some(I16),
            "i8" | "int8" => Some(I8),
            "u64" | "uint64" => Some(U64),
            "u32" | "uint32" => Some(U32),
            "u16" | "uint16" => Some(U16),
            "u8" | "uint8" => Some(U8),
            "bool" => Some(Bool),
            "c64" | "complex64" => Some(C64),
            _ => None,
        };
        plain.or_else(|| GgmlType::from_name(t).map(Ggml))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

crate::serde_name::serde_by_name!(DType, name, DType::parse, "dtype");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(DType::BF16.bytes_for(10), Some(20));
        assert_eq!(DType::F32.bytes_for(3), Some(12));
        assert_eq!(DType::F4.bytes_for(3), None); // 12 bits is not whole bytes
        assert_eq!(DType::F4.bytes_for(4), Some(2));
        assert_eq!(DType::F6E2M3.bytes_for(4), Some(3));
        assert_eq!(DType::F64.bytes_for(u64::MAX), None);
    }

    #[test]
    fn parse_spellings() {
        assert_eq!(DType::parse("bfloat16"), Some(DType::BF16));
        assert_eq!(DType::parse("torch.float16"), Some(DType::F16));
        assert_eq!(DType::parse("F8_E4M3"), Some(DType::F8E4M3));
        assert_eq!(DType::parse("q4_k"), Some(DType::Ggml(GgmlType::Q4_K)));
        assert_eq!(DType::parse("bfloat61"), None);
        for d in [DType::F8E5M2, DType::Bool, DType::Ggml(GgmlType::IQ2_XXS)] {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
    }
}
