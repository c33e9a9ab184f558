//! The type llama-quantize gives each tensor in a file type's mix: `llama_tensor_get_type_impl`
//! in llama.cpp `src/llama-quant.cpp`, one function per tensor role, in the order llama.cpp
//! tests them (the output matrix, MXFP4 files, the token embedding, the 1–2-bit i-quants, then
//! each role).

use super::{Counters, FileType, TensorFacts, WeightRole};
use crate::estimate::quant::QuantContext;
use crate::ggml::GgmlType;

use FileType as F;
use GgmlType as G;
use WeightRole as R;

/// What every per-role rule reads: the file type, the model, llama-quantize's counters at this
/// tensor and the tensor itself.
struct Rule<'a> {
    ft: FileType,
    ctx: &'a QuantContext,
    c: &'a Counters,
    x: &'a TensorFacts,
    n_layer: i64,
    imatrix: bool,
}

impl Rule<'_> {
    /// Whether the file type is one of `set`.
    fn is(&self, set: &[F]) -> bool {
        set.contains(&self.ft)
    }

    /// The layer llama.cpp reads from the name for MoE models, else its counter.
    fn layer_of(&self, counter: i64) -> i64 {
        match self.x.layer {
            Some(l) if self.ctx.n_expert.max(1) > 1 => i64::from(l),
            _ => counter,
        }
    }
}

/// llama.cpp `use_more_bits`: the first and last eighth of the layers and every third between.
fn more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The 1–2-bit i-quant file types, whose rules come before the per-role ones.
const LOW_BIT_IQ: &[F] = &[
    F::IQ2_XXS,
    F::IQ2_XS,
    F::IQ1_S,
    F::IQ2_S,
    F::IQ2_M,
    F::IQ1_M,
];

/// `llama_tensor_get_type_impl` for a file type (counters are advanced by the caller).
pub(super) fn mix_type(
    ft: FileType,
    ctx: &QuantContext,
    c: &Counters,
    tied: bool,
    x: &TensorFacts,
) -> GgmlType {
    let r = Rule {
        ft,
        ctx,
        c,
        x,
        n_layer: i64::from(ctx.n_layers),
        imatrix: ft.has_imatrix(),
    };
    let t = ft.default_type();
    match x.role {
        R::Output => output(&r, t),
        R::TokenEmbd if tied => output(&r, t),
        _ if ft == F::MXFP4_MOE => {
            if x.stacked_expert {
                G::MXFP4
            } else {
                G::Q8_0
            }
        }
        R::TokenEmbd => token_embd(&r, t),
        _ if r.is(LOW_BIT_IQ) => low_bit_iq(&r, t),
        role if role.is_attn_v() => attn_v(&r, t),
        R::AttnK => attn_k(&r, t),
        R::AttnQ => attn_q(&r, t),
        R::FfnDown => ffn_down(&r, t),
        R::AttnOutput => attn_output(&r, t),
        // Not reached while `is_attn_v` takes fused QKV first (as the chain this was split
        // from did); kept so the rule stays written down.
        R::AttnQkv => attn_qkv(&r, t),
        R::FfnGate => ffn_gate_up(&r, t, c.i_ffn_gate),
        R::FfnUp => ffn_gate_up(&r, t, c.i_ffn_up),
        _ => t,
    }
}

/// The output matrix (and a tied token embedding): Q8_0 where the rows are not whole blocks,
/// for MXFP4 files and Falcon; Q5_K for the lowest i-quants; else Q6_K.
fn output(r: &Rule, t: GgmlType) -> GgmlType {
    if r.ft == F::MXFP4_MOE || r.ctx.falcon || !r.x.row.is_multiple_of(t.block_size()) {
        G::Q8_0
    } else if r.is(&[
        F::IQ2_XXS,
        F::IQ2_XS,
        F::IQ3_XXS,
        F::IQ1_S,
        F::IQ2_S,
        F::IQ2_M,
        F::IQ1_M,
    ]) {
        G::Q5_K
    } else if t != G::Q8_0 {
        G::Q6_K
    } else {
        t
    }
}

