//! Nemotron-H's block (transformers 5.24 `modeling_nemotron_h.py` `NemotronHBlock.forward`):
//! `x + mixer(norm(x))`, ONE mixer per layer: the Mamba2 mixer, attention (no rotary), the
//! squared-ReLU MLP or the MoE.
//!
//! The Mamba2 mixer (`NemotronHMamba2Mixer.forward`) runs the fused
//! `mamba2_split_conv1d_scan_combined` when the `mamba_ssm` kernels are there (CUDA) and its
//! torch path otherwise (CPU): `in_proj`, split into views (no copy, unlike Falcon-H1's
//! `mup_vector` product), `causal_conv1d_fn` + SiLU, `mamba2_chunk_scan` (the chunked SSD shared
//! with Falcon-H1, `ssd_torch.rs`), the gated RMSNorm (`NemotronHRMSNormGated`: `y ·
//! silu(gate.to(fp32))`, then per group of `d_inner / n_groups`, the weight after the cast
//! back), `out_proj` on the result cast to the mixer input's dtype. As for Falcon-H1 the
//! `attention` setting picks the path: `eager` the torch path, `sdpa`/`flash` the kernel.

use super::{Prog, Role};
use crate::estimate::tape::{Id, RmsWeight};
use crate::job::AttentionKernel;
use crate::model::{DenseMlp, Layer, Mlp, MoeMlp, NormSlot, ParallelSsm, Ssm};

/// The warning naming the path a Nemotron-H training estimate took for its Mamba2 layers.
pub fn nemotron_h_path_warning(kernel: AttentionKernel) -> String {
    super::ssd_warning::ssd_path_warning("Nemotron-H's Mamba2 layers", kernel)
}

impl Prog<'_> {
    /// `NemotronHBlock.forward` in training: `residual + mixer(norm(x))`
    /// (`hidden_states.to(norm.weight.dtype)` is a no-op on the residual stream).
    pub(super) fn nemotron_h_block(&mut self, x: Id, layer: &Layer) -> Id {
        let slot = if layer.attention.is_absent() {
            NormSlot::PreMlp
        } else {
            NormSlot::PreAttention
        };
        let n = self.norm_in(x, layer, slot);
        let out = if let Some(ssm) = layer.attention.kind.state_space() {
            let ssm = *ssm;
            self.nemotron_h_mixer(n, &ssm)
        } else if !layer.attention.is_absent() {
            self.attention(n, n, layer, false)
        } else {
            match &layer.mlp {
                Mlp::Moe(m) if m.latent.is_some() => self.nemotron_h_latent_moe(n, m),
                _ => self.ffn(n, layer),
            }
        };
        self.residual(x, out)
    }

    /// `NemotronHMamba2Mixer.forward` in training on the normed input `x`.
    fn nemotron_h_mixer(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let p = ParallelSsm {
            ssm: *s,
            out_bias: s.proj_bias,
            gated_norm: true,
            norm_before_gate: false,
            chunk: s.chunk.max(1),
        };
        let proj = self.linear(x, h, s.d_inner + s.conv_dim() + s.heads, s.proj_bias);
        let a = self.ssm_a(s.heads);
        if self.c.kernel != AttentionKernel::Eager {
            return self.falcon_h1_fused(proj, &p);
        }
        let y = self.falcon_ssd_torch(proj, a, &p);
        let y = self.nemotron_h_gate(y, proj, s);
        let y = self.cast(y, self.w(x));
        self.linear(y, s.d_inner, h, s.proj_bias)
    }

    /// `NemotronHRMSNormGated.forward(y, gate)` on the scan's fp32 output: `gate.to(fp32)` (a
    /// copy of the 16-bit projection's gate slice under autocast, which `silu` saves; the fp32
    /// projection itself otherwise), `silu`, the product saving both factors, then the RMSNorm
    /// per group in fp32 (input, `rsqrt` and normed tensor saved) with the weight after the cast
    /// back to the (fp32) input dtype.
    fn nemotron_h_gate(&mut self, y: Id, proj: Id, s: &Ssm) -> Id {
        let n = self.tokens * s.d_inner;
        let g32 = if self.w(proj) == 4 {
            proj
        } else {
            self.t.op(&[proj], &[], n, 4)
        };
        self.t.keep(g32);
        let sg = self.t.op(&[g32], &[], n, 4);
        let g = self.elementwise(&[y, sg], &[y, sg]);
        let g = self.cast(g, 4);
        let dim = s.d_inner / s.groups.max(1);
        let param = self.c.num.param;
        self.t
            .rms_norm(g, dim, param, RmsWeight::AfterCast, self.c.lora.is_some())
    }

    /// `NemotronHMoE.forward` with `moe_latent_size`: `fc1_latent_proj`, the routed experts in
    /// the latent width, `fc2_latent_proj`, plus the shared expert on the block's input. The
    /// router is modelled on the latent input (it reads the hidden state: the difference is
    /// the autocast copy of a `[tokens, hidden]` router input against `[tokens, latent]`).
    fn nemotron_h_latent_moe(&mut self, x: Id, m: &MoeMlp) -> Id {
        let h = self.c.spec.hidden_size;
        let latent = m.latent.unwrap_or(h);
        let bias = m.shared.as_ref().is_some_and(|s| s.bias);
        let l_in = self.linear(x, h, latent, bias);
        let routed = MoeMlp {
            shared: None,
            ..m.clone()
        };
        let r = self.moe(l_in, &routed, latent);
        let r = self.linear(r, latent, h, bias);
        match &m.shared {
            Some(shared) => {
                let s = self.nemotron_h_mlp(x, shared);
                self.residual(r, s)
            }
            None => r,
        }
    }

    fn nemotron_h_mlp(&mut self, x: Id, d: &DenseMlp) -> Id {
        let h = self.c.spec.hidden_size;
        let up = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
        let a = self.activation(up, &d.activation);
        self.linear_named(a, d.ffn, h, d.bias, Role::Down)
    }
}
