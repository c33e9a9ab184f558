//! The inventory of Qwen3-Next's gated DeltaNet mixer (`modeling_qwen3_next.py`
//! `Qwen3NextGatedDeltaNet.__init__`), under the checkpoint's `linear_attn.*` names.

use super::builder::{mul, overflow, Builder};
use super::Component;
use crate::error::CoreError;
use crate::model::{Naming, Norm, Ssm};

impl Builder<'_> {
    /// `in_proj_qkvz [2·key_dim + 2·value_dim, h]` (q, k, v and the output gate z),
    /// `in_proj_ba [2·nv, h]` (β and the decay's input a per value head), the depthwise
    /// `conv1d [conv_dim, 1, k]` without bias (`conv_dim = 2·key_dim + value_dim`), `dt_bias`
    /// and `A_log` `[nv]`, the gated RMSNorm `norm [v_head_dim]` (one weight shared by every
    /// head) and `out_proj [h, value_dim]`, where `key_dim = nk · d_k`, `value_dim = nv · d_v`.
    /// Qwen3.5 ([`Naming::Qwen35`]) splits the two input projections into `in_proj_qkv
    /// [conv_dim, h]`, `in_proj_z [value_dim, h]`, `in_proj_b` and `in_proj_a [nv, h]`.
    pub(super) fn gated_delta(
        &mut self,
        a: &str,
        s: &Ssm,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let key_dim = mul(s.groups, s.d_state, "gated DeltaNet key width")?;
        let value_dim = s.d_inner;
        let qkvz = key_dim
            .checked_add(value_dim)
            .and_then(|v| v.checked_mul(2))
            .ok_or_else(|| overflow("in_proj_qkvz width"))?;
        if self.spec.naming == Naming::Qwen35 {
            // `Qwen3_5GatedDeltaNet.__init__`: the same widths in four projections.
            self.linear(&format!("{a}.in_proj_qkv"), h, s.conv_dim(), false, l, c)?;
            self.linear(&format!("{a}.in_proj_z"), h, value_dim, false, l, c)?;
            self.linear(&format!("{a}.in_proj_b"), h, s.heads, false, l, c)?;
            self.linear(&format!("{a}.in_proj_a"), h, s.heads, false, l, c)?;
        } else {
            self.linear(&format!("{a}.in_proj_qkvz"), h, qkvz, false, l, c)?;
            self.linear(&format!("{a}.in_proj_ba"), h, 2 * s.heads, false, l, c)?;
        }
        self.push(
            format!("{a}.conv1d.weight"),
            vec![s.conv_dim(), 1, s.d_conv],
            l,
            c,
        )?;
        self.push(format!("{a}.dt_bias"), vec![s.heads], l, c)?;
        self.push(format!("{a}.A_log"), vec![s.heads], l, c)?;
        let v_head = s.d_inner / s.heads.max(1);
        self.norm(&format!("{a}.norm"), Norm::rms(v_head), l)?;
        self.linear(&format!("{a}.out_proj"), value_dim, h, false, l, c)
    }
}
