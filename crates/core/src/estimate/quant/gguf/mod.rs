//! GGUF storage as llama-quantize writes it: which tensors it quantizes, the type each gets in
//! a file type's mix, the fallback for rows that are not whole blocks, and the walk that counts
//! tensors as llama-quantize does.
//!
//! Sources: llama.cpp `src/llama-quant.cpp` (`tensor_allows_quantization`,
//! `llama_tensor_get_type_impl`, `tensor_type_fallback`, `llama_ftype_get_default_type`) and
//! `convert_hf_to_gguf.py` (1-D tensors, norms, biases, routers, position and token-type tables
//! are stored as F32).

mod mix;
mod role;

pub use crate::job::weight_format::{FileType, GgufFormat};
pub(super) use role::{role, WeightRole};

use super::{matrix_dims, ov, QuantContext, Stored};
use crate::error::CoreError;
use crate::ggml::GgmlType;
use crate::inventory::{elements_of, Component, Tensor};

fn is_position_or_type_table(name: &str) -> bool {
    [
        "wpe.",
        "position_embeddings",
        "embed_positions",
        "token_type_embeddings",
        "position_embd",
        "token_types",
    ]
    .iter()
    .any(|p| name.contains(p))
}

/// llama.cpp `tensor_allows_quantization`, applied to GGUF or Hugging Face names.
pub(super) fn gguf_allows(t: &Tensor) -> bool {
    let n = t.name.as_str();
    t.shape.len() >= 2
        && n.ends_with("weight")
        && t.component != Component::Norm
        && !n.contains("_norm.weight")
        && t.component != Component::Router
        && !n.contains("ffn_gate_inp")
        && !is_position_or_type_table(n)
        && !n.contains("relative_attention_bias")
        && !n.contains("attn_rel_b")
}

/// The row length llama.cpp checks against the block size (`ne[0]`, the input features).
fn gguf_row(t: &Tensor, ctx: &QuantContext) -> Result<u64, CoreError> {
    Ok(matrix_dims(t, ctx)?.2)
}

/// The per-category counters llama-quantize keeps while it walks the tensors.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    i_attention_wv: i64,
    n_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

fn is_ggml_quantized(t: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(t, F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64)
}

/// What llama-quantize looks at in one tensor.
#[derive(Debug, Clone, Copy)]
struct TensorFacts {
    role: WeightRole,
    /// `ne[0]`: the input features.
    row: u64,
    layer: Option<u32>,
    /// Routed experts stacked in one tensor (`ne[2] > 1`; per-expert HF tensors count too).
    stacked_expert: bool,
}

/// `tensor_type_fallback`: the type a row length that is not a whole number of blocks gets.
fn fallback(t: &Tensor, ty: GgmlType, row: u64) -> Result<GgmlType, CoreError> {
    use GgmlType as G;
    if row.is_multiple_of(ty.block_size()) {
        return Ok(ty);
    }
    let next = match ty {
        G::IQ1_S
        | G::IQ1_M
        | G::IQ2_XXS
        | G::IQ2_XS
        | G::IQ2_S
        | G::IQ3_XXS
        | G::IQ3_S
        | G::IQ4_XS => G::IQ4_NL,
        G::Q2_0 | G::Q2_K | G::Q3_K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        other => {
            return Err(CoreError::InvalidTensor {
                name: t.name.clone(),
                reason: format!(
                    "rows of {row} are not whole {} blocks and llama-quantize has no fallback",
                    other.name()
                ),
            })
        }
    };
    Ok(if row.is_multiple_of(next.block_size()) {
        next
    } else {
        G::F16
    })
}

