//! Qwen3-Next's token mixers in a block program (transformers 5.x `modeling_qwen3_next.py`):
//! the gated DeltaNet (`Qwen3NextGatedDeltaNet.forward` on the torch path: the causal conv
//! fallback `causal_conv1d_fn`, `torch_chunk_gated_delta_rule` with `chunk_size = 64` and the
//! fp32 l2norm of q and k, the gated `Qwen3NextRMSNormGated`) and the gated full attention
//! (`Qwen3NextAttention`: `q_proj` yields the query and a sigmoid output gate).
//!
//! The torch path is what runs without the `fla` (flash-linear-attention) and `causal-conv1d`
//! kernels — on the CPU, and on CUDA when they are not installed. Its chunked delta rule keeps,
//! per layer, the per-chunk `64 × 64` matrices (pairwise decay, the UT system, the
//! within-chunk attention), the solved values and decayed keys, and one `d_k × d_v` state per
//! value head per chunk of the sequential scan: all fp32 whatever the model dtype.

use super::{Prog, Role};
use crate::estimate::tape::Id;
use crate::job::AttentionKernel;
use crate::model::{Attention, AttentionKind, Naming, NormKind, Ssm};

/// `torch_chunk_gated_delta_rule`'s default `chunk_size`, as `Qwen3NextGatedDeltaNet` calls it.
const CHUNK: u64 = 64;

/// The shapes of one gated DeltaNet call.
#[derive(Clone, Copy)]
struct Dims {
    /// Value heads, key heads, key and value head widths.
    nv: u64,
    nk: u64,
    dk: u64,
    dv: u64,
    /// Tokens (`batch · seq`) and value-head rows padded to whole chunks (`batch · nv · Lp`).
    tok: u64,
    rows: u64,
    chunks: u64,
    /// q, k and v reach the chunks in the `[b, L, heads, d]` memory order of their source
    /// (see [`Prog::chunk_delta_rule`]), so `matmul` copies its folded operands.
    strided: bool,
}

