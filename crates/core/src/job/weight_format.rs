//! The contract's `weights` field: the formats, their spelling, and parsing it.

mod ct;
mod file_type;

pub use ct::{CtFormat, CtKind, CtStrategy};
pub use file_type::FileType;

use crate::error::CoreError;
use crate::ggml::GgmlType;
use std::fmt;

/// Default GPTQ/AWQ group size (AutoGPTQ's and AutoAWQ's `group_size=128`).
pub const DEFAULT_GROUP: u64 = 128;

/// The GGUF variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufFormat {
    /// Every quantizable tensor in one ggml type (llama-quantize `--pure`).
    Pure(GgmlType),
    /// A llama-quantize file type with its per-tensor mix.
    Mix(FileType),
}

/// How a model's frozen weights are stored (contract field `weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// As stored (the model dtype).
    None,
    /// bitsandbytes LLM.int8 (`Linear8bitLt`, `has_fp16_weights=False`).
    Int8,
    /// bitsandbytes 4-bit NF4, block 64, fp32 absmax.
    Nf4,
    /// bitsandbytes 4-bit FP4, block 64, fp32 absmax.
    Fp4,
    /// NF4 with double quantization (QLoRA): 8-bit absmax, fp32 scale per 256 blocks.
    Nf4Dq,
    /// 1-byte FP8 weights with an fp32 scale per tensor, or per `block`×`block` tile.
    Fp8 { block: Option<u64> },
    /// OCP MX FP4 on the experts only (transformers `Mxfp4Config`, gpt-oss): E2M1 values in
    /// blocks of 32 along the input dimension, 16 bytes of nibbles and one E8M0 scale byte per
    /// block (4.25 bits a weight); everything else as stored.
    Mxfp4,
    /// FP8 with an fp32 scale per output row (`fbgemm_fp8`, transformers `FbgemmFp8Linear`).
    Fp8Row,
    /// A compressed-tensors checkpoint (llm-compressor / vLLM), kept compressed in memory.
    Ct(CtFormat),
    /// BitNet b1.58 ternary weights (transformers `BitNetQuantConfig`): packed 2-bit
    /// (`bitlinear`), or unpacked to the model dtype on load (`autobitlinear` offline).
    Bitnet { packed: bool },
    /// GPTQ (AutoGPTQ layout); `group: None` is one group per column (`group_size=-1`).
    Gptq { bits: u32, group: Option<u64> },
    /// AWQ (AutoAWQ GEMM layout).
    Awq { bits: u32, group: Option<u64> },
    /// A GGUF file as llama-quantize writes it.
    Gguf(GgufFormat),
}

const FORMS: &str = "none, int8, nf4, fp4, nf4-dq, fp8, fp8:bN, fp8:row, mxfp4, \
                     ct:KIND:STRATEGY[:asym], bitnet, bitnet:unpacked, gptq:BITS[:gN], \
                     awq:4[:gN], gguf:TYPE[:pure]";

fn bad(s: &str, why: &str) -> CoreError {
    CoreError::field("weights", format!("'{s}' {why} (valid: {FORMS})"))
}

/// Parses `:gN` (N ≥ 1) or `:g-1` (one group per column).
fn parse_group(s: &str, part: &str) -> Result<Option<u64>, CoreError> {
    let g = part
        .strip_prefix('g')
        .ok_or_else(|| bad(s, "has a group size that is not gN"))?;
    if g == "-1" {
        return Ok(None);
    }
    match g.parse::<u64>() {
        Ok(n) if (1..=1 << 20).contains(&n) => Ok(Some(n)),
        _ => Err(bad(
            s,
            "has a group size that is not a whole number from 1 to 1048576",
        )),
    }
}

