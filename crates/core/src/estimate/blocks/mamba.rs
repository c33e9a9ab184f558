//! State-space blocks: `x + mixer(norm(x))` with no MLP (transformers 5.x `modeling_mamba.py`
//! MambaBlock / MambaMixer, `modeling_mamba2.py` Mamba2Block / Mamba2Mixer).
//!
//! Two paths, picked by the job's `attention` setting:
//! - `eager`: transformers' torch path (`MambaMixer.forward` when `mamba_inner_fn` is not
//!   available, as on the CPU): the selective scan materialises `exp(A·Δ)` and `Δ·B·u` as
//!   `[b, d_inner, L, d_state]` fp32 tensors and runs a Python loop over the sequence that saves
//!   every step's state — the memory the Mamba paper's kernel exists to avoid (Gu & Dao 2023
//!   §3.3.2).
//! - `sdpa` / `flash` (the GPU default: users train on CUDA with `mamba_ssm` and `causal_conv1d`
//!   installed): the fused `MambaInnerFn` of `mamba_ssm/ops/selective_scan_interface.py`, which
//!   recomputes the convolution output and Δ in backward (`checkpoint_lvl=1`) and saves `xz`,
//!   `x_dbl`, contiguous copies of B and C, the scan's chunk states (`scan_intermediates`,
//!   fp32 `[b, d_inner, ⌈L/2048⌉, 2·d_state]`) and the scan output `out`.
//!
//! Mamba2 mixers with a chunk size (`Ssm::chunk`: plain Mamba2, Bamba, Granite 4.0-H) run
//! transformers' torch path under `eager` ([`Prog::mamba2_torch`]; `Mamba2Mixer.forward`
//! without `mamba_ssm` calls the same `causal_conv1d_fn` / `mamba2_chunk_scan` / gated norm as
//! Bamba's), and the fused `mamba_split_conv1d_scan_combined`
//! (`mamba_ssm/ops/triton/ssd_combined.py`) otherwise.

use super::Prog;
use crate::estimate::tape::Id;
use crate::job::AttentionKernel;
use crate::model::{Layer, Mlp, ModelSpec, Naming, NormSlot, Ssm, SsmVersion};

/// Sequence chunk of `selective_scan_cuda.fwd`'s saved states: `n_chunks = (seqlen + 2048 -
/// 1) / 2048` and `x = torch::empty({batch, dim, n_chunks, dstate * 2})` in the weight type,
/// fp32 (`mamba_ssm` `csrc/selective_scan/selective_scan.cpp`).
const SCAN_CHUNK: u64 = 2048;

/// Bytes per value of a block's output, the next block's input, which full checkpointing keeps:
/// fp32 for a Mamba / FalconMamba / Mamba2 block (`MambaBlock.forward`,
/// `FalconMambaBlock.forward`, `Mamba2Block.forward` in transformers 5.24: with
/// `residual_in_fp32`, true in every published config, `residual.to(torch.float32) + mixer(..)`
/// promotes the sum to fp32 even in a pure-bf16 model), else the parameters' width `param`.
/// Nemotron-H's mixer-only blocks add in the model's dtype.
pub fn block_output_width(spec: &ModelSpec, layer: &Layer, param: u64) -> u64 {
    let mixer_only = matches!(layer.mlp, Mlp::None);
    let ssm = layer.attention.kind.state_space().is_some();
    if mixer_only && ssm && spec.naming != Naming::NemotronH {
        param.max(4)
    } else {
        param
    }
}