/// The token embedding of a model with a separate output matrix.
fn token_embd(r: &Rule, t: GgmlType) -> GgmlType {
    if r.is(&[F::IQ2_XXS, F::IQ2_XS, F::IQ1_S, F::IQ1_M]) {
        G::Q2_K
    } else if r.is(&[F::IQ2_S, F::IQ2_M, F::IQ3_XXS]) {
        G::IQ3_S
    } else if r.is(&[F::TQ1_0, F::TQ2_0, F::Q2_0]) {
        G::Q4_K
    } else {
        t
    }
}

/// Every other tensor in the 1–2-bit i-quant files.
fn low_bit_iq(r: &Rule, t: GgmlType) -> GgmlType {
    let (ctx, role) = (r.ctx, r.x.role);
    let s_or_m = r.is(&[F::IQ2_S, F::IQ2_M]);
    if role.is_attn_v() {
        if r.ctx.n_gqa >= 4 || ctx.n_expert >= 4 {
            G::Q4_K
        } else if s_or_m {
            G::IQ3_S
        } else {
            G::Q2_K
        }
    } else if ctx.n_expert == 8 && role == R::AttnK {
        G::Q4_K
    } else if role == R::FfnDown {
        if r.c.i_ffn_down < r.n_layer / 8 {
            if s_or_m {
                G::IQ3_S
            } else {
                G::Q2_K
            }
        } else {
            t
        }
    } else if role == R::AttnOutput {
        if ctx.n_expert == 8 {
            G::Q5_K
        } else if r.is(&[F::IQ1_S, F::IQ1_M]) {
            G::IQ2_XXS
        } else if s_or_m {
            G::IQ3_S
        } else {
            t
        }
    } else {
        t
    }
}

/// attn_v, fused QKV and MLA's kv_b: more bits with grouped-query attention and in the layers
/// `use_more_bits` picks; Q5_K for 70B models' Q3_K/Q4_K; Q8_0 with 8 experts.
fn attn_v(r: &Rule, mut t: GgmlType) -> GgmlType {
    let (ft, gqa) = (r.ft, r.ctx.n_gqa);
    let (i, n) = (r.c.i_attention_wv, r.c.n_attention_wv);
    if ft == F::Q2_K {
        t = if gqa >= 4 { G::Q4_K } else { G::Q3_K };
    } else if ft == F::Q2_K_S && gqa >= 4 {
        t = G::Q4_K;
    } else if ft == F::IQ3_XXS {
        t = if gqa >= 4 {
            G::Q4_K
        } else if !r.imatrix {
            G::IQ3_S
        } else {
            G::IQ3_XXS
        };
    } else if (r.is(&[F::IQ3_XS, F::IQ3_S]) && gqa >= 4) || ft == F::IQ3_M {
        t = G::Q4_K;
    } else if ft == F::Q3_K_M {
        t = if i < 2 { G::Q5_K } else { G::Q4_K };
    } else if ft == F::Q3_K_L || (r.is(&[F::IQ4_NL, F::IQ4_XS]) && gqa >= 4) {
        t = G::Q5_K;
    } else if r.is(&[F::Q4_K_M, F::Q5_K_M]) && more_bits(i, n) {
        t = G::Q6_K;
    } else if ft == F::Q4_K_S && i < 4 {
        t = G::Q5_K;
    }
    if r.ctx.llm_70b && (t == G::Q3_K || t == G::Q4_K) {
        t = G::Q5_K;
    }
    if r.ctx.n_expert == 8 {
        t = G::Q8_0;
    }
    t
}

/// attn_k: Q8_0 with 8 experts; one step down for the 3-bit i-quants.
fn attn_k(r: &Rule, t: GgmlType) -> GgmlType {
    if r.ctx.n_expert == 8 {
        G::Q8_0
    } else if r.ft == F::IQ3_XS {
        G::IQ3_XXS
    } else if r.ft == F::IQ3_XXS {
        G::IQ2_S
    } else {
        t
    }
}

/// attn_q: one step down for the 3-bit i-quants.
fn attn_q(r: &Rule, t: GgmlType) -> GgmlType {
    if r.ft == F::IQ3_XS {
        G::IQ3_XXS
    } else if r.ft == F::IQ3_XXS {
        G::IQ2_S
    } else {
        t
    }
}

