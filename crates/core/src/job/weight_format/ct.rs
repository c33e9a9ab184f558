//! The compressed-tensors spelling of the contract's `weights` field (`ct:KIND:STRATEGY`):
//! the scheme as llm-compressor's `QuantizationArgs` states it (`type`, `num_bits`,
//! `strategy`, `symmetric`). Its bytes are `estimate::quant::compressed`'s.

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