impl Prog<'_> {
    /// `Qwen3NextGatedDeltaNet.forward` in training (no cache, no padding mask): the two input
    /// projections, the group-wise reshapes of `fix_query_key_value_ordering` (copies of v,
    /// z, b, a, q and k out of `in_proj_qkvz`'s per-key-head layout), `torch.cat` into the
    /// conv input, the conv with SiLU ([`Prog::causal_conv_torch`]), β = `sigmoid(b)` and the
    /// decay `g = −exp(A_log) · softplus(a + dt_bias)` in fp32, the chunked delta rule, the
    /// gated norm and `out_proj`. Qwen3.5's `Qwen3_5GatedDeltaNet.forward` differs only in its
    /// projections ([`Prog::qwen35_projections`]).
    pub(super) fn gated_delta_net(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let nv = s.heads.max(1);
        let d = Dims {
            nv,
            nk: s.groups.max(1),
            dk: s.d_state,
            dv: s.d_inner / nv,
            tok: self.tokens,
            rows: self.c.batch * nv * self.c.seq.div_ceil(CHUNK) * CHUNK,
            chunks: self.c.seq.div_ceil(CHUNK),
            strided: false,
        };
        let (mixed, z, b, a) = if self.c.spec.naming == Naming::Qwen35 {
            self.qwen35_projections(x, s, d)
        } else {
            self.fused_projections(x, s, d)
        };
        let conv = self.causal_conv_torch(mixed, s);
        let beta = self.t.op(&[b], &[], d.tok * nv, self.w(b));
        self.t.keep(beta);
        let g = self.decay(a, d);
        let core = self.chunk_delta_rule(conv, beta, g, d);
        let normed = self.gated_rms_norm(core, z, d);
        self.linear_strided_free(normed, s.d_inner, h)
    }

    /// Qwen3-Next's `in_proj_qkvz` and `in_proj_ba`, then `fix_query_key_value_ordering`'s
    /// copies of v, z, b, a, q and k and `torch.cat((q, k, v))`: (conv input, z, b, a).
    fn fused_projections(&mut self, x: Id, s: &Ssm, d: Dims) -> (Id, Id, Id, Id) {
        let h = self.c.spec.hidden_size;
        let (kd, vd, nv) = (d.nk * d.dk, s.d_inner, d.nv);
        let qkvz = self.linear(x, h, 2 * kd + 2 * vd, false);
        let ba = self.linear(x, h, 2 * nv, false);
        let w = self.w(qkvz);
        let v = self.t.op(&[qkvz], &[], d.tok * vd, w);
        let z = self.t.op(&[qkvz], &[], d.tok * vd, w);
        let b = self.t.op(&[ba], &[], d.tok * nv, w);
        let a = self.t.op(&[ba], &[], d.tok * nv, w);
        let q = self.t.op(&[qkvz], &[], d.tok * kd, w);
        let k = self.t.op(&[qkvz], &[], d.tok * kd, w);
        let mixed = self.t.op(&[q, k, v], &[], d.tok * s.conv_dim(), w);
        (mixed, z, b, a)
    }

    /// Qwen3.5's four projections (`Qwen3_5GatedDeltaNet.forward`, `modeling_qwen3_5.py`):
    /// `in_proj_qkv`'s output is the conv input as it is (a transposed view), z a reshape of
    /// `in_proj_z`'s, b and a `in_proj_b`'s and `in_proj_a`'s: no copies, no concatenation.
    fn qwen35_projections(&mut self, x: Id, s: &Ssm, d: Dims) -> (Id, Id, Id, Id) {
        let h = self.c.spec.hidden_size;
        let mixed = self.linear(x, h, s.conv_dim(), false);
        let z = self.linear(x, h, s.d_inner, false);
        let b = self.linear(x, h, d.nv, false);
        let a = self.linear(x, h, d.nv, false);
        (mixed, z, b, a)
    }

    /// `out_proj` on the gated norm's output (contiguous: its input is saved as is).
    fn linear_strided_free(&mut self, x: Id, inp: u64, out: u64) -> Id {
        self.linear_named(x, inp, out, false, Role::O)
    }

    /// `g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)`: `exp` saves its
    /// (per-head) output, `softplus` its input, the product both operands; fp32 throughout.
    fn decay(&mut self, a: Id, d: Dims) -> Id {
        let n = d.tok * d.nv;
        let a32 = self.cast(a, 4);
        let shifted = self.t.op(&[a32], &[], n, 4);
        let sp = self.t.op(&[shifted], &[shifted], n, 4);
        let e = self.t.op(&[], &[], d.nv, 4);
        self.t.keep(e);
        let neg = self.t.op(&[e], &[], d.nv, 4);
        self.t.op(&[neg, sp], &[neg, sp], n, 4)
    }

    /// `torch_chunk_gated_delta_rule(..., use_qk_l2norm_in_kernel=True)`: q and k repeated to
    /// the value heads (`repeat_interleave`, when `nv > nk`), every input transposed into a
    /// contiguous fp32 copy, the l2norm of q and k, q scaled by `d_k^-½`, all padded to whole
    /// chunks (`F.pad`: a new tensor even with no padding), then the two phases (see the
    /// comments). Returns the output as `[b, L, nv, dv]` in the input's dtype.
    fn chunk_delta_rule(&mut self, conv: Id, beta: Id, g: Id, mut d: Dims) -> Id {
        let cw = self.w(conv);
        let hs = d.tok * d.nv;
        let (q, k) = if d.nv > d.nk {
            let q = self.t.op(&[conv], &[], hs * d.dk, cw);
            let k = self.t.op(&[conv], &[], hs * d.dk, cw);
            (q, k)
        } else {
            (conv, conv)
        };
        // `x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)` returns
        // the transposed view itself when x is already fp32 (aten `to_will_alias`: a strided
        // 4-D tensor "suggests" the contiguous format), and a contiguous fp32 copy otherwise.
        // The views keep their `[b, L, heads, d]` order through the l2norm and, with no
        // padding, through `F.pad` (its clone preserves strides), so the chunked operands of
        // the matmuls are not viewable in folded form.
        let alias = cw == 4;
        d.strided = alias && self.c.seq.is_multiple_of(CHUNK);
        let mut to32 = |x: Id, n: u64| {
            if alias {
                x
            } else {
                self.t.op(&[x], &[], n, 4)
            }
        };
        let q32 = to32(q, hs * d.dk);
        let k32 = to32(k, hs * d.dk);
        let v32 = to32(conv, hs * d.dv);
        let beta32 = to32(beta, hs);
        let g32 = to32(g, hs);
        // FLA `l2norm`: the ops and saves of an RMS normalisation (a sum for the mean).
        let qn = self.rms_normalize(q32, hs, d.dk);
        let kn = self.rms_normalize(k32, hs, d.dk);
        let qs = self.t.op(&[qn], &[], hs * d.dk, 4);
        let r = d.rows;
        let qp = self.t.op(&[qs], &[], r * d.dk, 4);
        let kp = self.t.op(&[kn], &[], r * d.dk, 4);
        let vp = self.t.op(&[v32], &[], r * d.dv, 4);
        let bp = self.t.op(&[beta32], &[], r, 4);
        let gp = self.t.op(&[g32], &[], r, 4);
        // v_beta = v·β, k_beta = k·β: each product saves both operands.
        let v_beta = self.t.op(&[vp, bp], &[vp, bp], r * d.dv, 4);
        let k_beta = self.t.op(&[kp, bp], &[kp, bp], r * d.dk, 4);
        // Intra-chunk phase: the cumulative decay, the pairwise decay exp(cᵢ − cⱼ) (masked,
        // its exp saved), the UT system (k_beta @ kᵀ) ⊙ decay and the within-chunk attention
        // (q @ kᵀ) ⊙ decay (matmuls and products save their operands), k_beta · exp(c).
        // `masked_fill` saves the 64 × 64 boolean mask.
        let mask = self.t.op(&[], &[], CHUNK * CHUNK, 1);
        let cum = self.t.op(&[gp], &[], r, 4);
        let pair = self.t.op(&[cum], &[], r * CHUNK, 4);
        let masked = self.t.op(&[pair, mask], &[mask], r * CHUNK, 4);
        let pdec = self.t.op(&[masked], &[], r * CHUNK, 4);
        self.t.keep(pdec);
        let ut_mm = self.folded_matmul(k_beta, kp, r * d.dk, r * CHUNK, d.strided);
        let ut = self.t.op(&[ut_mm, pdec], &[ut_mm, pdec], r * CHUNK, 4);
        let in_mm = self.folded_matmul(qp, kp, r * d.dk, r * CHUNK, d.strided);
        let intra = self.t.op(&[in_mm, pdec], &[in_mm, pdec], r * CHUNK, 4);
        let ce = self.exp_saved(cum, r);
        let dkb = self.t.op(&[k_beta, ce], &[k_beta, ce], r * d.dk, 4);
        // `solve_triangular` saves the matrix and its result.
        let new_v = self.t.op(&[ut, v_beta], &[ut], r * d.dv, 4);
        self.t.keep(new_v);
        let kcd = self.t.op(&[ut, dkb], &[ut], r * d.dk, 4);
        self.t.keep(kcd);
        let core = self.t.op(&[new_v], &[], r * d.dv, 4);
        // Decays applied once: q·exp(c), k·exp(c_last − c), the chunk decay exp(c_last).
        // (Saved by the scan: whole, or as per-chunk copies when strided.)
        let ce2 = self.exp_saved(cum, r);
        let qd = self.t.op(&[qp, ce2], &[qp, ce2], r * d.dk, 4);
        let diff = self.t.op(&[cum], &[], r, 4);
        let ce3 = self.exp_saved(diff, r);
        let kdec = self.t.op(&[kp, ce3], &[kp, ce3], r * d.dk, 4);
        let cdec = self.exp_saved(cum, r / CHUNK);
        self.scan(core, [new_v, kcd, qd, intra, kdec, cdec], d);
        // `.transpose(1, 2).to(initial_dtype, contiguous_format)`: a copy of the unpadded rows.
        self.t.op(&[core], &[], hs * d.dv, cw)
    }

    /// `a @ bᵀ` over `[b, nv, chunks, 64, ·]` operands ([`Prog::mm_operand`]), `n` elements
    /// each, `out` in the product.
    fn folded_matmul(&mut self, a: Id, b: Id, n: u64, out: u64, strided: bool) -> Id {
        let ac = self.mm_operand(a, n, strided);
        let bc = self.mm_operand(b, n, strided);
        let w = self.mm_width();
        self.t.op(&[ac, bc], &[ac, bc], out, w)
    }

    /// A matmul operand of `n` elements (a whole tensor or a chunk's slice) as the batched
    /// `matmul` saves it: under autocast a 16-bit copy; in an fp32 model with strided q/k
    /// (`Dims::strided`, passed as `strided` where the operand carries that layout) the
    /// contiguous copy `matmul` makes when folding the batch dimensions (measured: an
    /// `_unsafe_view` of a copy); else the tensor itself (a view).
    fn mm_operand(&mut self, x: Id, n: u64, strided: bool) -> Id {
        if self.c.num.autocast {
            self.t.op(&[x], &[], n, 2)
        } else if strided {
            self.t.op(&[x], &[], n, 4)
        } else {
            x
        }
    }

    /// Width of the delta rule's matmul outputs: 16 bit under autocast, else fp32.
    fn mm_width(&self) -> u64 {
        if self.c.num.autocast {
            2
        } else {
            4
        }
    }

    /// `exp` of `n` values, its output saved.
    fn exp_saved(&mut self, x: Id, n: u64) -> Id {
        let e = self.t.op(&[x], &[], n, 4);
        self.t.keep(e);
        e
    }

    /// The sequential scan over chunks: per chunk `v_new = new_v − kcd @ S`, the output
    /// `q @ S + intra @ v_new` written into `core`, and `S ← S·exp(chunk decay) + kᵀ @ v_new`.
    /// Each matmul saves what the other operand's gradient needs: every chunk's incoming state
    /// `S` (`[b, nv, dk, dv]`, fp32; the first is a zero tensor that needs no gradient, so its
    /// partners are not saved in chunk 0), `v_new`, `kcd` and `intra` slices, the decayed-q
    /// and transposed decayed-k slices — each as [`Prog::mm_operand`] says (16-bit copies
    /// under autocast; copies of the strided q/k slices in fp32 with whole chunks) — and the
    /// final state is dropped (no cache in training).
    fn scan(&mut self, core: Id, [new_v, kcd, qd, intra, kdec, cdec]: [Id; 6], d: Dims) {
        let b = self.c.batch;
        let sn = b * d.nv * d.dk * d.dv;
        let cn = b * d.nv * CHUNK * d.dv;
        let kn = b * d.nv * CHUNK * d.dk;
        let w = self.mm_width();
        let mut state = self.t.op(&[], &[], sn, 4);
        for i in 0..d.chunks {
            let first = i == 0;
            let sc = self.mm_operand(state, sn, false);
            let kc = self.mm_operand(kcd, kn, false);
            let m1 = if first {
                self.t.op(&[kc, sc], &[sc], cn, w)
            } else {
                self.t.op(&[kc, sc], &[kc, sc], cn, w)
            };
            let v_new = self.t.op(&[new_v, m1], &[], cn, 4);
            let qc = self.mm_operand(qd, kn, d.strided);
            let inter = if first {
                self.t.op(&[qc, sc], &[sc], cn, w)
            } else {
                self.t.op(&[qc, sc], &[qc, sc], cn, w)
            };
            let ic = self.mm_operand(intra, b * d.nv * CHUNK * CHUNK, false);
            let vc = self.mm_operand(v_new, cn, false);
            let m2 = self.t.op(&[ic, vc], &[ic, vc], cn, w);
            // `core_attn_out[:, :, i] = inter + m2`: the sum, copied into the output.
            self.t.op(&[inter, m2], &[], cn, w);
            self.t.touch(core);
            let decayed = self.t.op(&[state, cdec], &[state, cdec], sn, 4);
            let kt = self.mm_operand(kdec, kn, d.strided);
            let vc2 = self.mm_operand(v_new, cn, false);
            let upd = self.t.op(&[kt, vc2], &[kt, vc2], sn, w);
            state = self.t.op(&[decayed, upd], &[], sn, 4);
        }
    }

    /// `Qwen3NextRMSNormGated(core, z)` on `[b·L·nv, dv]` rows: the fp32 RMS normalisation
    /// (`pow` saves its input, `rsqrt` its output, the product both), `weight ·` the normed
    /// rows cast back (saving them), `silu(z.float())` (saving z), the product (saving both),
    /// cast back to the input dtype.
    fn gated_rms_norm(&mut self, x: Id, z: Id, d: Dims) -> Id {
        let in_w = self.w(x);
        let n = d.tok * d.nv * d.dv;
        let rows = d.tok * d.nv;
        let x32 = self.cast(x, 4);
        let hn = self.rms_normalize(x32, rows, d.dv);
        let hn = self.cast(hn, in_w);
        let wt = self.t.op(&[hn], &[hn], n, self.c.num.param.max(in_w));
        let z32 = self.cast(z, 4);
        let sg = self.t.op(&[z32], &[z32], n, 4);
        let out = self.t.op(&[wt, sg], &[wt, sg], n, 4);
        self.cast(out, in_w)
    }

    /// `Qwen3NextAttention.forward`: `q_proj` is `[q | gate]` per head; the query half (a
    /// view) goes through `q_norm` (saving the view in fp32, so the whole projection stays),
    /// the gate half is reshaped into a contiguous copy; after the attention core the output
    /// is multiplied by `sigmoid(gate)` (saving the sigmoid's output and both operands) before
    /// `o_proj`.
    pub(super) fn gated_attention(&mut self, x: Id, att: &Attention) -> Id {
        let AttentionKind::Standard {
            heads,
            kv_heads,
            head_dim,
        } = att.kind
        else {
            unreachable!("gated attention is standard attention")
        };
        let h = self.c.spec.hidden_size;
        let qn = self.tokens * heads * head_dim;
        let qg = self.linear_named(x, h, 2 * heads * head_dim, att.bias.q, Role::Q);
        let gate = self.t.op(&[qg], &[], qn, self.w(qg));
        let q = self.gemma_norm_on_view(qg, self.tokens * heads, head_dim);
        let k = self.linear_named(x, h, kv_heads * head_dim, att.bias.k, Role::K);
        let k = self.norm(k, NormKind::RmsNorm, head_dim);
        let v = self.linear_named(x, h, kv_heads * head_dim, att.bias.v, Role::V);
        let ctx = self.attention_core_from(q, k, v, att);
        // The partial rotary's `torch.cat` leaves q contiguous in `[b, heads, s, d]`, so the
        // fused kernels' output is too, and `attn_output.transpose(1, 2).contiguous()`
        // (`sdpa_attention_forward`) is a copy — the tensor the gate product saves (eager's
        // transpose copy is already in its core).
        let ctx = if self.c.kernel == AttentionKernel::Eager {
            ctx
        } else {
            self.t.op(&[ctx], &[], qn, self.w(ctx))
        };
        let sig = self.t.op(&[gate], &[], qn, self.w(gate));
        self.t.keep(sig);
        let gated = self.elementwise(&[ctx, sig], &[ctx, sig]);
        self.linear_named(gated, heads * head_dim, h, att.bias.o, Role::O)
    }

    /// `Qwen3NextRMSNorm` (`x.float()`, the RMS normalisation, `· (1 + weight.float())`,
    /// `type_as(x)`) on `rows × dim` values that are a view of `src`: in fp32 `pow` saves the
    /// view, keeping all of `src`; in 16 bit `float()` makes a new fp32 tensor.
    fn gemma_norm_on_view(&mut self, src: Id, rows: u64, dim: u64) -> Id {
        let in_w = self.w(src);
        let n = rows * dim;
        let hn = self.rms_normalize_view(src, rows, dim);
        let scale = self.t.op(&[], &[], dim, 4);
        let out = self.t.op(&[hn, scale], &[hn, scale], n, 4);
        self.cast(out, in_w)
    }
}