/// ffn_down: more bits in the first layers and where `use_more_bits` says, with Falcon's
/// exceptions.
fn ffn_down(r: &Rule, t: GgmlType) -> GgmlType {
    let (ft, falcon) = (r.ft, r.ctx.falcon);
    let (i, n) = (r.layer_of(r.c.i_ffn_down), r.n_layer);
    if ft == F::Q2_K {
        G::Q3_K
    } else if ft == F::Q2_K_S {
        if i < n / 8 {
            G::Q4_K
        } else {
            t
        }
    } else if ft == F::IQ3_XXS && !r.imatrix {
        if i < n / 8 {
            G::Q4_K
        } else {
            G::Q3_K
        }
    } else if ft == F::Q3_K_M {
        if i < n / 16 {
            G::Q5_K
        } else if !falcon || more_bits(i, n) {
            G::Q4_K
        } else {
            G::Q3_K
        }
    } else if ft == F::IQ3_M && (i < n / 8 || (r.ctx.n_expert == 8 && more_bits(i, n))) {
        G::Q4_K
    } else if ft == F::Q3_K_L {
        if falcon {
            G::Q4_K
        } else {
            G::Q5_K
        }
    } else if ft == F::Q4_K_M {
        ffn_down_q4_k_m(falcon, i, n, t)
    } else if i < n / 8 && r.is(&[F::IQ4_NL, F::IQ4_XS]) && !r.imatrix {
        G::Q5_K
    } else if ft == F::Q5_K_M && more_bits(i, n) {
        G::Q6_K
    } else if ft == F::Q4_K_S && !falcon && i < n / 8 {
        G::Q5_K
    } else if r.is(&[F::Q4_0, F::Q5_0]) && r.imatrix && i < n / 8 {
        if ft == F::Q4_0 {
            G::Q4_1
        } else {
            G::Q5_1
        }
    } else {
        t
    }
}

/// ffn_down in Q4_K_M files (layer `i` of `n`).
fn ffn_down_q4_k_m(falcon: bool, i: i64, n: i64, t: GgmlType) -> GgmlType {
    if falcon {
        if i < n / 16 {
            G::Q6_K
        } else if more_bits(i, n) {
            G::Q5_K
        } else {
            G::Q4_K
        }
    } else if more_bits(i, n) {
        G::Q6_K
    } else {
        t
    }
}

/// attn_output: Q5_K in 8-expert models' 2–4-bit files; one step up in the 2–3-bit K-quants;
/// Falcon's Q3_K_L gets Q4_K.
fn attn_output(r: &Rule, t: GgmlType) -> GgmlType {
    let ft = r.ft;
    if r.ctx.falcon {
        return if ft == F::Q3_K_L { G::Q4_K } else { t };
    }
    if r.ctx.n_expert == 8 {
        let five = r.is(&[
            F::Q2_K,
            F::IQ3_XS,
            F::IQ3_XXS,
            F::Q3_K_S,
            F::Q3_K_M,
            F::IQ4_NL,
            F::Q4_K_S,
            F::Q4_K_M,
            F::IQ3_S,
            F::IQ3_M,
            F::IQ4_XS,
        ]);
        return if five { G::Q5_K } else { t };
    }
    if ft == F::Q2_K {
        G::Q3_K
    } else if ft == F::IQ3_XXS {
        G::IQ3_S
    } else if r.is(&[F::Q3_K_M, F::IQ3_M]) {
        G::Q4_K
    } else if ft == F::Q3_K_L {
        G::Q5_K
    } else {
        t
    }
}

/// A fused QKV weight: one step up in the _M/_L mixes.
fn attn_qkv(r: &Rule, t: GgmlType) -> GgmlType {
    if r.is(&[F::Q3_K_M, F::Q3_K_L, F::IQ3_M]) {
        G::Q4_K
    } else if r.ft == F::Q4_K_M {
        G::Q5_K
    } else if r.ft == F::Q5_K_M {
        G::Q6_K
    } else {
        t
    }
}

/// ffn_gate and ffn_up (`counter` is the role's own): IQ3_XS files take IQ3_XXS in the middle
/// three quarters of the layers.
fn ffn_gate_up(r: &Rule, t: GgmlType, counter: i64) -> GgmlType {
    let i = r.layer_of(counter);
    let n = r.n_layer;
    if r.ft == F::IQ3_XS && i >= n / 8 && i < 7 * n / 8 {
        G::IQ3_XXS
    } else {
        t
    }
}
