//! Bytes of one quantized weight in the formats that quantize `nn.Linear` weights in place
//! (bitsandbytes, GPTQ, AWQ, FP8): the dispatch by format family and the checked sum of parts.

use super::matrix::{sum, Matrix};
use super::{bitsandbytes, compressed, gptq, matrix_dims, ov, QuantContext, WeightFormat};
use crate::error::CoreError;
use crate::inventory::{elements_of, Tensor};

/// Bytes of one quantized weight in a non-GGUF format.
pub(super) fn linear_bytes(
    format: &WeightFormat,
    t: &Tensor,
    ctx: &QuantContext,
) -> Result<u64, CoreError> {
    let n = elements_of(&t.shape).ok_or_else(|| ov(&t.name))?;
    let (batch, out, inp) = matrix_dims(t, ctx)?;
    let m = Matrix { n, batch, out, inp };
    let bytes = match *format {
        WeightFormat::Int8 => bitsandbytes::int8_bytes(m),
        WeightFormat::Nf4 | WeightFormat::Fp4 => bitsandbytes::four_bit_bytes(m),
        WeightFormat::Nf4Dq => bitsandbytes::four_bit_dq_bytes(m),
        WeightFormat::Fp8 { block } => fp8_bytes(m, block),
        WeightFormat::Mxfp4 => mxfp4_bytes(m),
        WeightFormat::Fp8Row => compressed::fp8_row_bytes(m),
        WeightFormat::Ct(c) => compressed::ct_bytes(m, c, t.bytes / n.max(1)),
        WeightFormat::Bitnet { packed } => compressed::bitnet_bytes(m, packed, t.bytes / n.max(1)),
        WeightFormat::Gptq { bits, group } => gptq::gptq_bytes(m, bits, group),
        WeightFormat::Awq { bits, group } => gptq::awq_bytes(t, m, bits, group)?,
        WeightFormat::None | WeightFormat::Gguf(_) => Some(t.bytes),
    };
    bytes.ok_or_else(|| ov(&t.name))
}

/// FP8 weights: one byte per value and an fp32 scale for the tensor, or one per
/// `block`×`block` tile.
fn fp8_bytes(m: Matrix, block: Option<u64>) -> Option<u64> {
    match block {
        None => sum(&[Some(m.n), Some(4)]),
        Some(b) => {
            let tiles = m
                .batch
                .checked_mul(m.out.div_ceil(b))
                .and_then(|x| x.checked_mul(m.inp.div_ceil(b)));
            sum(&[Some(m.n), tiles.and_then(|x| x.checked_mul(4))])
        }
    }
}

/// MXFP4 weights as transformers stores them (`quantizers/quantizer_mxfp4.py`, the checkpoint's
/// `*_blocks` `[.., out, in/32, 16]` uint8 and `*_scales` `[.., out, in/32]` uint8): per output
/// row, `ceil(in / 32)` blocks of 16 bytes of E2M1 nibbles plus one E8M0 scale byte (OCP
/// Microscaling Formats spec v1.0, §5: block size 32, scale E8M0, element FP4 E2M1).
fn mxfp4_bytes(m: Matrix) -> Option<u64> {
    m.batch
        .checked_mul(m.out)?
        .checked_mul(m.inp.div_ceil(32))?
        .checked_mul(17)
}
