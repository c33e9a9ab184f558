//! Weight formats whose layout another library defines: compressed-tensors (llm-compressor /
//! vLLM checkpoints), FBGEMM's row-scaled FP8 and BitNet b1.58's packed ternary weights. Each
//! is sized as the module that holds it in memory allocates it.

use super::matrix::{sum, Matrix};
pub use crate::job::weight_format::{CtFormat, CtKind, CtStrategy};

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
