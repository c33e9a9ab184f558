//! Gemma 4's decoder layer in a block program, as transformers 5.24 runs it
//! (`models/gemma4/modeling_gemma4.py`, `Gemma4TextDecoderLayer.forward`,
//! `Gemma4TextAttention.forward`, `Gemma4TextRouter.forward`, `Gemma4TextExperts` under
//! `use_experts_implementation`, `Gemma4RMSNorm`).

use super::attention::Widths;
use super::{Numerics, Prog, Role};
use crate::estimate::tape::Id;
use crate::model::{Attention, Layer, ModelSpec, MoeMlp, Naming, NormSlot};

impl Prog<'_> {
    /// `Gemma4TextDecoderLayer.forward`: `x + post_attention_layernorm(attn(input_layernorm(x)))`;
    /// then the dense MLP between `pre_feedforward_layernorm` and (with experts beside it)
    /// `post_feedforward_layernorm_1`, the experts on the same residual, the sum, and
    /// `post_feedforward_layernorm` before the residual add; then the per-layer input branch;
    /// finally `hidden_states *= layer_scalar` in place (a buffer: nothing saved, no new tensor).
    ///
    /// Under `no_grad` the Python lifetimes of `Gemma4TextDecoderLayer.forward` ([`Prog::hold`]):
    /// the normed input is the attention's and the MLP's argument, alive until that module
    /// returns (`hidden_states = self.mlp(hidden_states)` rebinds the name after the call), and
    /// the block's input is held by `Gemma4TextModel.forward`'s loop until the block returns
    /// (measured: the MLP's peak holds `pre_feedforward_layernorm`'s output beside its three
    /// `[t, intermediate]` tensors, `scripts/measure_gemma4audio_prefill.py`'s profile).
    pub(super) fn gemma4_block(&mut self, x: Id, layer: &Layer) -> Id {
        let h = self.c.spec.hidden_size;
        let a_in = self.norm_in(x, layer, NormSlot::PreAttention);
        let a = self.gemma4_attention(a_in, &layer.attention);
        self.hold(a_in);
        let a = self.norm_in(a, layer, NormSlot::PostAttention);
        let mid = self.residual(x, a);
        let m_in = self.norm_in(mid, layer, NormSlot::PreMlp);
        let mut m = self.ffn(m_in, layer);
        self.hold(m_in);
        if let Some(e) = &layer.experts_beside {
            let m1 = self.norm(m, crate::model::NormKind::RmsNorm, h);
            let m2 = self.gemma4_experts(mid, e);
            m = self.residual(m1, m2);
        }
        let m = self.norm_in(m, layer, NormSlot::PostMlp);
        let out = self.residual(mid, m);
        let out = match self.c.spec.embedding.per_layer_inputs {
            Some(p) => self.gemma4_per_layer_input(out, p.width, layer),
            None => out,
        };
        self.hold(x);
        out
    }

    /// `Gemma4TextAttention.forward`: `q_proj`, `q_norm`, rotary; on a layer with its own keys
    /// and values `k_proj` (and `v_proj`, or the key projection itself as values under
    /// `attention_k_eq_v`), `k_norm` and rotary on the keys, the weightless `v_norm` on the
    /// values; a kv-sharing layer reads the keys and values the producing layer made (saved
    /// there already: nothing new here but what the kernel makes of them); the kernel;
    /// `o_proj`.
    pub(super) fn gemma4_attention(&mut self, x: Id, att: &Attention) -> Id {
        let h = self.c.spec.hidden_size;
        let w = Widths::of(att.kind);
        let q = self.linear_named(x, h, w.q, att.bias.q, Role::Q);
        let (k, v) = if att.kv_shared {
            let (kv_tokens, width) = (self.c.batch * self.c.kv_seq, self.w(q));
            // Gemma 3n's shared keys are the producer's rotated keys: fp32 under autocast
            // (its cos/sin are the fp32 stack's dtype), which SDPA casts to 16 bit here.
            let kw = match self.c.spec.naming {
                crate::model::Naming::Gemma3n if self.c.num.autocast => 4,
                _ => width,
            };
            let k = self.t.external(kv_tokens * w.k, kw);
            (k, self.t.external(kv_tokens * w.v, width))
        } else {
            let k = self.linear_named(x, h, w.k, att.bias.k, Role::K);
            let v = if att.values_from_keys {
                k
            } else {
                self.linear_named(x, h, w.v, att.bias.v, Role::V)
            };
            let vw = self.w(v);
            let vn = self.normalize_fp32(v, att.kind.qk_head_dim());
            (k, self.cast(vn, vw))
        };
        let ctx = self.core_after_projections(q, k, v, att, false, true);
        let out = self.linear_named(ctx, w.out, h, att.bias.o, Role::O);
        if let Some(q) = self.query.take() {
            self.hold(q);
        }
        out
    }

    /// The expert branch (`Gemma4TextDecoderLayer.forward` with `enable_moe_block`): the router
    /// reads the residual through its weightless norm, `· scale` (saving the normed input for
    /// the scale's gradient) and `· hidden^-0.5`; the experts read
    /// `pre_feedforward_layernorm_2(residual)` (grouped_mm, as `Prog::moe`); then
    /// `post_feedforward_layernorm_2`.
    fn gemma4_experts(&mut self, residual: Id, m: &MoeMlp) -> Id {
        let h = self.c.spec.hidden_size;
        let rw = self.w(residual);
        let rn = self.normalize_fp32(residual, h);
        let rn = self.cast(rn, rw);
        let scaled = self.elementwise(&[rn], &[rn]);
        let router_in = self.elementwise(&[scaled], &[]);
        let x2 = self.norm(residual, crate::model::NormKind::RmsNorm, h);
        let out = self.moe_routed(x2, router_in, m, h);
        self.norm(out, crate::model::NormKind::RmsNorm, h)
    }

    /// The per-layer input branch: `per_layer_input_gate` (saving its input), the activation
    /// (saving its input), the product with this layer's slice of the per-layer inputs (saving
    /// both: the slice is a view of the model's `[b, s, layers, width]` tensor, counted once by
    /// the embeddings stage), `per_layer_projection`, `post_per_layer_input_norm`, the residual
    /// add. The activation is the MLP's (`ACT2FN[config.hidden_activation]` for both).
    fn gemma4_per_layer_input(&mut self, x: Id, width: u64, layer: &Layer) -> Id {
        let h = self.c.spec.hidden_size;
        let act = match &layer.mlp {
            crate::model::Mlp::Dense(d) => d.activation.clone(),
            _ => "gelu_pytorch_tanh".to_string(),
        };
        let g = self.linear(x, h, width, false);
        let a = self.activation(g, &act);
        let slice = self.t.external(self.tokens * width, self.c.num.param);
        let p = self.elementwise(&[a, slice], &[a, slice]);
        let y = self.linear(p, width, h, false);
        let y = self.norm(y, crate::model::NormKind::RmsNorm, h);
        self.residual(x, y)
    }
}

