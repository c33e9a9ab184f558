//! The feed-forward part of a block program: a dense MLP (gated or not) and routed experts.

use super::{Prog, Role};
use crate::estimate::tape::Id;
use crate::model::{DenseMlp, MoeMlp, Naming};

impl Prog<'_> {
    /// `hidden_states *= torch.empty_like(hidden_states).uniform_(1 - j, 1 + j)` in training,
    /// `times` over (`MoeMlp::input_jitter`): each noise tensor is saved by the in-place
    /// multiply for backward; the input itself is modified in place (no new tensor).
    fn input_jitter(&mut self, x: Id, times: u64) -> Id {
        if self.c.no_grad {
            return x;
        }
        for _ in 0..times {
            let noise = self.t.op(&[x], &[], self.t.elements(x), self.w(x));
            self.t.keep(noise);
            self.t.touch(x);
        }
        x
    }

    pub(super) fn mlp(&mut self, x: Id, d: &DenseMlp, h: u64) -> Id {
        // T5's feed-forward drops out its inner activations before `wo`
        // (`T5DenseActDense` / `T5DenseGatedActDense`, `dropout_rate`): a mask of the inner
        // width, and the dropped tensor is what `wo` saves.
        let inner_dropout = if self.c.spec.naming == Naming::T5 {
            self.c.hidden_dropout
        } else {
            0.0
        };
        if d.gated {
            let g = self.linear_named(x, h, d.ffn, d.bias, Role::Gate);
            let a = self.activation(g, &d.activation);
            let u = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
            let p = self.elementwise(&[a, u], &[a, u]);
            let p = self.dropout(p, inner_dropout);
            self.linear_named(p, d.ffn, h, d.bias, Role::Down)
        } else {
            let up = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
            let a = self.activation(up, &d.activation);
            let a = self.dropout(a, inner_dropout);
            self.linear_named(a, d.ffn, h, d.bias, Role::Down)
        }
    }

    /// Routed experts as transformers 5 runs them by default (`experts_implementation =
    /// "grouped_mm"`, `integrations/moe.py::grouped_mm_experts_forward`): the router (an
    /// `nn.Linear`, under autocast like any other, with a softmax in fp32 and `topk`), then the
    /// `top_k · tokens` routed rows sorted by expert and gathered, two `grouped_mm`s over the
    /// stacked expert weights and the weighting by the router scores. `grouped_mm` is not on
    /// autocast's lists and casts its input to the weights' dtype, so with fp32 weights the
    /// expert path runs and saves in fp32 even under autocast, and makes no 16-bit weight copies.
    pub(super) fn moe(&mut self, x: Id, m: &MoeMlp, h: u64) -> Id {
        let x = self.input_jitter(x, m.input_jitter);
        self.moe_routed(x, x, m, h)
    }

    /// [`Prog::moe`] after the jitter, the router reading `router_in` and the experts `x` (the
    /// same tensor but in Gemma 4, whose router and experts read differently normed copies of
    /// the residual, `Gemma4TextDecoderLayer.forward`).
    pub(super) fn moe_routed(&mut self, x: Id, router_in: Id, m: &MoeMlp, h: u64) -> Id {
        let logits = self.linear(router_in, h, m.experts, false);
        let probs = self.cast(logits, 4);
        let probs = self.t.op(&[probs], &[], self.tokens * m.experts, 4);
        self.t.keep(probs);
        // topk saves its int64 indices.
        let top_idx = self.t.op(&[probs], &[], self.tokens * m.top_k, 8);
        self.t.keep(top_idx);
        let rows = self.tokens * m.top_k;
        let xw = self.w(x);
        let w = self.c.num.param;
        // `hidden_states[perm // top_k]` and `sample_weights[perm]` save their int64 indices.
        let [token_idx, perm] = self.saved_indices(top_idx, rows);
        let scores = self.t.op(&[probs], &[], rows, 4);
        self.t.keep(scores);
        // The per-expert offsets (int32) grouped_mm saves.
        let offsets = self.t.op(&[top_idx], &[], m.experts, 4);
        self.t.keep(offsets);
        let gathered = self.t.op(&[x, token_idx], &[], rows * h, xw);
        let input = self.cast(gathered, w);
        let ffn = m.expert.ffn;
        let down_in = if m.expert.gated {
            // One grouped_mm makes gate and up side by side; the activation saves the gate
            // half and the product both halves: the whole output stays saved.
            let gate_up = self.t.op(&[input], &[input], rows * 2 * ffn, w);
            self.t.keep(gate_up);
            let act = self.t.op(&[gate_up], &[], rows * ffn, w);
            self.t.op(&[act, gate_up], &[act], rows * ffn, w)
        } else {
            let up = self.t.op(&[input], &[input], rows * ffn, w);
            self.activation(up, &m.expert.activation)
        };
        let proj = self.t.op(&[down_in], &[down_in], rows * h, w);
        // proj · scores (fp32 scores promote the product), back in token order (an index that
        // saves the inverse permutation), summed over the top_k copies, cast to the input's dtype.
        let weighted = self
            .t
            .op(&[proj, scores], &[proj, scores], rows * h, w.max(4));
        let inv_perm = self.t.op(&[perm], &[], rows, 8);
        let ordered = self
            .t
            .op(&[weighted, inv_perm], &[inv_perm], rows * h, w.max(4));
        let summed = self.t.op(&[ordered], &[], self.tokens * h, w.max(4));
        let mut out = self.cast(summed, xw);
        if let Some(shared) = &m.shared {
            let s = self.mlp(x, shared, h);
            let s = if m.shared_gate {
                let gate = self.linear(x, h, 1, false);
                let gate = self.t.op(&[gate], &[], self.tokens, self.w(gate));
                self.t.keep(gate);
                self.elementwise(&[s, gate], &[s, gate])
            } else {
                s
            };
            out = self.residual(out, s);
        }
        out
    }
}
