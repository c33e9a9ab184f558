//! Jamba's Mamba mixer (transformers 5.x `modeling_jamba.py` `JambaMambaMixer`): Mamba1's ops
//! (the torch path is [`Prog::ssm_mixer`]'s) with RMSNorms on Δ, B and C after `x_proj`, and on
//! CUDA the `causal_conv1d` and `mamba_ssm` kernels called one at a time — Jamba never calls the
//! fused `mamba_inner_fn`, so what autograd saves is each kernel's own `save_for_backward`.

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::Ssm;

/// Sequence chunk of `selective_scan_cuda.fwd`'s saved states (`mamba_ssm`
/// `csrc/selective_scan/selective_scan.cpp`: `n_chunks = (seqlen + 2048 - 1) / 2048`).
const SCAN_CHUNK: u64 = 2048;

impl Prog<'_> {
    /// Under autocast, the 16-bit copy a matmul makes of an fp32 operand (and saves); the
    /// operand itself otherwise.
    pub(super) fn autocast_copy(&mut self, x: Id) -> Id {
        if self.c.num.autocast && self.w(x) == 4 {
            self.cast(x, 2)
        } else {
            x
        }
    }

    /// `time_step, B, C = torch.split(x_proj(u), [dt_rank, d_state, d_state])`, then
    /// `dt_layernorm`, `b_layernorm`, `c_layernorm`: three `JambaRMSNorm`s on views of `x_dbl`.
    pub(super) fn jamba_norms(&mut self, x_dbl: Id, s: &Ssm) -> (Id, Id, Id) {
        let tokens = self.c.batch * self.c.seq;
        let dt = self.rms_on_view(x_dbl, tokens, s.dt_rank);
        let b = self.rms_on_view(x_dbl, tokens, s.d_state);
        let c = self.rms_on_view(x_dbl, tokens, s.d_state);
        (dt, b, c)
    }

    /// `JambaRMSNorm.forward` (the Llama RMSNorm: `x.to(float32)`, `pow(2)` saving its input,
    /// `mean`, `+ eps`, `rsqrt` saving its output, `x · rstd` saving both, `.to(input_dtype)`,
    /// `weight ·` saving the normed input) on a `[rows, dim]` view of `src`: in fp32 the view
    /// is what is saved, keeping all of `src`; a 16-bit `src` is cast to a new fp32 tensor.
    fn rms_on_view(&mut self, src: Id, rows: u64, dim: u64) -> Id {
        let in_w = self.w(src);
        let n = rows * dim;
        let hn = self.rms_normalize_view(src, rows, dim);
        let hn = self.cast(hn, in_w);
        let out_w = self.c.num.param.max(in_w);
        self.t.op(&[hn], &[hn], n, out_w)
    }

    /// `JambaMambaMixer.forward` with the kernels (CUDA with `causal-conv1d` and `mamba-ssm`):
    /// `causal_conv1d_fn` (`CausalConv1dFn` saves its input, a view of `in_proj`'s output,
    /// and fuses the SiLU), `x_proj` on the transposed output (a contiguous copy, saved), the
    /// three norms, `dt_proj.weight @ Δ` (saves the normed Δ), then `selective_scan_fn`
    /// (`SelectiveScanFn.forward`, `mamba_ssm/ops/selective_scan_interface.py`) with `z`: it
    /// makes B, C (`[b, d_state, L]` from `[b, L, d_state]`) and z (every other half of
    /// `in_proj`'s output) contiguous and saves u, Δ, A, B, C, D, z, Δ's bias, the chunk
    /// states `x` (fp32 `[b, d_inner, ⌈L/2048⌉, 2·d_state]`) and `out`, returning `out_z`.
    pub(super) fn jamba_fused(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let (d, ns) = (s.d_inner, s.d_state);
        let (b, l) = (self.c.batch, self.c.seq);
        let bdl = b * d * l;
        let proj = self.linear(x, h, 2 * d, s.proj_bias);
        self.t.keep(proj);
        let w = self.w(proj);
        let a = self.ssm_a(d * ns);
        self.t.keep(a);
        self.weight_copy(d * s.d_conv + if s.conv_bias { d } else { 0 });
        let u = self.t.op(&[proj], &[], bdl, w);
        self.t.keep(u);
        let x_dbl = self.linear_strided(u, d, s.dt_rank + 2 * ns, false);
        let (dt_n, b_n, c_n) = self.jamba_norms(x_dbl, s);
        self.weight_copy(d * s.dt_rank);
        let t_in = self.autocast_copy(dt_n);
        let delta = self.t.op(&[t_in], &[t_in], bdl, self.w(t_in));
        self.t.keep(delta);
        let bw = self.w(b_n);
        let bc = self.t.op(&[b_n, c_n], &[], 2 * b * l * ns, bw);
        self.t.keep(bc);
        let z = self.t.op(&[proj], &[], bdl, w);
        self.t.keep(z);
        let chunks = bdl / l * l.div_ceil(SCAN_CHUNK) * 2 * ns;
        let inter = self.t.op(&[u, delta, bc], &[], chunks, 4);
        self.t.keep(inter);
        let out = self.t.op(&[u, delta, bc], &[], bdl, self.w(u));
        self.t.keep(out);
        let out_z = self.t.op(&[out, z], &[], bdl, self.w(u));
        let yt = self.cast(out_z, self.c.num.param);
        self.linear_strided(yt, d, h, s.proj_bias)
    }
}
