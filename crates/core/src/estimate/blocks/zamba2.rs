//! Zamba2's layers in training (transformers 5.24 `modeling_zamba2.py`).
//!
//! A Mamba layer (`Zamba2MambaDecoderLayer.forward`): `x + mamba(input_layernorm(x))`, the
//! residual in the stream's dtype (no `residual_in_fp32`). A hybrid layer
//! (`Zamba2HybridLayer.forward`) first runs its shared block on `cat([x, embeddings])`
//! (`Zamba2AttentionDecoderLayer.forward`: `input_layernorm` over 2·hidden, attention with the
//! q/k/v adapters added, `pre_ff_layernorm` on the attention output — no residual inside the
//! block — then `Zamba2MLP`: the fused `gate_up_proj` plus its adapter, `chunk(2)`,
//! `act(gate) · up`, `down_proj`), then its own `linear`, and adds that to the Mamba layer's
//! input before the norm; the residual stays `x`. The concatenation saves nothing (`CatBackward`
//! keeps sizes only); the embeddings it reads are the model's `torch.clone(inputs_embeds)`,
//! alive outside the block.
//!
//! The Mamba2 mixer runs the torch path on the CPU and on CUDA without `mamba_ssm`
//! (`Zamba2MambaMixer.forward` falls back to `mamba2_chunk_scan`, the code `Mamba2Mixer` runs:
//! [`Prog::mamba2_torch`]); with the kernels, `mamba2_split_conv1d_scan_combined`
//! ([`Prog::ssm_mixer`]'s fused branch).

use super::{Prog, Role};
use crate::estimate::tape::Id;
use crate::model::{Layer, NormKind, NormSlot, SharedBlock, Ssm};

impl Prog<'_> {
    /// One Zamba2 layer, Mamba or hybrid.
    pub(super) fn zamba2_layer(&mut self, x: Id, layer: &Layer, ssm: &Ssm) -> Id {
        let m_in = match &layer.shared_block {
            Some(sb) => {
                let t = self.zamba2_shared(x, sb);
                // `hidden_states + transformer_hidden_states`: a new tensor, nothing saved.
                self.elementwise(&[x, t], &[])
            }
            None => x,
        };
        let n = self.norm_in(m_in, layer, NormSlot::PreAttention);
        let m = self.ssm_mixer(n, ssm);
        self.residual(x, m)
    }

    /// The shared block and the hybrid layer's `linear` after it.
    fn zamba2_shared(&mut self, x: Id, sb: &SharedBlock) -> Id {
        let h = self.c.spec.hidden_size;
        let two_h = 2 * h;
        let w = self.w(x);
        let emb = self.t.external(self.tokens * h, w);
        let cat = self.t.op(&[x, emb], &[], self.tokens * two_h, w);
        let n1 = self.norm(cat, NormKind::RmsNorm, two_h);
        let k = sb.attention.kind;
        let (qw, kw) = (k.heads() * k.qk_head_dim(), k.kv_heads() * k.qk_head_dim());
        let q = self.linear_named(n1, two_h, qw, false, Role::Q);
        let q = self.zamba2_adapter(n1, q, sb, sb.attention_adapter, (two_h, qw));
        let kk = self.linear_named(n1, two_h, kw, false, Role::K);
        let kk = self.zamba2_adapter(n1, kk, sb, sb.attention_adapter, (two_h, kw));
        let v = self.linear_named(n1, two_h, kw, false, Role::V);
        let v = self.zamba2_adapter(n1, v, sb, sb.attention_adapter, (two_h, kw));
        let ctx = self.attention_core_from(q, kk, v, &sb.attention);
        let a = self.linear_named(ctx, qw, h, false, Role::O);
        if let Some(q) = self.query.take() {
            self.hold(q);
        }
        let n2 = self.norm(a, NormKind::RmsNorm, h);
        let f = sb.mlp.ffn;
        let gu = self.linear(n2, h, 2 * f, sb.mlp.bias);
        let gu = self.zamba2_adapter(n2, gu, sb, true, (h, 2 * f));
        // `torch.chunk(gate_up_state, 2)`: two views of the sum; the activation saves the
        // gate view and the product the up view, so the whole sum stays.
        self.t.keep(gu);
        let act = self.t.op(&[gu], &[], self.tokens * f, self.w(gu));
        self.t.keep(act);
        let y = self.t.op(&[act, gu], &[], self.tokens * f, self.w(gu));
        let o = self.linear(y, f, h, sb.mlp.bias);
        self.linear(o, h, h, false)
    }

    /// `y + adapter(x)` with the adapter an `nn.Sequential` of two bias-free linears through
    /// `adapter_rank` (each saves its input); `y` unchanged when the slot has none.
    fn zamba2_adapter(
        &mut self,
        x: Id,
        y: Id,
        sb: &SharedBlock,
        on: bool,
        (inp, out): (u64, u64),
    ) -> Id {
        if !on {
            return y;
        }
        let a = self.linear(x, inp, sb.adapter_rank, false);
        let b = self.linear(a, sb.adapter_rank, out, false);
        self.elementwise(&[y, b], &[])
    }
}