/// The GGUF storage of one tensor, given llama-quantize's counters at that tensor.
fn stored(
    g: &GgufFormat,
    t: &Tensor,
    ctx: &QuantContext,
    c: &Counters,
    tied: bool,
) -> Result<Stored, CoreError> {
    let n = elements_of(&t.shape).ok_or_else(|| ov(&t.name))?;
    if !gguf_allows(t) {
        // convert_hf_to_gguf.py: 1-D tensors, norms, biases, routers and position/token-type
        // tables are F32; anything else unquantized keeps its stored type.
        let f32_kept = t.shape.len() <= 1
            || t.name.ends_with("_norm.weight")
            || !t.name.ends_with(".weight")
            || t.component == Component::Norm
            || t.component == Component::Router
            || is_position_or_type_table(&t.name);
        return Ok(if f32_kept {
            Stored {
                quantized: false,
                ggml: Some(GgmlType::F32),
                bytes: n.checked_mul(4).ok_or_else(|| ov(&t.name))?,
            }
        } else {
            Stored {
                quantized: false,
                ggml: None,
                bytes: t.bytes,
            }
        });
    }
    let row = gguf_row(t, ctx)?;
    let (default, pure, ft) = match *g {
        GgufFormat::Pure(ty) => (ty, true, None),
        GgufFormat::Mix(f) => (f.default_type(), false, Some(f)),
    };
    let mut ty = default;
    if is_ggml_quantized(default) {
        if let (false, Some(f)) = (pure, ft) {
            let stacked =
                t.component == Component::Experts || (t.shape.len() >= 3 && t.shape[0] > 1);
            let facts = TensorFacts {
                role: role(t),
                row,
                layer: t.layer,
                stacked_expert: stacked,
            };
            ty = mix::mix_type(f, ctx, c, tied, &facts);
        }
        ty = fallback(t, ty, row)?;
    }
    let bytes = ty.bytes_for(n).ok_or_else(|| CoreError::InvalidTensor {
        name: t.name.clone(),
        reason: format!("{n} elements do not fill whole {} blocks", ty.name()),
    })?;
    Ok(Stored {
        quantized: true,
        ggml: Some(ty),
        bytes,
    })
}

/// One tensor's GGUF storage with llama-quantize's counters taken from its layer index: exact
/// for models with one attn_v-like and one ffn_down tensor per layer (see [`walk`]).
pub(super) fn stored_by_layer(
    g: &GgufFormat,
    t: &Tensor,
    ctx: &QuantContext,
) -> Result<Stored, CoreError> {
    let l = i64::from(t.layer.unwrap_or(0));
    let c = Counters {
        i_attention_wv: l,
        n_attention_wv: i64::from(ctx.n_layers),
        i_ffn_down: l,
        i_ffn_gate: l,
        i_ffn_up: l,
    };
    stored(g, t, ctx, &c, ctx.tied_embeddings)
}

/// Walks the tensors as llama-quantize does (tensors outside the layers first, then layer by
/// layer), counting attn_v-like and FFN tensors, and treats the token embedding as the output
/// matrix when there is no separate output tensor. Results are in the order given.
pub(super) fn walk(
    g: &GgufFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
) -> Result<Vec<Stored>, CoreError> {
    let roles: Vec<WeightRole> = tensors.iter().map(role).collect();
    let tied = !roles.contains(&WeightRole::Output);
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].layer.map_or(-1, i64::from));
    let mut c = Counters {
        n_attention_wv: roles.iter().filter(|r| r.is_attn_v()).count() as i64,
        ..Counters::default()
    };
    let mut out = vec![
        Stored {
            quantized: false,
            ggml: None,
            bytes: 0
        };
        tensors.len()
    ];
    for i in order {
        let t = &tensors[i];
        out[i] = stored(g, t, ctx, &c, tied)?;
        if gguf_allows(t) {
            match roles[i] {
                r if r.is_attn_v() => c.i_attention_wv += 1,
                WeightRole::FfnDown => c.i_ffn_down += 1,
                WeightRole::FfnGate => c.i_ffn_gate += 1,
                WeightRole::FfnUp => c.i_ffn_up += 1,
                _ => {}
            }
        }
    }
    Ok(out)
}
