//! Llama-3.2-Vision's blocks (transformers 5.x `modeling_mllama.py`): the language model's
//! `MllamaCrossAttentionDecoderLayer` (queries from the text, keys and values from the
//! projected vision states, tanh-gated branches) and the explicit float masks every mllama
//! attention receives.

use super::attention::{Qkv, Widths};
use super::Prog;
use crate::estimate::tape::Id;
use crate::model::{Attention, Layer, NormSlot};

impl Prog<'_> {
    /// `MllamaCrossAttentionDecoderLayer.forward`: `input_layernorm`, cross-attention over the
    /// `kv_seq` vision tokens (`MllamaTextCrossAttention`: `q_norm`/`k_norm` per head, no
    /// rotary), `residual + cross_attn_attn_gate.tanh() * h`, then `post_attention_layernorm`,
    /// the MLP, `full_text_row_masked_out_mask[:, 0] * h` and `residual +
    /// cross_attn_mlp_gate.tanh() * h`. The gates are `[1]` tensors, not 0-dim ones, so under
    /// autocast (fp32 gates) each gated product promotes to fp32; the product saves the
    /// branch output for the gate's gradient when the gate trains; the row mask (no grad) saves
    /// only itself. The vision states are the projector's output, made once per step (counted
    /// with the tower, `estimate::mllama`).
    pub(super) fn mllama_cross_block(&mut self, x: Id, layer: &Layer) -> Id {
        let h = self.c.spec.hidden_size;
        let a_in = self.norm_in(x, layer, NormSlot::PreAttention);
        let vis_w = if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        };
        let vis = self.t.external(self.c.batch * self.c.kv_seq * h, vis_w);
        let a = self.attention(a_in, vis, layer, true);
        let a = self.gated(a);
        let hcur = self.residual(x, a);
        let m_in = self.norm_in(hcur, layer, NormSlot::PreMlp);
        let m = self.ffn(m_in, layer);
        // `[b, s, 1]` row mask in the model's dtype (the parameters' width).
        let n = self.t.elements(m);
        let masked = self.t.op(&[m], &[], n, self.w(m).max(self.c.num.param));
        let m = self.gated(masked);
        self.residual(hcur, m)
    }

    /// `gate.tanh() * x` with a `[1]`-shaped gate in the parameters' dtype: the product is
    /// promoted to the wider of the two and saves `x` when the gate trains (not under PEFT).
    fn gated(&mut self, x: Id) -> Id {
        let n = self.t.elements(x);
        let w = self.w(x).max(self.c.num.param);
        if self.c.lora.is_none() {
            self.t.op(&[x], &[x], n, w)
        } else {
            self.t.op(&[x], &[], n, w)
        }
    }

    /// Whether this attention receives mllama's explicit 4-D float mask: the cross-attention
    /// mask (`_prepare_cross_attention_mask`) in the language model, the aspect-ratio mask
    /// (`_prepare_aspect_ratio_attention_mask`) in the tower.
    pub(super) fn mllama_masked(&self, att: &Attention) -> bool {
        att.vision_cross || self.c.spec.model_type == "mllama_vision"
    }

    /// SDPA with mllama's mask (`integrations/sdpa_attention.py`): with a mask
    /// `use_gqa_in_sdpa` is false, so `repeat_kv` copies grouped k and v out to all heads;
    /// the mask is made once per forward in the model's dtype — under autocast (fp32
    /// parameters) SDPA's autocast cast makes a 16-bit copy of it at every call, the copy
    /// SDPA saves.
    pub(super) fn mllama_mask_inputs(&mut self, p: &mut Qkv, w: Widths) {
        if w.kv_heads > 0 && w.kv_heads < w.heads {
            self.repeat_kv(p, w);
        }
        if self.c.num.autocast && self.c.num.param == 4 {
            let n = self.c.batch * self.c.seq * self.c.kv_seq;
            let mask = self.t.op(&[p.q], &[], n, 2);
            self.t.keep(mask);
        }
    }
}
