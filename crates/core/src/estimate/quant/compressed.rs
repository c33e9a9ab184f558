//! Weight formats whose layout another library defines: compressed-tensors (llm-compressor /
//! vLLM checkpoints), FBGEMM's row-scaled FP8 and BitNet b1.58's packed ternary weights. Each
//! is sized as the module that holds it in memory allocates it.

use super::linear::{sum, Matrix};
use std::fmt;

/// The element type a compressed-tensors scheme stores (`QuantizationArgs.type`, `num_bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtKind {
    /// Integers packed into int32 words (`pack-quantized`: the w4a16 / w8a16 layout).
    IntPacked { bits: u32 },
    /// One int8 per value (`int-quantized` / `naive-quantized`).
    Int8,
    /// One FP8 E4M3 byte per value (`float-quantized`).
    Fp8,
}

/// How many scales a weight carries (`QuantizationArgs.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtStrategy {
    /// One scale per tensor.
    Tensor,
    /// One scale per output row.
    Channel,
    /// One scale per `group` inputs of each row.
    Group(u64),
    /// One scale per `rows`×`cols` tile.
    Block(u64, u64),
}

/// A compressed-tensors weight scheme: spelled `ct:KIND:STRATEGY[:asym]`, KIND one of `int4`,
/// `int8` (unpacked), `int8p` (packed) or `fp8`; STRATEGY `tensor`, `channel`, `gN` or
/// `bRxC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtFormat {
    pub kind: CtKind,
    pub strategy: CtStrategy,
    /// Asymmetric: a zero point beside each scale (`symmetric: false`).
    pub asym: bool,
}

fn number(s: &str) -> Option<u64> {
    s.parse::<u64>().ok().filter(|n| (1..=1 << 20).contains(n))
}

impl CtFormat {
    /// Parses the parts after `ct:`; the error says what is wrong.
    pub fn parse(parts: &[&str]) -> Result<CtFormat, &'static str> {
        let (kind, strategy, rest) = match parts {
            [k, s, rest @ ..] => (*k, *s, rest),
            _ => return Err("needs ct:KIND:STRATEGY"),
        };
        let kind = match kind {
            "int4" => CtKind::IntPacked { bits: 4 },
            "int8p" => CtKind::IntPacked { bits: 8 },
            "int8" => CtKind::Int8,
            "fp8" => CtKind::Fp8,
            _ => return Err("has a compressed-tensors kind other than int4, int8, int8p or fp8"),
        };
        let strategy = match strategy {
            "tensor" => CtStrategy::Tensor,
            "channel" => CtStrategy::Channel,
            s => parse_sized_strategy(s)?,
        };
        let asym = match rest {
            [] => false,
            ["asym"] if kind != CtKind::Fp8 => true,
            _ => return Err("has something other than :asym (integers only) at the end"),
        };
        Ok(CtFormat {
            kind,
            strategy,
            asym,
        })
    }

    /// Bits of one stored value.
    pub fn value_bits(&self) -> u64 {
        match self.kind {
            CtKind::IntPacked { bits } => u64::from(bits),
            CtKind::Int8 | CtKind::Fp8 => 8,
        }
    }
}

/// `gN` (groups of N inputs) or `bRxC` (R×C tiles).
fn parse_sized_strategy(s: &str) -> Result<CtStrategy, &'static str> {
    if let Some(g) = s.strip_prefix('g') {
        return number(g)
            .map(CtStrategy::Group)
            .ok_or("has a group that is not gN");
    }
    let tile = s
        .strip_prefix('b')
        .and_then(|b| b.split_once('x'))
        .and_then(|(r, c)| Some((number(r)?, number(c)?)));
    match tile {
        Some((r, c)) => Ok(CtStrategy::Block(r, c)),
        None => Err("has a strategy other than tensor, channel, gN or bRxC"),
    }
}

impl fmt::Display for CtFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            CtKind::IntPacked { bits: 8 } => "int8p".to_string(),
            CtKind::IntPacked { bits } => format!("int{bits}"),
            CtKind::Int8 => "int8".into(),
            CtKind::Fp8 => "fp8".into(),
        };
        let strategy = match self.strategy {
            CtStrategy::Tensor => "tensor".to_string(),
            CtStrategy::Channel => "channel".into(),
            CtStrategy::Group(g) => format!("g{g}"),
            CtStrategy::Block(r, c) => format!("b{r}x{c}"),
        };
        let asym = if self.asym { ":asym" } else { "" };
        write!(f, "ct:{kind}:{strategy}{asym}")
    }
}

