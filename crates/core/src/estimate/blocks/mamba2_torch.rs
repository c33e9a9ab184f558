//! The Mamba2 mixer of Mamba2, Bamba and Granite 4.0-H on transformers' torch path
//! (transformers 5.24 `modeling_mamba2.py` `Mamba2Mixer.forward`, `modeling_bamba.py`
//! `BambaMixer.forward`, `modeling_granitemoehybrid.py` `GraniteMoeHybridMambaLayer.forward`,
//! op for op the same; CPU, or CUDA without `mamba_ssm`): in training the
//! mixer first asks for `mamba2_split_conv1d_scan_combined`, whose reference fallback returns
//! `None` without the kernel (`@use_kernel_func_from_hub_with_fallback`), so it runs
//! `causal_conv1d_fn` and `mamba2_chunk_scan` — the same functions, byte for byte, as
//! Falcon-H1's (`modeling_falcon_h1.py`), modelled in [`Prog::falcon_ssd_torch`] — then the
//! gated RMSNorm (gate first: `norm_before_gate=False`) and `out_proj`. With `mamba_ssm` on
//! CUDA (`attention` sdpa/flash) the fused kernel runs instead ([`Prog::ssm_mixer`]'s
//! `mamba2_fused`).

use super::Prog;
use crate::estimate::tape::{Id, RmsWeight};
use crate::job::AttentionKernel;
use crate::model::{ParallelSsm, Ssm};

/// The warning naming the path a Mamba2 / Bamba / Granite 4.0-H training estimate took for its
/// Mamba2 mixers.
pub fn mamba2_path_warning(kernel: AttentionKernel) -> String {
    if kernel == AttentionKernel::Eager {
        "Mamba2 mixers estimated on transformers' torch path (attention eager: no mamba_ssm \
         kernels), whose chunked scan saves [batch, heads, chunks, chunk, chunk] decay and score \
         tensors and copies of its einsum operands; on CUDA with mamba_ssm installed (attention \
         sdpa/flash) the fused kernel saves far less"
    } else {
        "Mamba2 mixers estimated on the fused mamba_ssm kernel (mamba_split_conv1d_scan_combined, \
         CUDA with mamba_ssm installed); without it transformers falls back to its torch path, \
         which saves far more (attention eager estimates that)"
    }
    .to_string()
}

impl Prog<'_> {
    /// `in_proj` (saves the normed input), `A = -exp(A_log.float())`, the chunked scan on the
    /// projection itself (no muP vector here, unlike Falcon-H1: under autocast the projection
    /// and Δ stay 16-bit, `dt + dt_bias.to(dt.dtype)`), the gate, `out_proj(y.to(dtype))`.
    pub(super) fn mamba2_torch(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let xw = self.w(x);
        let in_out = s.d_inner + s.conv_dim() + s.heads;
        let proj = self.linear(x, h, in_out, s.proj_bias);
        let a = self.ssm_a(s.heads);
        let p = ParallelSsm {
            ssm: *s,
            out_bias: s.proj_bias,
            gated_norm: true,
            norm_before_gate: false,
            chunk: s.chunk,
        };
        let y = self.falcon_ssd_torch(proj, a, &p);
        let y = self.mamba2_gate(y, proj, s);
        let y = self.cast(y, xw);
        self.linear(y, s.d_inner, h, s.proj_bias)
    }

    /// `BambaRMSNormGated.forward(y, gate)` (Granite's and Mamba2's `MambaRMSNormGated` are
    /// the same): `y.to(float32) · silu(gate.to(float32))` — `gate` a view of the projection, copied to fp32 when the
    /// projection is 16-bit; SiLU saves its input (that copy, or the fp32 projection), the
    /// product saves both factors — then the RMSNorm in fp32 (per group from 5.23.0) (saving its input,
    /// `rsqrt` and the normed tensor) and `weight ·` after the cast back to `y`'s dtype (fp32).
    fn mamba2_gate(&mut self, y: Id, proj: Id, s: &Ssm) -> Id {
        let n = self.tokens * s.d_inner;
        let g32 = if self.w(proj) == 4 {
            self.t.keep(proj);
            proj
        } else {
            let c = self.t.op(&[proj], &[], n, 4);
            self.t.keep(c);
            c
        };
        let sg = self.t.op(&[g32], &[], n, 4);
        let y32 = self.cast(y, 4);
        let gated = self.elementwise(&[y32, sg], &[y32, sg]);
        // Per group from transformers 5.23.0 (`group_size`), over all of d_inner before
        // (5.17.0–5.22.x `MambaRMSNormGated`; `job/transformers_version.rs`).
        let dim = if self.c.num.transformers.mamba2_norm_grouped() {
            s.d_inner / s.groups.max(1)
        } else {
            s.d_inner
        };
        let param = self.c.num.param;
        self.t.rms_norm(
            gated,
            dim,
            param,
            RmsWeight::AfterCast,
            self.c.lora.is_some(),
        )
    }
}
