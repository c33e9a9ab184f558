//! The inventory of Zamba2's hybrid layers: the per-layer `linear`, and the shared transformer
//! block with its adapters, counted once under the block's first application (transformers
//! 5.24 `modeling_zamba2.py`; `model.parameters()` yields a tied parameter once, under the
//! first module that holds it).

use super::builder::{mul, Builder};
use super::Component;
use crate::error::CoreError;
use crate::model::{Norm, SharedBlock};

impl Builder<'_> {
    /// A hybrid layer's own `linear [h, h]` (no bias, `Zamba2Model.get_layers`) and, where the
    /// layer owns its block's weights ([`SharedBlock::owns_weights`]), the block: `input_layernorm
    /// [2h]`, `self_attn` q/k/v `[heads · head_dim, 2h]` / `[kv_heads · head_dim, 2h]` and
    /// `o_proj [h, heads · head_dim]` without bias (`Zamba2Attention.__init__`),
    /// `pre_ff_layernorm [h]`, `feed_forward.gate_up_proj [2·ffn, h]`, `down_proj [h, ffn]`
    /// (bias: `add_bias_linear`, `Zamba2MLP.__init__`), and the adapter slots of every
    /// application of the block (`gate_up_proj_adapter_list.V.{0,1}`: `[rank, h]`, `[2·ffn,
    /// rank]`; with `use_shared_attention_adapter` `linear_{q,k,v}_adapter_list.V.{0,1}`:
    /// `[rank, 2h]`, `[2h, rank]`), all bias-free.
    pub(super) fn zamba2_shared(
        &mut self,
        p: &str,
        sb: &SharedBlock,
        layer: u64,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        self.linear(&format!("{p}.linear"), h, h, false, l, Component::Attention)?;
        if sb.owns_weights(layer) {
            self.zamba2_block_weights(p, sb, l)?;
            for v in sb.adapter_visits() {
                self.zamba2_adapters(p, sb, v, l)?;
            }
        }
        Ok(())
    }

    fn zamba2_adapters(
        &mut self,
        p: &str,
        sb: &SharedBlock,
        v: u64,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let r = sb.adapter_rank;
        let t = format!("{p}.shared_transformer");
        let two_ffn = mul(2, sb.mlp.ffn, "gate_up width")?;
        let m = format!("{t}.feed_forward.gate_up_proj_adapter_list.{v}");
        self.linear(&format!("{m}.0"), h, r, false, l, Component::Mlp)?;
        self.linear(&format!("{m}.1"), r, two_ffn, false, l, Component::Mlp)?;
        if sb.attention_adapter {
            let two_h = mul(2, h, "attention input width")?;
            for x in ["q", "k", "v"] {
                let m = format!("{t}.self_attn.linear_{x}_adapter_list.{v}");
                let a = Component::Attention;
                self.linear(&format!("{m}.0"), two_h, r, false, l, a)?;
                self.linear(&format!("{m}.1"), r, two_h, false, l, a)?;
            }
        }
        Ok(())
    }

    fn zamba2_block_weights(
        &mut self,
        p: &str,
        sb: &SharedBlock,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let two_h = mul(2, h, "attention input width")?;
        let t = format!("{p}.shared_transformer");
        let k = sb.attention.kind;
        let q = mul(k.heads(), k.qk_head_dim(), "attention width")?;
        let kv = mul(k.kv_heads(), k.qk_head_dim(), "key/value width")?;
        let a = Component::Attention;
        self.norm(&format!("{t}.input_layernorm"), Norm::rms(two_h), l)?;
        self.linear(&format!("{t}.self_attn.q_proj"), two_h, q, false, l, a)?;
        self.linear(&format!("{t}.self_attn.k_proj"), two_h, kv, false, l, a)?;
        self.linear(&format!("{t}.self_attn.v_proj"), two_h, kv, false, l, a)?;
        self.linear(&format!("{t}.self_attn.o_proj"), q, h, false, l, a)?;
        self.norm(&format!("{t}.pre_ff_layernorm"), Norm::rms(h), l)?;
        let f = sb.mlp.ffn;
        let (m, b, c) = (format!("{t}.feed_forward"), sb.mlp.bias, Component::Mlp);
        let two_f = mul(2, f, "gate_up width")?;
        self.linear(&format!("{m}.gate_up_proj"), h, two_f, b, l, c)?;
        self.linear(&format!("{m}.down_proj"), f, h, b, l, c)
    }
}