/// Scales (and zero points) per matrix: `initialize.py`'s `expected_shape` — `(1,)` for a
/// tensor, `(out, 1)` a channel, `(out, ceil(in / g))` groups, `(ceil(out / R), ceil(in / C))`
/// blocks. Returns `(rows, cols)` of the scale tensor.
fn scale_shape(m: Matrix, s: CtStrategy) -> (u64, u64) {
    match s {
        CtStrategy::Tensor => (1, 1),
        CtStrategy::Channel => (m.out, 1),
        CtStrategy::Group(g) => (m.out, m.inp.div_ceil(g)),
        CtStrategy::Block(r, c) => (m.out.div_ceil(r), m.inp.div_ceil(c)),
    }
}

/// Bytes of one weight in compressed-tensors' compressed layout, `elem` the model dtype's
/// bytes (the scale's dtype: `initialize.py` makes it the observed weight's dtype).
///
/// - `pack-quantized` (`compressors/pack_quantized/base.py`): `weight_packed` int32
///   `[out, ceil(in · bits / 32)]`, `weight_shape` int64 `[2]`, and for asymmetric group or
///   channel schemes `weight_zero_point` packed along rows, int32
///   `[ceil(rows · bits / 32), cols]`.
/// - `int-quantized` / `naive-quantized`: `weight` int8, zero points (asymmetric) int8 in the
///   scale's shape (`quant_args.py`: `zp_dtype` is the integer type).
/// - `float-quantized`: `weight` float8_e4m3fn, no zero point.
///
/// Static input-activation scales (one value per layer) are left out.
pub(super) fn ct_bytes(m: Matrix, f: CtFormat, elem: u64) -> Option<u64> {
    let (rows, cols) = scale_shape(m, f.strategy);
    let scales = rows.checked_mul(cols)?;
    let per_matrix = match f.kind {
        CtKind::IntPacked { bits } => {
            let bits = u64::from(bits);
            let words = m.out.checked_mul(m.inp.checked_mul(bits)?.div_ceil(32))?;
            let zp = if f.asym && matches!(f.strategy, CtStrategy::Group(_) | CtStrategy::Channel) {
                rows.checked_mul(bits)?
                    .div_ceil(32)
                    .checked_mul(cols)?
                    .checked_mul(4)?
            } else {
                0
            };
            sum(&[
                words.checked_mul(4),
                scales.checked_mul(elem),
                Some(16),
                Some(zp),
            ])?
        }
        CtKind::Int8 | CtKind::Fp8 => {
            let zp = if f.asym { scales } else { 0 };
            sum(&[m.out.checked_mul(m.inp), scales.checked_mul(elem), Some(zp)])?
        }
    };
    m.batch.checked_mul(per_matrix)
}

/// FBGEMM FP8 (transformers `integrations/fbgemm_fp8.py`, `FbgemmFp8Linear`): `weight`
/// float8 `[out, in]`, `weight_scale` fp32 `[out, 1]` and the fp32 `input_scale_ub` buffer
/// `[1]`.
pub(super) fn fp8_row_bytes(m: Matrix) -> Option<u64> {
    let per = sum(&[m.out.checked_mul(m.inp), m.out.checked_mul(4), Some(4)])?;
    m.batch.checked_mul(per)
}

/// BitNet b1.58 (transformers `integrations/bitnet.py`): `BitLinear` holds the ternary weights
/// packed four to a byte along the output dimension, uint8 `[ceil(out / 4), in]` (`pack_weights`,
/// `VALUES_PER_ITEM = 4`), and a `weight_scale` `[1]` in the model dtype; `AutoBitLinear`
/// offline unpacks the checkpoint to a full `nn.Linear` weight on load (`BitNetDeserialize`)
/// and keeps the same scale.
pub(super) fn bitnet_bytes(m: Matrix, packed: bool, elem: u64) -> Option<u64> {
    let weight = if packed {
        m.out.div_ceil(4).checked_mul(m.inp)?
    } else {
        m.out.checked_mul(m.inp)?.checked_mul(elem)?
    };
    m.batch.checked_mul(weight.checked_add(elem)?)
}

#[cfg(test)]
#[path = "compressed_tests.rs"]
mod tests;
