//! GPTQ and AWQ storage: packed int32 weights with per-group fp16 scales and packed zeros.
//!
//! Sources: AutoGPTQ `qlinear_cuda.py` `QuantLinear`: `qweight` int32 `[in//32*bits, out]`,
//! `qzeros` int32 `[ceil(in/g), out//32*bits]`, `scales` fp16 `[ceil(in/g), out]`, `g_idx`
//! int32 `[in]`. AutoAWQ `awq/modules/linear/gemm.py` `WQLinear_GEMM`: `qweight` int32
//! `[in, out/8]`, `qzeros` int32 `[in/g, out/8]`, `scales` fp16 `[in/g, out]` (asserts
//! `in % g == 0`).

use super::matrix::{sum, Matrix};
use crate::error::CoreError;
use crate::inventory::Tensor;

pub use crate::job::weight_format::DEFAULT_GROUP;

/// AutoGPTQ `QuantLinear` (`group: None` is one group per column, `group_size=-1`).
pub(super) fn gptq_bytes(m: Matrix, bits: u32, group: Option<u64>) -> Option<u64> {
    let Matrix { out, inp, .. } = m;
    let bits = u64::from(bits);
    let g = group.unwrap_or(inp).max(1);
    let groups = inp.div_ceil(g);
    let qweight = (inp / 32 * bits)
        .checked_mul(out)
        .and_then(|x| x.checked_mul(4));
    let qzeros = groups
        .checked_mul(out / 32 * bits)
        .and_then(|x| x.checked_mul(4));
    let scales = groups.checked_mul(out).and_then(|x| x.checked_mul(2));
    let g_idx = inp.checked_mul(4);
    sum(&[qweight, qzeros, scales, g_idx])?.checked_mul(m.batch)
}

/// AutoAWQ `WQLinear_GEMM`; an error when the shape is not packable as AutoAWQ asserts.
pub(super) fn awq_bytes(
    t: &Tensor,
    m: Matrix,
    bits: u32,
    group: Option<u64>,
) -> Result<Option<u64>, CoreError> {
    let Matrix { out, inp, .. } = m;
    let pack = 32 / u64::from(bits.max(1));
    let g = group.unwrap_or(inp).max(1);
    if inp % g != 0 || out % pack != 0 {
        return Err(CoreError::InvalidTensor {
            name: t.name.clone(),
            reason: format!(
                "AWQ needs in_features ({inp}) divisible by the group size {g} and \
                 out_features ({out}) divisible by {pack}"
            ),
        });
    }
    let qweight = inp.checked_mul(out / pack).and_then(|x| x.checked_mul(4));
    let qzeros = (inp / g)
        .checked_mul(out / pack)
        .and_then(|x| x.checked_mul(4));
    let scales = (inp / g).checked_mul(out).and_then(|x| x.checked_mul(2));
    Ok(sum(&[qweight, qzeros, scales]).and_then(|one| one.checked_mul(m.batch)))
}