impl Prog<'_> {
    /// `MambaBlock.forward`: `residual + mixer(norm(x))`. `residual_in_fp32` (true in every
    /// published Mamba config) adds in fp32.
    pub(super) fn ssm_block(&mut self, x: Id, layer: &Layer, ssm: &Ssm) -> Id {
        let n = self.norm_in(x, layer, NormSlot::PreAttention);
        let res = self.cast(x, 4);
        let out = self.ssm_mixer(n, ssm);
        self.residual(res, out)
    }

    /// The state-space mixer on its path: the torch fallback under `eager`, the fused kernels
    /// otherwise (Mamba2 always fused; Jamba's mixer calls the kernels one by one,
    /// [`Prog::jamba_fused`]).
    pub(super) fn ssm_mixer(&mut self, x: Id, ssm: &Ssm) -> Id {
        match ssm.version {
            SsmVersion::GatedDeltaNet => self.gated_delta_net(x, ssm),
            SsmVersion::Mamba2 if ssm.chunk > 0 && self.c.kernel == AttentionKernel::Eager => {
                self.mamba2_torch(x, ssm)
            }
            SsmVersion::ShortConv => self.short_conv(x, ssm),
            SsmVersion::Mamba2 => self.mamba2_fused(x, ssm),
            _ if self.c.kernel == AttentionKernel::Eager => self.mamba_torch(x, ssm),
            SsmVersion::Jamba => self.jamba_fused(x, ssm),
            _ => self.mamba_fused(x, ssm),
        }
    }

    /// Autocast's cached 16-bit copy of a parameter of `elements` values (fp32 params only).
    pub(super) fn weight_copy(&mut self, elements: u64) {
        if self.c.num.autocast && self.c.num.param == 4 {
            self.weight_copies += 2 * elements;
        }
    }

    /// A linear layer whose input is a transposed (non-contiguous) view: `F.linear` without a
    /// bias goes through `matmul`, whose fold `reshape`s the input into a contiguous copy — the
    /// copy is what `mm` saves.
    pub(super) fn linear_strided(&mut self, x: Id, inp: u64, out: u64, bias: bool) -> Id {
        let xin = self.mm_input(x);
        let copy = self.t.op(&[xin], &[], self.t.elements(xin), self.w(xin));
        self.linear(copy, inp, out, bias)
    }

    /// `A = -torch.exp(self.A_log.float())`: `exp` saves its output (`d_inner × d_state`, fp32)
    /// and the negation is what the scan reads.
    pub(super) fn ssm_a(&mut self, elements: u64) -> Id {
        let e = self.t.op(&[], &[], elements, 4);
        self.t.keep(e);
        self.t.op(&[e], &[], elements, 4)
    }

    /// `causal_conv1d_fn` on the torch path: `x.to(weight.dtype)`, a depthwise `F.conv1d` with
    /// `padding = d_conv − 1` (its output is `L + d_conv − 1` long; the `[..., :L]` slice is a
    /// view that keeps all of it) saving its (autocast-cast) input, then SiLU saving its input.
    pub(super) fn causal_conv_torch(&mut self, x: Id, s: &Ssm) -> Id {
        let b = self.c.batch;
        let l = self.c.seq;
        let ch = s.conv_dim();
        let p = self.c.num.param;
        let xw = self.cast(x, p);
        let xin = self.mm_input(xw);
        self.weight_copy(ch * s.d_conv + if s.conv_bias { ch } else { 0 });
        let ow = self.w(xin);
        let conv = self.t.op(&[xin], &[xin], b * ch * (l + s.d_conv - 1), ow);
        let act = self.t.op(&[conv], &[conv], b * ch * l, ow);
        self.cast(act, self.w(x))
    }

    /// `MambaMixer.forward` on the torch path (`mamba_selective_scan`'s recurrent loop); Jamba's
    /// mixer runs the same ops with its Δ, B and C norms after `x_proj` ([`Prog::jamba_norms`]).
    fn mamba_torch(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let (d, ns) = (s.d_inner, s.d_state);
        let (b, l) = (self.c.batch, self.c.seq);
        let bdl = b * d * l;
        let proj = self.linear(x, h, 2 * d, s.proj_bias);
        self.t.keep(proj); // the gate half, saved by `F.silu(z)` at the end
        let a = self.ssm_a(d * ns);
        let u = self.causal_conv_torch(proj, s);
        let x_dbl = self.linear_strided(u, d, s.dt_rank + 2 * ns, false);
        let (t_src, b_src, c_src) = if s.version == SsmVersion::Jamba {
            self.jamba_norms(x_dbl, s)
        } else {
            (x_dbl, x_dbl, x_dbl)
        };
        // `dt_proj.weight @ time_step.transpose(1, 2)`: the fold is a view of `x_dbl` (Jamba:
        // of the normed Δ), saved.
        self.weight_copy(d * s.dt_rank);
        let t_in = self.autocast_copy(t_src);
        let cw = self.w(t_in);
        let dt0 = self.t.op(&[t_in], &[t_in], bdl, cw);
        // `dt + delta_bias`, then `softplus` (in autocast's fp32 list) saving its input.
        let dt1 = self.t.op(&[dt0], &[], bdl, cw);
        let dt_in = if self.c.num.autocast {
            self.cast(dt1, 4)
        } else {
            dt1
        };
        let dtw = self.w(dt_in);
        let dt = self.t.op(&[dt_in], &[dt_in], bdl, dtw);
        self.scan_torch(u, dt, a, (b_src, c_src), s, proj)
    }

    /// `mamba_selective_scan` without kernels: `discrete_A = exp(A·Δ)` (the product saves A and
    /// Δ, `exp` its output), `discrete_B = Δ·B.float()` (saves both), `deltaB_u = discrete_B ·
    /// u.float()` (saves both); the loop `state = discrete_A[:, :, i] · state + deltaB_u[:, :,
    /// i]` saves every previous state (the first a zero state in the input dtype), and
    /// `matmul(state.to(input_dtype), C_i)` saves the state's cast (the state itself in fp32);
    /// the L step outputs are stacked; `+ u·D` saves u, `· silu(z)` saves both factors.
    fn scan_torch(&mut self, u: Id, dt: Id, a: Id, bc: (Id, Id), s: &Ssm, proj: Id) -> Id {
        let (b_src, c_src) = bc;
        let (b, l, d, ns) = (self.c.batch, self.c.seq, s.d_inner, s.d_state);
        let (bdl, bdn) = (b * d * l, b * d * ns);
        let wide = bdl * ns;
        let wi = self.w(u);
        let prod = self.t.op(&[a, dt], &[a, dt], wide, 4);
        let da = self.t.op(&[prod], &[], wide, 4);
        self.t.keep(da);
        let bf = if self.w(b_src) == 4 {
            b_src
        } else {
            self.t.op(&[b_src], &[], b * l * ns, 4)
        };
        let db = self.t.op(&[dt, bf], &[dt, bf], wide, 4);
        let uf = self.cast(u, 4);
        let dbu = self.t.op(&[db, uf], &[db, uf], wide, 4);
        self.t.keep(u);
        let zero = self.t.op(&[], &[], bdn, wi);
        self.t.keep(zero);
        let states = self.t.op(&[da, dbu, zero], &[], (l - 1) * bdn, 4);
        self.t.keep(states);
        let last = self.t.op(&[states, da, dbu], &[], bdn, 4);
        if wi == 4 {
            self.t.keep(last);
        } else {
            let copies = self.t.op(&[states, last], &[], l * bdn, wi);
            self.t.keep(copies);
        }
        // Each step's `matmul(state, C[:, i])` saves its slice of C (under autocast, of C's
        // 16-bit copy).
        let c_in = self.autocast_copy(c_src);
        self.t.keep(c_in);
        let steps = self.t.op(&[last, c_in], &[], bdl, wi);
        let scan = self.t.op(&[steps], &[], bdl, wi);
        let ud = self.t.op(&[u], &[], bdl, 4);
        let y = self.t.op(&[scan, ud], &[], bdl, 4);
        let gw = self.w(proj);
        let gate = self.t.op(&[proj], &[], bdl, gw);
        let yg = self.t.op(&[y, gate], &[y, gate], bdl, 4);
        // `out_proj(scan_output.transpose(1, 2).to(dtype))`, dtype = the mixer's input dtype.
        let yt = self.cast(yg, self.c.num.param);
        self.linear_strided(yt, d, self.c.spec.hidden_size, s.proj_bias)
    }

    /// `mamba_inner_fn` (`MambaInnerFn.forward`, `checkpoint_lvl=1`): `xz` made contiguous and
    /// saved, `x_dbl` saved, B and C copied contiguous and saved, `scan_intermediates` and `out`
    /// saved; the convolution output, Δ and `out_z` live only inside the call.
    fn mamba_fused(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let (d, ns) = (s.d_inner, s.d_state);
        let (b, l) = (self.c.batch, self.c.seq);
        let bdl = b * d * l;
        let proj = self.linear(x, h, 2 * d, s.proj_bias);
        let w = self.w(proj);
        let a = self.ssm_a(d * ns);
        self.t.keep(a);
        let xz = self.t.op(&[proj], &[], 2 * bdl, w);
        self.t.keep(xz);
        let conv = self.t.op(&[xz], &[], bdl, w);
        self.weight_copy(s.dt_rank * d + (s.dt_rank + 2 * ns) * d + d * h);
        let x_dbl = self.t.op(&[conv], &[], b * l * (s.dt_rank + 2 * ns), w);
        self.t.keep(x_dbl);
        let delta = self.t.op(&[x_dbl], &[], bdl, w);
        let bc = self.t.op(&[x_dbl], &[], 2 * b * ns * l, w);
        self.t.keep(bc);
        let inter = self.t.op(
            &[conv, delta, bc],
            &[],
            bdl / l * l.div_ceil(SCAN_CHUNK) * 2 * ns,
            4,
        );
        self.t.keep(inter);
        let out = self.t.op(&[conv, delta, bc], &[], bdl, w);
        self.t.keep(out);
        let out_z = self.t.op(&[out, xz], &[], bdl, w);
        self.t.op(&[out_z], &[], b * l * h, w)
    }

    /// transformers' `Mamba2Mixer.cuda_kernels_forward` in training: `in_proj`, then
    /// `mamba_split_conv1d_scan_combined` (`MambaSplitConv1dScanCombinedFn`), which saves the
    /// in_proj output `zxbcdt`, the normed-and-gated scan output `out_x` and the gated
    /// RMSNorm's `rstd` (fp32, one per group per token), and recomputes the rest in backward.
    fn mamba2_fused(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let (b, l) = (self.c.batch, self.c.seq);
        let in_out = s.d_inner + s.conv_dim() + s.heads;
        let zx = self.linear(x, h, in_out, s.proj_bias);
        self.t.keep(zx);
        let w = self.w(zx);
        self.weight_copy(s.d_inner * h + s.d_inner);
        let conv = self.t.op(&[zx], &[], b * l * s.conv_dim(), w);
        let scan = self.t.op(&[conv, zx], &[], b * l * s.d_inner, w);
        let rstd = self.t.op(&[scan], &[], b * l * s.groups.max(1), 4);
        self.t.keep(rstd);
        let out_x = self.t.op(&[scan, rstd], &[], b * l * s.d_inner, w);
        self.t.keep(out_x);
        self.t.op(&[out_x], &[], b * l * h, w)
    }
}
