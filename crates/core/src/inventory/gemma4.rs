//! Gemma 4's tensors (`Naming::Gemma4`), as transformers 5.24 names them in
//! `Gemma4ForCausalLM` (`models/gemma4/modeling_gemma4.py`: `Gemma4TextModel.__init__`,
//! `Gemma4TextDecoderLayer.__init__`, `Gemma4TextAttention.__init__`,
//! `Gemma4TextRouter.__init__`, `Gemma4TextExperts.__init__`).

use super::builder::Builder;
use super::Component;
use crate::error::CoreError;
use crate::model::{Attention, Layer, MoeMlp, Norm, NormSlot, PerLayerInputs};

impl Builder<'_> {
    /// `Gemma4TextModel.__init__` with `hidden_size_per_layer_input`: the packed table
    /// `embed_tokens_per_layer [vocab_per_layer, layers · width]`, `per_layer_model_projection
    /// [layers · width, hidden]` and `per_layer_projection_norm [width]`.
    pub(super) fn gemma4_per_layer_tables(&mut self, p: PerLayerInputs) -> Result<(), CoreError> {
        let c = Component::Embedding;
        let packed = super::builder::mul(self.spec.num_layers(), p.width, "per-layer inputs")?;
        self.push(
            "model.embed_tokens_per_layer.weight".into(),
            vec![p.vocab, packed],
            None,
            c,
        )?;
        let h = self.spec.hidden_size;
        self.linear(
            "model.per_layer_model_projection",
            h,
            packed,
            false,
            None,
            c,
        )?;
        self.norm("model.per_layer_projection_norm", Norm::rms(p.width), None)
    }

    /// One `Gemma4TextDecoderLayer`: attention, the dense `mlp`, the four sandwich norms, the
    /// per-layer-input gate, projection and norm, and the experts beside the MLP.
    pub(super) fn gemma4_layer(
        &mut self,
        p: &str,
        layer: &Layer,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        for (slot, n) in &layer.norms {
            let name = match slot {
                NormSlot::PreAttention => "input_layernorm",
                NormSlot::PostAttention => "post_attention_layernorm",
                NormSlot::PreMlp => "pre_feedforward_layernorm",
                NormSlot::PostMlp | NormSlot::PreCrossAttention => "post_feedforward_layernorm",
            };
            self.norm(&format!("{p}.{name}"), *n, l)?;
        }
        self.gemma4_attention(&format!("{p}.self_attn"), &layer.attention, l)?;
        if let crate::model::Mlp::Dense(d) = &layer.mlp {
            self.dense_mlp(&format!("{p}.mlp"), d, l, Component::Mlp)?;
        }
        if let Some(ple) = self.spec.embedding.per_layer_inputs {
            let c = Component::Mlp;
            self.linear(
                &format!("{p}.per_layer_input_gate"),
                h,
                ple.width,
                false,
                l,
                c,
            )?;
            self.linear(
                &format!("{p}.per_layer_projection"),
                ple.width,
                h,
                false,
                l,
                c,
            )?;
            self.norm(&format!("{p}.post_per_layer_input_norm"), Norm::rms(h), l)?;
        }
        if let Some(m) = &layer.experts_beside {
            self.gemma4_experts(p, m, l)?;
        }
        Ok(())
    }

    /// `Gemma4TextAttention.__init__`: `q_proj` and `q_norm` always; `k_proj`, `k_norm` and
    /// (unless the values are the keys) `v_proj` only on a layer that makes its own keys and
    /// values; `v_norm` has no weight; `o_proj`.
    fn gemma4_attention(
        &mut self,
        a: &str,
        att: &Attention,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let hd = att.kind.qk_head_dim();
        let q = att.kind.heads() * hd;
        let kv = att.kind.kv_heads() * hd;
        self.linear(&format!("{a}.q_proj"), h, q, att.bias.q, l, c)?;
        if let Some(n) = att.qk_norm {
            self.norm(&format!("{a}.q_norm"), n, l)?;
        }
        if !att.kv_shared {
            if let Some(n) = att.qk_norm {
                self.norm(&format!("{a}.k_norm"), n, l)?;
            }
            self.linear(&format!("{a}.k_proj"), h, kv, att.bias.k, l, c)?;
            if !att.values_from_keys {
                self.linear(&format!("{a}.v_proj"), h, kv, att.bias.v, l, c)?;
            }
        }
        self.linear(&format!("{a}.o_proj"), q, h, att.bias.o, l, c)
    }

    /// `Gemma4TextRouter` (`proj [E, hidden]`, `scale [hidden]`, `per_expert_scale [E]`),
    /// `Gemma4TextExperts` (`gate_up_proj [E, 2·ffn, hidden]`, `down_proj [E, hidden, ffn]`)
    /// and the expert branch's three norms.
    fn gemma4_experts(&mut self, p: &str, m: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let (e, f) = (m.experts, m.expert.ffn);
        let r = Component::Router;
        self.linear(&format!("{p}.router.proj"), h, e, false, l, r)?;
        self.push(format!("{p}.router.scale"), vec![h], l, r)?;
        self.push(format!("{p}.router.per_expert_scale"), vec![e], l, r)?;
        let x = Component::Experts;
        self.push(format!("{p}.experts.gate_up_proj"), vec![e, 2 * f, h], l, x)?;
        self.push(format!("{p}.experts.down_proj"), vec![e, h, f], l, x)?;
        for n in [
            "post_feedforward_layernorm_1",
            "post_feedforward_layernorm_2",
            "pre_feedforward_layernorm_2",
        ] {
            self.norm(&format!("{p}.{n}"), Norm::rms(h), l)?;
        }
        Ok(())
    }
}
