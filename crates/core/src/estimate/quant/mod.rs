//! Storage bytes of weights in every contract `weights` format, tensor by tensor, one module
//! per format family: [`bitsandbytes`] (int8, NF4/FP4, NF4 with double quantization), [`gptq`]
//! (GPTQ and AWQ), FP8 in [`linear`] (which dispatches the formats that quantize `nn.Linear`
//! weights in place), and [`gguf`] (llama-quantize's files, pure or mixed); the `weights`
//! spelling is parsed in [`format`].
//!
//! Which tensors are quantized: for bitsandbytes, GPTQ, AWQ and FP8 only the 2-D (or 3-D expert)
//! weights of the attention, MLP and expert blocks; embeddings, norms, biases, routers and the
//! LM head stay as stored (transformers skips `lm_head` in `llm_int8_skip_modules` /
//! `modules_to_not_convert`; GPTQ/AWQ quantize only the decoder layers). For GGUF, llama.cpp's own
//! rules: every ≥ 2-D `*weight` except norms, routers, position/token-type tables and T5's
//! relative bias, including `token_embd` and `output`.

pub mod bitsandbytes;
pub mod compressed;
pub mod gguf;
pub mod gptq;
mod linear;
mod matrix;

pub use crate::job::weight_format as format;
pub use crate::job::weight_format::{parse, WeightFormat};
pub use bitsandbytes::{BNB_4BIT_BLOCK, BNB_4BIT_CODE_BYTES, BNB_NESTED_BLOCK};
pub use gguf::{FileType, GgufFormat};
pub use gptq::DEFAULT_GROUP;

use crate::error::CoreError;
use crate::ggml::GgmlType;
use crate::inventory::{elements_of, Component, Tensor};
use crate::model::{Head, ModelSpec, Naming};
use crate::DType;
use gguf::gguf_allows;
use linear::linear_bytes;

/// What llama.cpp's per-tensor rules need to know about the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantContext {
    /// Transformer layers (llama.cpp `n_layer`).
    pub n_layers: u32,
    /// Routed experts per MoE layer (0 or 1 for dense models).
    pub n_expert: u64,
    /// Query heads per key/value head in the first layer (`hparams.n_gqa()`).
    pub n_gqa: u64,
    /// llama.cpp's Falcon exceptions.
    pub falcon: bool,
    /// llama.cpp `LLM_TYPE_70B` (80-layer Llama-2/3-70B, Qwen2-72B): attn_v gets more bits.
    pub llm_70b: bool,
    /// 2-D attention/MLP weights are stored `[in, out]` (GPT-2's `Conv1D`).
    pub conv1d: bool,
    /// No separate output matrix: the token embedding gets the output tensor's rules.
    pub tied_embeddings: bool,
    /// Stacked 3-D expert weights are stored `[E, in, out]` (gpt-oss's `GptOssExperts`).
    pub experts_in_out: bool,
}

impl QuantContext {
    /// Reads the context from a model description.
    pub fn from_spec(spec: &ModelSpec) -> Self {
        let n_layers = u32::try_from(spec.num_layers()).unwrap_or(u32::MAX);
        let n_expert = spec
            .all_layers()
            .map(|l| l.routed_experts().map_or(0, |m| m.experts))
            .max()
            .unwrap_or(0);
        let n_gqa = spec
            .all_layers()
            .next()
            .map(|l| {
                let a = l.attention.kind;
                a.heads() / a.kv_heads().max(1)
            })
            .unwrap_or(1);
        let family = spec.model_type.to_ascii_lowercase();
        QuantContext {
            n_layers,
            n_expert,
            n_gqa,
            falcon: family == "falcon",
            llm_70b: matches!(family.as_str(), "llama" | "qwen2") && n_layers == 80 && n_gqa > 1,
            conv1d: spec.naming == Naming::Gpt2,
            tied_embeddings: !matches!(spec.head, Head::LanguageModel { tied: false, .. }),
            experts_in_out: spec.naming == Naming::GptOss,
        }
    }
}

/// One tensor as the format stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Whether the format quantized it (false: kept as stored, or F32 in GGUF).
    pub quantized: bool,
    /// The ggml type it gets in a GGUF file.
    pub ggml: Option<GgmlType>,
    pub bytes: u64,
}

/// Whether bitsandbytes / GPTQ / AWQ / FP8 quantize this tensor: a ≥ 2-D weight of the
/// attention, MLP or expert blocks (T5's relative-position table is an embedding).
fn is_linear_target(t: &Tensor) -> bool {
    matches!(
        t.component,
        Component::Attention | Component::Mlp | Component::Experts
    ) && t.shape.len() >= 2
        && t.name.ends_with("weight")
        && !t.name.contains("relative_attention_bias")
}

/// Whether MXFP4 quantizes this tensor: an expert weight matrix only (transformers
/// `quantizers/quantizer_mxfp4.py` swaps the experts' projections; gpt-oss's
/// `modules_to_not_convert` keeps attention, router, embeddings and head in bf16), not the
/// experts' biases.
fn is_mxfp4_target(t: &Tensor) -> bool {
    t.component == Component::Experts && t.shape.len() >= 2 && !t.name.ends_with("bias")
}