impl WeightFormat {
    /// Parses the contract spelling, case-insensitively.
    pub fn parse(s: &str) -> Result<WeightFormat, CoreError> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let parts: Vec<&str> = lower.split(':').collect();
        Ok(match parts.as_slice() {
            ["none"] => WeightFormat::None,
            ["int8"] => WeightFormat::Int8,
            ["nf4"] => WeightFormat::Nf4,
            ["fp4"] => WeightFormat::Fp4,
            ["nf4-dq"] => WeightFormat::Nf4Dq,
            ["fp8"] => WeightFormat::Fp8 { block: None },
            ["fp8", "row"] => WeightFormat::Fp8Row,
            ["fp8", b] => parse_fp8_block(t, b)?,
            ["ct", rest @ ..] => {
                WeightFormat::Ct(CtFormat::parse(rest).map_err(|why| bad(t, why))?)
            }
            ["bitnet"] => WeightFormat::Bitnet { packed: true },
            ["bitnet", "unpacked"] => WeightFormat::Bitnet { packed: false },
            ["mxfp4"] => WeightFormat::Mxfp4,
            [kind @ ("gptq" | "awq"), bits, rest @ ..] => parse_gptq_awq(t, kind, bits, rest)?,
            ["gguf", ty, rest @ ..] => parse_gguf(t, ty, rest)?,
            _ => return Err(bad(t, "is not a weight format")),
        })
    }

    /// Whether the weights are stored as given.
    pub fn is_none(&self) -> bool {
        *self == WeightFormat::None
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = |g: &Option<u64>| match g {
            Some(n) => format!("g{n}"),
            None => "g-1".to_string(),
        };
        match self {
            WeightFormat::None => f.write_str("none"),
            WeightFormat::Int8 => f.write_str("int8"),
            WeightFormat::Nf4 => f.write_str("nf4"),
            WeightFormat::Fp4 => f.write_str("fp4"),
            WeightFormat::Nf4Dq => f.write_str("nf4-dq"),
            WeightFormat::Fp8 { block: None } => f.write_str("fp8"),
            WeightFormat::Fp8 { block: Some(b) } => write!(f, "fp8:b{b}"),
            WeightFormat::Mxfp4 => f.write_str("mxfp4"),
            WeightFormat::Fp8Row => f.write_str("fp8:row"),
            WeightFormat::Ct(c) => write!(f, "{c}"),
            WeightFormat::Bitnet { packed: true } => f.write_str("bitnet"),
            WeightFormat::Bitnet { packed: false } => f.write_str("bitnet:unpacked"),
            WeightFormat::Gptq { bits, group: g } => write!(f, "gptq:{bits}:{}", group(g)),
            WeightFormat::Awq { bits, group: g } => write!(f, "awq:{bits}:{}", group(g)),
            WeightFormat::Gguf(GgufFormat::Mix(t)) => write!(f, "gguf:{}", t.name()),
            WeightFormat::Gguf(GgufFormat::Pure(t)) => {
                if FileType::from_name(t.name()).is_some() {
                    write!(f, "gguf:{}:pure", t.name())
                } else {
                    write!(f, "gguf:{}", t.name())
                }
            }
        }
    }
}

/// `fp8:bN`: FP8 with an fp32 scale per N×N tile.
fn parse_fp8_block(t: &str, b: &str) -> Result<WeightFormat, CoreError> {
    let n = b
        .strip_prefix('b')
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| (1..=1 << 20).contains(n))
        .ok_or_else(|| bad(t, "has an FP8 block that is not bN"))?;
    Ok(WeightFormat::Fp8 { block: Some(n) })
}

/// `gptq:BITS[:gN]` (2, 3, 4 or 8 bits) and `awq:4[:gN]`; the group defaults to 128.
fn parse_gptq_awq(
    t: &str,
    kind: &str,
    bits: &str,
    rest: &[&str],
) -> Result<WeightFormat, CoreError> {
    let bits: u32 = bits
        .parse()
        .map_err(|_| bad(t, "needs the bits as a number"))?;
    let group = match rest {
        [] => Some(DEFAULT_GROUP),
        [g] => parse_group(t, g)?,
        _ => return Err(bad(t, "has too many parts")),
    };
    if kind == "gptq" {
        if ![2, 3, 4, 8].contains(&bits) {
            return Err(bad(t, "has GPTQ bits other than 2, 3, 4 or 8"));
        }
        Ok(WeightFormat::Gptq { bits, group })
    } else {
        if bits != 4 {
            return Err(bad(
                t,
                "has AWQ bits other than 4 (AutoAWQ supports 4 only)",
            ));
        }
        Ok(WeightFormat::Awq { bits, group })
    }
}

/// `gguf:TYPE[:pure]`: a llama-quantize file type (its mix) or a ggml type (every tensor in
/// it); `:pure` asks for one type even when TYPE names a file type.
fn parse_gguf(t: &str, ty: &str, rest: &[&str]) -> Result<WeightFormat, CoreError> {
    let pure = match rest {
        [] => false,
        ["pure"] => true,
        _ => return Err(bad(t, "has something other than :pure after the GGUF type")),
    };
    let ft = FileType::from_name(ty);
    let gt = GgmlType::from_name(ty);
    Ok(WeightFormat::Gguf(match (pure, ft, gt) {
        (false, Some(f), _) => GgufFormat::Mix(f),
        (_, _, Some(g)) => GgufFormat::Pure(g),
        (true, Some(f), None) => GgufFormat::Pure(f.default_type()),
        (_, None, None) => {
            return Err(bad(
                t,
                "names no llama.cpp type (use a llama-quantize type such as Q4_K_M or \
                 a ggml type such as Q8_0)",
            ))
        }
    }))
}

/// Contract-level parse (the error names the field `weights`).
pub fn parse(s: &str) -> Result<WeightFormat, CoreError> {
    WeightFormat::parse(s)
}
