//! Falcon-H1's parallel hybrid block (transformers 5.x `modeling_falcon_h1.py`
//! `FalconH1DecoderLayer`): `h = input_layernorm(x)`, then `mamba(h) · ssm_out_multiplier +
//! self_attn(h · attention_in_multiplier) · attention_out_multiplier` added to `x`, then
//! `pre_ff_layernorm` and the MLP (`down(up(x) · silu(gate(x) · m_gate)) · m_down`). Every muP
//! multiplier is a Python float: each product is a new tensor that saves nothing, but the
//! linears after it save the product, so the normed input is saved twice (once per mixer).
//!
//! The Mamba2 mixer (`FalconH1Mixer.forward`) runs one of two paths, picked by `attention`:
//! - `eager`: the torch path (CPU, or CUDA without `mamba_ssm`): `causal_conv1d_fn`'s
//!   `F.conv1d` + SiLU, then `mamba2_chunk_scan`, the chunked SSD of Dao & Gu 2024 ("Transformers
//!   are SSMs", §6, Listing 1) in einsums over chunks of `mamba_chunk_size`, which saves the
//!   `[b, heads, chunks, Q, Q]` decay matrix `L`, the scores `G`, and contiguous copies of each
//!   einsum's operands ([`Prog::falcon_ssd_torch`]).
//! - `sdpa` / `flash` (CUDA with `mamba_ssm`): `mamba_split_conv1d_scan_combined`, which saves
//!   the projected `zxbcdt`, the scan output `out_x` and, with `mamba_rms_norm`, the norm's
//!   `rstd`, and recomputes the rest in backward (`mamba_ssm/ops/triton/ssd_combined.py`).

use super::{Prog, Role};
use crate::estimate::tape::{Id, RmsWeight};
use crate::job::AttentionKernel;
use crate::model::{DenseMlp, Layer, Mlp, NormSlot, ParallelSsm};

/// The warning naming the path a Falcon-H1 training estimate took.
pub fn falcon_h1_path_warning(kernel: AttentionKernel) -> String {
    super::ssd_warning::ssd_path_warning("Falcon-H1's Mamba2 mixers", kernel)
}

