//! The contract's `kv_dtype` field: how a KV cache stores its values (vLLM's
//! `--kv-cache-dtype`, llama.cpp's `--cache-type-k/-v`), and the bytes a value takes. The
//! cache's size is `estimate::kv`'s.

use crate::error::CoreError;

/// How the KV cache stores its values (contract `kv_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    /// `fp16` or `bf16`.
    Half,
    /// `fp8`, `fp8_e4m3`, `fp8_e5m2` (vLLM) or `int8`: one byte.
    Byte,
    Fp32,
    /// llama.cpp's `q8_0`: blocks of 32 values in 34 bytes (ggml `block_q8_0`).
    Q8_0,
    /// llama.cpp's `q4_0`: blocks of 32 values in 18 bytes (ggml `block_q4_0`).
    Q4_0,
}

impl KvDtype {
    /// Parses the contract spelling, case-insensitively.
    pub fn parse(s: &str) -> Result<Self, CoreError> {
        let lower = s.to_ascii_lowercase();
        Ok(match lower.as_str() {
            "fp16" | "bf16" => KvDtype::Half,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "int8" => KvDtype::Byte,
            "fp32" => KvDtype::Fp32,
            "q8_0" => KvDtype::Q8_0,
            "q4_0" => KvDtype::Q4_0,
            other => {
                return Err(CoreError::field(
                    "kv_dtype",
                    format!("'{other}' is not one of fp16, bf16, fp8, int8, q4_0, q8_0"),
                ))
            }
        })
    }

    /// (block bytes, block values): bytes per value for the plain types.
    pub fn width(self) -> (u64, u64) {
        match self {
            KvDtype::Half => (2, 1),
            KvDtype::Byte => (1, 1),
            KvDtype::Fp32 => (4, 1),
            KvDtype::Q8_0 => (34, 32),
            KvDtype::Q4_0 => (18, 32),
        }
    }
}
