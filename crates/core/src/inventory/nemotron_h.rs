//! The inventory of Nemotron-H's MoE mixer, named as nvidia's published checkpoints name it
//! (`backbone.layers.N.mixer.gate.weight`, `mixer.experts.E.up_proj.weight`, ...).

use super::builder::Builder;
use super::Component;
use crate::error::CoreError;
use crate::model::*;

impl Builder<'_> {
    /// `NemotronHMoE` (transformers 5.24 `modeling_nemotron_h.py`): the router
    /// `gate.weight [experts, hidden]` (`NemotronHTopkRouter`; its `e_score_correction_bias` is a
    /// buffer, no parameter), the optional latent projections `fc1_latent_proj [latent, hidden]`
    /// and `fc2_latent_proj [hidden, latent]`, the routed experts without a gate
    /// (`NemotronHExperts`: `up_proj [ffn, in]`, `down_proj [in, ffn]` per expert, `in` the
    /// latent width or the hidden size; transformers stacks them as `[E, ffn, in]`, the
    /// checkpoints store one tensor per expert), and the shared expert, a `NemotronHMLP` of
    /// `moe_shared_expert_intermediate_size`.
    pub(super) fn nemotron_h_moe(
        &mut self,
        m: &str,
        moe: &MoeMlp,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let r = Component::Router;
        self.linear(&format!("{m}.gate"), h, moe.experts, false, l, r)?;
        let width = moe.latent.unwrap_or(h);
        // The latent projections take `mlp_bias`, as the shared expert does.
        let bias = moe.shared.as_ref().is_some_and(|s| s.bias);
        if let Some(latent) = moe.latent {
            let c = Component::Mlp;
            self.linear(&format!("{m}.fc1_latent_proj"), h, latent, bias, l, c)?;
            self.linear(&format!("{m}.fc2_latent_proj"), latent, h, bias, l, c)?;
        }
        let f = moe.expert.ffn;
        let x = Component::Experts;
        for e in 0..moe.experts {
            let p = format!("{m}.experts.{e}");
            self.push(format!("{p}.up_proj.weight"), vec![f, width], l, x)?;
            self.push(format!("{p}.down_proj.weight"), vec![width, f], l, x)?;
        }
        if let Some(shared) = &moe.shared {
            self.dense_mlp(&format!("{m}.shared_experts"), shared, l, Component::Mlp)?;
        }
        Ok(())
    }
}