/// Whether `format` quantizes `t` (as opposed to keeping it in its stored dtype).
pub fn is_quantized(format: &WeightFormat, t: &Tensor) -> bool {
    match format {
        WeightFormat::None => false,
        WeightFormat::Gguf(_) => gguf_allows(t),
        WeightFormat::Mxfp4 => is_mxfp4_target(t),
        _ => is_linear_target(t),
    }
}

fn ov(name: &str) -> CoreError {
    CoreError::Overflow {
        what: format!("quantized size of tensor '{name}'"),
    }
}

/// `(matrices, out_features, in_features)` of a weight: `[.., out, in]` for `nn.Linear` (leading
/// dimensions are stacked experts), `[in, out]` for GPT-2's `Conv1D`.
fn matrix_dims(t: &Tensor, ctx: &QuantContext) -> Result<(u64, u64, u64), CoreError> {
    let s = &t.shape;
    let k = s.len();
    if k < 2 {
        return Err(CoreError::InvalidTensor {
            name: t.name.clone(),
            reason: "a quantized weight needs at least two dimensions".into(),
        });
    }
    if ctx.conv1d && k == 2 && matches!(t.component, Component::Attention | Component::Mlp) {
        return Ok((1, s[1], s[0]));
    }
    if ctx.experts_in_out && k == 3 && t.component == Component::Experts {
        return Ok((s[0], s[2], s[1]));
    }
    let batch = elements_of(&s[..k - 2]).ok_or_else(|| ov(&t.name))?;
    Ok((batch, s[k - 2], s[k - 1]))
}

/// Bytes of one tensor in `format`. For GGUF mixes the llama-quantize counters are taken from
/// the tensor's layer index, which is exact for models with one attn_v-like and one ffn_down
/// tensor per layer; use [`storage`] over the whole inventory for the exact walk.
pub fn tensor_bytes(
    format: &WeightFormat,
    tensor: &Tensor,
    ctx: &QuantContext,
) -> Result<u64, CoreError> {
    Ok(stored_one(format, tensor, ctx)?.bytes)
}

fn stored_one(format: &WeightFormat, t: &Tensor, ctx: &QuantContext) -> Result<Stored, CoreError> {
    match format {
        WeightFormat::Gguf(g) => gguf::stored_by_layer(g, t, ctx),
        _ if is_quantized(format, t) => Ok(Stored {
            quantized: true,
            ggml: None,
            bytes: linear_bytes(format, t, ctx)?,
        }),
        _ => Ok(Stored {
            quantized: false,
            ggml: None,
            bytes: t.bytes,
        }),
    }
}

/// How `format` stores every tensor of a model, in the order given. For GGUF this is
/// llama-quantize's walk ([`gguf::walk`]).
pub fn storage(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
) -> Result<Vec<Stored>, CoreError> {
    match format {
        WeightFormat::Gguf(g) => gguf::walk(g, tensors, ctx),
        _ => tensors.iter().map(|t| stored_one(format, t, ctx)).collect(),
    }
}

/// Total bytes of all tensors in `format` (see [`storage`]).
pub fn total_bytes(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
) -> Result<u64, CoreError> {
    storage(format, tensors, ctx)?
        .iter()
        .try_fold(0u64, |a, s| a.checked_add(s.bytes))
        .ok_or_else(|| CoreError::Overflow {
            what: "quantized model size".into(),
        })
}

/// Bits per parameter as a fraction `(numerator, denominator)` when every parameter is
/// quantized and no shapes are known. Per-row and per-tensor extras that need shapes are left
/// out (int8's row scales, FP8's tensor scale, GPTQ's `g_idx`, bnb's 64-byte code tables);
/// a GGUF mix counts its default type.
pub fn bits_per_param(format: &WeightFormat, model_dtype: DType) -> (u64, u64) {
    match *format {
        WeightFormat::None => match model_dtype {
            DType::Ggml(t) => (t.type_size() * 8, t.block_size()),
            d => (d.bits().unwrap_or(16), 1),
        },
        WeightFormat::Int8 => (8, 1),
        // 4 bits + a 32-bit absmax per 64.
        WeightFormat::Nf4 | WeightFormat::Fp4 => (4 * 64 + 32, 64),
        // QLoRA: 4 + 8/64 + 32/(64·256) = 4.126953125.
        WeightFormat::Nf4Dq => (4 * 64 * 256 + 8 * 256 + 32, 64 * 256),
        WeightFormat::Fp8 { block: None } => (8, 1),
        WeightFormat::Fp8 { block: Some(b) } => (8 * b * b + 32, b * b),
        // 32 four-bit values and one 8-bit scale per block.
        WeightFormat::Mxfp4 => (4 * 32 + 8, 32),
        WeightFormat::Fp8Row => (8, 1),
        WeightFormat::Ct(c) => ct_bits(c, model_dtype),
        // Two bits a weight packed; the model dtype unpacked.
        WeightFormat::Bitnet { packed: true } => (2, 1),
        WeightFormat::Bitnet { packed: false } => (model_dtype.bits().unwrap_or(16), 1),
        // bits + (fp16 scale + packed zero) per group.
        WeightFormat::Gptq { bits, group } | WeightFormat::Awq { bits, group } => {
            let b = u64::from(bits);
            match group {
                Some(g) => (b * g + 16 + b, g),
                None => (b, 1),
            }
        }
        WeightFormat::Gguf(GgufFormat::Pure(t)) => (t.type_size() * 8, t.block_size()),
        WeightFormat::Gguf(GgufFormat::Mix(f)) => {
            let t = f.default_type();
            (t.type_size() * 8, t.block_size())
        }
    }
}