impl Prog<'_> {
    /// `FalconH1DecoderLayer.forward` in training.
    pub(super) fn falcon_h1_block(&mut self, x: Id, layer: &Layer, p: &ParallelSsm) -> Id {
        let h_n = self.norm_in(x, layer, NormSlot::PreAttention);
        let m_in = self.t.op(&[h_n], &[], self.t.elements(h_n), self.w(h_n));
        let m = self.falcon_h1_mixer(m_in, p);
        let m = self.elementwise(&[m], &[]);
        let a_in = self.t.op(&[h_n], &[], self.t.elements(h_n), self.w(h_n));
        let a = self.attention(a_in, a_in, layer, false);
        let a = self.elementwise(&[a], &[]);
        let s = self.elementwise(&[m, a], &[]);
        let hcur = self.residual(x, s);
        let f_in = self.norm_in(hcur, layer, NormSlot::PreMlp);
        let f = match &layer.mlp {
            Mlp::Dense(d) => self.falcon_h1_mlp(f_in, d),
            _ => self.ffn(f_in, layer),
        };
        self.residual(hcur, f)
    }

    /// `FalconH1MLP.forward`: `up(x) · act(gate(x) · gate_multiplier)`, then `down(y) ·
    /// down_multiplier`: the scaled gate is what the activation saves.
    fn falcon_h1_mlp(&mut self, x: Id, d: &DenseMlp) -> Id {
        let h = self.c.spec.hidden_size;
        let u = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
        let g = self.linear_named(x, h, d.ffn, d.bias, Role::Gate);
        let g = self.elementwise(&[g], &[]);
        let a = self.activation(g, &d.activation);
        let y = self.elementwise(&[u, a], &[u, a]);
        let o = self.linear_named(y, d.ffn, h, d.bias, Role::Down);
        self.elementwise(&[o], &[])
    }

    /// `FalconH1Mixer.forward` on `x` (already `· ssm_in_multiplier`): `in_proj`, `· mup_vector`
    /// (a buffer: the product saves nothing and promotes a 16-bit projection to the buffer's
    /// fp32 under autocast), then the path of [`falcon_h1_path_warning`], `out_proj`.
    fn falcon_h1_mixer(&mut self, x: Id, p: &ParallelSsm) -> Id {
        let s = &p.ssm;
        let h = self.c.spec.hidden_size;
        let in_out = s.d_inner + s.conv_dim() + s.heads;
        let proj = self.linear(x, h, in_out, s.proj_bias);
        let zw = self.w(proj).max(self.c.num.param);
        let zx = self.t.op(&[proj], &[], self.t.elements(proj), zw);
        let a = self.ssm_a(s.heads);
        if self.c.kernel != AttentionKernel::Eager {
            return self.falcon_h1_fused(zx, p);
        }
        let y = self.falcon_ssd_torch(zx, a, p);
        let y = self.falcon_h1_gate(y, zx, p);
        let y = self.cast(y, zw);
        self.linear(y, s.d_inner, h, p.out_bias)
    }

    /// `mamba_split_conv1d_scan_combined` (`MambaSplitConv1dScanCombinedFn.forward`): saves
    /// `zxbcdt`, `out_x` (`[b, L, heads, head_dim]`) and, with the gated norm, `rstd` (fp32, one
    /// per group per token); the convolution, the scan and `out_proj` run inside.
    pub(super) fn falcon_h1_fused(&mut self, zx: Id, p: &ParallelSsm) -> Id {
        let s = &p.ssm;
        let (t, h) = (self.tokens, self.c.spec.hidden_size);
        let w = self.w(zx);
        self.t.keep(zx);
        self.weight_copy(s.d_inner * h);
        let conv = self.t.op(&[zx], &[], t * s.conv_dim(), w);
        let out_x = self.t.op(&[conv, zx], &[], t * s.d_inner, w);
        self.t.keep(out_x);
        if p.gated_norm {
            let rstd = self.t.op(&[out_x], &[], t * s.groups, 4);
            self.t.keep(rstd);
        }
        let out = self.t.op(&[out_x, zx], &[], t * s.d_inner, w);
        let ow = if self.c.num.autocast { 2 } else { w };
        self.t.op(&[out], &[], t * h, ow)
    }

    /// The gate after the scan: `mamba_rms_norm` runs `FalconH1RMSNormGated` (gate first
    /// unless `norm_before_gate`: `y · silu(z)` saving both factors, `silu` saving z, a view
    /// of `zxbcdt`; the per-group RMSNorm in fp32 saving its input, `rsqrt` and the normed
    /// tensor); otherwise `y · silu(z)` alone.
    fn falcon_h1_gate(&mut self, y: Id, zx: Id, p: &ParallelSsm) -> Id {
        let s = &p.ssm;
        let n = self.tokens * s.d_inner;
        self.t.keep(zx);
        let gate = |me: &mut Self, v: Id| {
            let sg = me.t.op(&[zx], &[], n, me.w(zx).max(4));
            me.elementwise(&[v, sg], &[v, sg])
        };
        if !p.gated_norm {
            return gate(self, y);
        }
        let dim = s.d_inner / s.groups.max(1);
        let param = self.c.num.param;
        if p.norm_before_gate {
            let y32 = self.cast(y, 4);
            let normed =
                self.t
                    .rms_norm(y32, dim, param, RmsWeight::AfterCast, self.c.lora.is_some());
            gate(self, normed)
        } else {
            let g = gate(self, y);
            let g32 = self.cast(g, 4);
            self.t
                .rms_norm(g32, dim, param, RmsWeight::AfterCast, self.c.lora.is_some())
        }
    }
}
