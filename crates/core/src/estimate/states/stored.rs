//! Bytes of one weight as it sits on the GPU: in the job's quantized format, as stored when the
//! file already holds it compressed, or at the job's width.

use crate::error::CoreError;
use crate::estimate::overhead::round_size;
use crate::inventory::Tensor;

/// Bytes of one weight as it sits on the GPU: in the job's quantized format when it applies,
/// as stored when the file already holds it compressed (GGUF blocks, packed GPTQ integers,
/// fp8), otherwise at `width` bytes per element; rounded as the allocator rounds.
pub fn stored_bytes(
    weights: &crate::estimate::quant::WeightFormat,
    qctx: &crate::estimate::quant::QuantContext,
    t: &Tensor,
    width: u64,
) -> Result<u64, CoreError> {
    Ok(round_size(stored_bytes_exact(weights, qctx, t, width)?))
}

/// [`stored_bytes`] before the caching allocator's rounding (llama.cpp's buffers hold tensors
/// back to back).
pub fn stored_bytes_exact(
    weights: &crate::estimate::quant::WeightFormat,
    qctx: &crate::estimate::quant::QuantContext,
    t: &Tensor,
    width: u64,
) -> Result<u64, CoreError> {
    let compressed = stored_compressed(t.dtype);
    // A file that already holds the weight compressed keeps it so; only full-precision
    // weights take the job's quantized format.
    // A GGUF format sets every tensor's type (llama.cpp keeps norms and biases in F32).
    let gguf = matches!(weights, crate::estimate::quant::WeightFormat::Gguf(_));
    if !compressed
        && (gguf || (!weights.is_none() && crate::estimate::quant::is_quantized(weights, t)))
    {
        return crate::estimate::quant::tensor_bytes(weights, t, qctx);
    }
    Ok(unquantized_bytes(t.dtype, t.bytes, t.elements(), width))
}

/// Whether a dtype is already compressed in the file (GGUF blocks, packed integers, fp8).
fn stored_compressed(dtype: crate::DType) -> bool {
    match dtype {
        crate::DType::Ggml(g) => !matches!(
            g,
            crate::ggml::GgmlType::F32 | crate::ggml::GgmlType::F16 | crate::ggml::GgmlType::BF16
        ),
        d => !d.is_float() || d.bits().is_some_and(|b| b < 16),
    }
}

/// Bytes of a weight no quantized format applies to: as stored when the file holds it
/// compressed, otherwise `width` bytes per element.
pub(super) fn unquantized_bytes(
    dtype: crate::DType,
    stored: u64,
    elements: u64,
    width: u64,
) -> u64 {
    if stored_compressed(dtype) {
        stored
    } else {
        elements.saturating_mul(width)
    }
}