/// Bytes of keys and values each layer leaves in `shared_kv_states` under full activation
/// checkpointing (zero on all but the storing layers), by layer in `spec.all_layers()` order.
///
/// Source: transformers 5.24 `configuration_gemma4.py` `Gemma4TextConfig.kv_sharing_modes`
/// (the last layer of each `layer_types` kind before the first kv-sharing layer is `"store"`,
/// even when no layer reuses it) and `modeling_gemma4.py` `Gemma4TextAttention.forward`
/// (`shared_kv_states[self.layer_type] = key_states, value_states`). The dict is a keyword
/// argument of every layer's `torch.utils.checkpoint` call (non-reentrant: the recompute
/// closure keeps its arguments), so the tensors the storing layer's first forward wrote stay
/// alive until its recompute replaces them; without checkpointing the dict dies when the
/// model's forward returns and SDPA's saved set already covers them. The keys are the rotary
/// output, `k_norm(k) · cos + rotate_half(k) · sin`, in the width of `cos` and `sin`, which
/// `Gemma4TextRotaryEmbedding` casts to the hidden states' dtype (the parameters' width: fp32
/// under autocast, so a bf16 `k_norm` output times fp32 `cos` is fp32); the values are
/// `v_norm`'s output, `type_as` the projection (the matmul width). Not modelled: the
/// recomputed pair the dict then holds until the first layer's backward frees it.
pub(crate) fn checkpoint_stored_kv(
    spec: &ModelSpec,
    batch: u64,
    seq: u64,
    num: Numerics,
) -> Vec<u64> {
    let layers: Vec<&Layer> = spec.all_layers().collect();
    let mut stored = vec![0; layers.len()];
    if !matches!(spec.naming, Naming::Gemma4 | Naming::Gemma3n) {
        return stored;
    }
    let first_shared = layers
        .iter()
        .position(|l| l.attention.kv_shared)
        .unwrap_or(layers.len());
    // Gemma 3n stores nothing without kv-sharing layers (`configuration_gemma3n.py`
    // `kv_sharing_modes`: all `None` when `num_kv_shared_layers` is 0); Gemma 4 stores
    // whether or not a layer reads them.
    if spec.naming == Naming::Gemma3n && first_shared == layers.len() {
        return stored;
    }
    for sliding in [true, false] {
        let last = layers[..first_shared]
            .iter()
            .rposition(|l| l.attention.sliding_window.is_some() == sliding);
        if let Some(i) = last {
            let w = Widths::of(layers[i].attention.kind);
            let tokens = batch.saturating_mul(seq);
            let k = crate::estimate::overhead::round_size(tokens * w.k * num.param);
            let v = crate::estimate::overhead::round_size(tokens * w.v * num.compute);
            stored[i] = k + v;
        }
    }
    stored
}

/// Whether `generate`'s prefill runs Gemma 4's kv-sharing layers on the last token alone:
/// `Gemma4TextModel.forward` (transformers 5.24 `modeling_gemma4.py`) hands the layers from
/// `first_kv_shared_layer_idx` on the hidden states, per-layer inputs, rotary tables and masks
/// sliced to `logits_to_keep` (`_maybe_slice_kv_shared_inputs`): those layers write no cache,
/// so only the positions whose logits are kept need them. `generate` passes
/// `logits_to_keep = 1` (an inference job that generates tokens); the slicing is skipped under
/// flash attention (its mask cannot be sliced) and outside `generate` (a forward without new
/// tokens keeps every position's logits). The keys they attend to are still the whole prompt's.
/// Gemma 3n's forward does not slice (`modeling_gemma3n.py`).
pub(crate) fn generate_slices_kv_shared(spec: &ModelSpec, job: &crate::job::ResolvedJob) -> bool {
    use crate::job::{AttentionKernel, Task};
    spec.naming == Naming::Gemma4
        && job.task == Task::Infer
        && job.new_tokens > 0
        && job.attention != AttentionKernel::Flash
}
