//! bitsandbytes storage: LLM.int8 and the 4-bit NF4/FP4 formats, with and without double
//! quantization.
//!
//! Source: bitsandbytes `functional.py` `int8_vectorwise_quant` (int8 `CB` + fp32 `SCB` per
//! output row) and `quantize_4bit` (uint8 packed `(n+1)//2`, fp32 `absmax` per block of 64, a
//! fresh 16-entry fp32 `code` per tensor; with `compress_statistics`: uint8 absmax, fp32
//! `offset`, and a nested blockwise state of block 256 whose fp32 absmax is one per 256 blocks
//! and whose 256-entry `code` is the shared `name2qmap["dynamic"]`).

use super::matrix::{sum, Matrix};

/// bitsandbytes 4-bit block (Params4bit default `blocksize=64`).
pub const BNB_4BIT_BLOCK: u64 = 64;
/// Block of the nested (double) quantization of the 4-bit absmax.
pub const BNB_NESTED_BLOCK: u64 = 256;
/// The NF4/FP4 code table each 4-bit tensor's quant state holds (16 fp32 values).
pub const BNB_4BIT_CODE_BYTES: u64 = 16 * 4;

/// LLM.int8 (`Linear8bitLt`, `has_fp16_weights=False`): int8 `CB` plus an fp32 `SCB` per
/// output row.
pub(super) fn int8_bytes(m: Matrix) -> Option<u64> {
    sum(&[
        Some(m.n),
        m.batch.checked_mul(m.out).and_then(|x| x.checked_mul(4)),
    ])
}

/// NF4/FP4: two values per byte, an fp32 absmax per block of 64 and the 16-entry code.
pub(super) fn four_bit_bytes(m: Matrix) -> Option<u64> {
    let blocks = m.n.div_ceil(BNB_4BIT_BLOCK);
    sum(&[
        Some(m.n / 2 + m.n % 2),
        blocks.checked_mul(4),
        Some(BNB_4BIT_CODE_BYTES),
    ])
}

/// NF4 with double quantization (QLoRA): packed + uint8 absmax + fp32 nested absmax per 256
/// blocks + fp32 offset + 16-entry code.
pub(super) fn four_bit_dq_bytes(m: Matrix) -> Option<u64> {
    let blocks = m.n.div_ceil(BNB_4BIT_BLOCK);
    let nested = blocks.div_ceil(BNB_NESTED_BLOCK);
    sum(&[
        Some(m.n / 2 + m.n % 2),
        Some(blocks),
        nested.checked_mul(4),
        Some(4),
        Some(BNB_4BIT_CODE_BYTES),
    ])
}