/// compressed-tensors' bits per weight: values, plus a scale (model dtype) and, asymmetric, a
/// zero point per group or tile; per-row and per-tensor scales need shapes and are left out.
fn ct_bits(c: compressed::CtFormat, model_dtype: DType) -> (u64, u64) {
    use compressed::CtStrategy;
    let v = c.value_bits();
    let scale = model_dtype.bits().unwrap_or(16);
    let zp = if c.asym { v } else { 0 };
    match c.strategy {
        CtStrategy::Group(g) => (v * g + scale + zp, g),
        CtStrategy::Block(r, k) => (v * r * k + scale + zp, r * k),
        CtStrategy::Tensor | CtStrategy::Channel => (v, 1),
    }
}

/// Bytes of `params` parameters all stored in `format` (rounded up to a whole byte): for a
/// model known only by its parameter count.
pub fn bytes_for_params(
    format: &WeightFormat,
    params: u64,
    model_dtype: DType,
) -> Result<u64, CoreError> {
    let (num, den) = bits_per_param(format, model_dtype);
    let bits = u128::from(params) * u128::from(num);
    let bytes = bits.div_ceil(u128::from(den) * 8);
    u64::try_from(bytes).map_err(|_| CoreError::Overflow {
        what: "quantized parameter bytes".into(),
    })
}

/// The temporary a quantized layer materialises while it runs: the largest quantized weight
/// dequantized to the compute dtype (`compute_bytes` per element).
///
/// - bitsandbytes 4-bit: `MatMul4Bit` dequantizes the whole weight (`dequantize_4bit`) in
///   forward and again in backward; with double quantization the fp32 absmax is dequantized
///   first. (Single-token decoding takes the gemv kernel and dequantizes nothing.)
/// - int8: the forward is an int8 matmul (outlier columns only are dequantized); the backward
///   dequantizes `CB` to the compute dtype (`backward = true`).
/// - GPTQ/AWQ: fp16 dequantization for prefill-sized batches (AutoAWQ from 1024 tokens,
///   AutoGPTQ's torch path); an approximation for the kernels that dequantize in tiles.
/// - FP8 (scaled matmuls), MXFP4 (triton kernels on the packed blocks), GGUF (llama.cpp's own compute buffer) and none: nothing here.
/// - compressed-tensors: sized as vLLM holds it, whose kernels (Marlin, CUTLASS FP8) read the
///   compressed weights (nothing here). transformers instead decompresses the whole model on
///   its first forward (`ModelCompressor.add_decompress_hook`): `--weights none` models that.
/// - BitNet packed: `BitLinear.forward` unpacks the whole weight (`unpack_weights`); unpacked
///   (`AutoBitLinear` offline) multiplies the stored weight (nothing here).
pub fn dequant_scratch_bytes(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
    compute_bytes: u64,
    backward: bool,
) -> Result<u64, CoreError> {
    let per_elem_extra_dq = matches!(format, WeightFormat::Nf4Dq);
    let applies = match format {
        WeightFormat::Nf4 | WeightFormat::Fp4 | WeightFormat::Nf4Dq => true,
        WeightFormat::Int8 => backward,
        WeightFormat::Gptq { .. } | WeightFormat::Awq { .. } => true,
        WeightFormat::Bitnet { packed } => *packed,
        // MXFP4's matmuls (triton `matmul_ogs`) read the packed weights.
        WeightFormat::None
        | WeightFormat::Fp8 { .. }
        | WeightFormat::Fp8Row
        | WeightFormat::Ct(_)
        | WeightFormat::Mxfp4
        | WeightFormat::Gguf(_) => false,
    };
    if !applies {
        return Ok(0);
    }
    let mut peak = 0u64;
    for t in tensors.iter().filter(|t| is_linear_target(t)) {
        let (_, out, inp) = matrix_dims(t, ctx)?;
        let n = out.checked_mul(inp).ok_or_else(|| ov(&t.name))?;
        let mut b = n.checked_mul(compute_bytes).ok_or_else(|| ov(&t.name))?;
        if per_elem_extra_dq {
            b = b
                .checked_add(n.div_ceil(BNB_4BIT_BLOCK) * 4)
                .ok_or_else(|| ov(&t.name))?;
        }
        peak = peak.max(b);
    }
    Ok(peak)
}

#[cfg(test)]
mod tests;
