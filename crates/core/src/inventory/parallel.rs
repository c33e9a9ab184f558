//! The inventory of a state-space mixer that runs beside a layer's attention (Falcon-H1), named
//! as the published checkpoints name it (`model.layers.N.mamba.*`).

use super::builder::Builder;
use super::Component;
use crate::error::CoreError;
use crate::model::{Norm, ParallelSsm};

impl Builder<'_> {
    /// `FalconH1Mixer` (transformers 5.x `modeling_falcon_h1.py`): `in_proj [d_inner + conv_dim
    /// + heads, h]` (bias: `mamba_proj_bias`), depthwise `conv1d [conv_dim, 1, d_conv]` (bias:
    /// `mamba_conv_bias`), `dt_bias`, `A_log`, `D` `[heads]`, the gated `norm [d_inner]` only
    /// with `mamba_rms_norm` (else `nn.Identity`), `out_proj [h, d_inner]` (bias:
    /// `projectors_bias`). `conv_dim = d_inner + 2 · groups · d_state`.
    pub(super) fn parallel_ssm(
        &mut self,
        a: &str,
        p: &ParallelSsm,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let s = &p.ssm;
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let conv = s.conv_dim();
        let in_out = s.d_inner + conv + s.heads;
        self.linear(&format!("{a}.in_proj"), h, in_out, s.proj_bias, l, c)?;
        self.push(format!("{a}.conv1d.weight"), vec![conv, 1, s.d_conv], l, c)?;
        if s.conv_bias {
            self.push(format!("{a}.conv1d.bias"), vec![conv], l, c)?;
        }
        self.push(format!("{a}.dt_bias"), vec![s.heads], l, c)?;
        self.push(format!("{a}.A_log"), vec![s.heads], l, c)?;
        self.push(format!("{a}.D"), vec![s.heads], l, c)?;
        if p.gated_norm {
            self.norm(&format!("{a}.norm"), Norm::rms(s.d_inner), l)?;
        }
        self.linear(&format!("{a}.out_proj"), s.d_inner, h, p.out_bias, l, c)
    }
}
