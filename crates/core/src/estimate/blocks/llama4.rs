//! Llama 4's departures from a Llama block (transformers 5.x `modeling_llama4.py`): the
//! weightless L2 norm on q and k, and `Llama4TextMoe`, which sends every token through every
//! expert (`hidden_states.repeat(num_experts, 1)` scaled by the sigmoid router scores, zero for
//! the experts a token was not routed to, then two `torch.bmm` over the stacked experts) and adds
//! an always-active shared expert.

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::MoeMlp;

impl Prog<'_> {
    /// `Llama4TextL2Norm`: `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x)`
    /// over one head of `dim`: `pow` saves the fp32 input, `rsqrt` its output, the product
    /// both; no weight.
    pub(super) fn l2_norm(&mut self, x: Id, dim: u64) -> Id {
        let in_w = self.w(x);
        let out = self.normalize_fp32(x, dim);
        self.cast(out, in_w)
    }

    /// `Llama4TextMoe.forward`: the router (`nn.Linear`, `topk` saving its int64 indices, a
    /// `-inf`-filled scatter of the top values, `sigmoid` in fp32 saving its output, cast back),
    /// `repeat` of the input once per expert (`E · tokens` rows) times the transposed scores
    /// (saving both), `bmm` with `gate_up_proj` (saving its input), `up · act(gate)` (the
    /// activation saves the gate half, the product both halves: the whole `gate_up` output
    /// stays saved), `bmm` with `down_proj` (saving its input), the sum over experts, and the
    /// shared expert's dense MLP added in place.
    pub(super) fn llama4_moe(&mut self, x: Id, m: &MoeMlp, h: u64) -> Id {
        let e = m.experts;
        let logits = self.linear(x, h, e, false);
        let lw = self.w(logits);
        let idx = self.t.op(&[logits], &[], self.tokens * m.top_k, 8);
        self.t.keep(idx);
        let scattered = self.t.op(&[logits, idx], &[], self.tokens * e, lw);
        let s32 = self.cast(scattered, 4);
        let sig = self.t.op(&[s32], &[], self.tokens * e, 4);
        self.t.keep(sig);
        let scores = self.cast(sig, lw);
        let rows = self.tokens * e;
        let xw = self.w(x);
        let repeated = self.t.op(&[x], &[], rows * h, xw);
        let routed = self.t.op(
            &[repeated, scores],
            &[repeated, scores],
            rows * h,
            xw.max(lw),
        );
        let input = self.mm_input(routed);
        let ffn = m.expert.ffn;
        // `bmm` is on autocast's 16-bit list: it caches 16-bit copies of fp32 expert weights.
        if self.c.num.autocast && self.c.num.param == 4 {
            self.weight_copies += 2 * 3 * e * h * ffn;
        }
        let w = if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        };
        let gate_up = self.t.op(&[input], &[input], rows * 2 * ffn, w);
        self.t.keep(gate_up);
        let act = self.t.op(&[gate_up], &[], rows * ffn, w);
        let prod = self.t.op(&[act, gate_up], &[act], rows * ffn, w);
        let down = self.t.op(&[prod], &[prod], rows * h, w);
        let routed_out = self.t.op(&[down], &[], self.tokens * h, w);
        match &m.shared {
            Some(shared) => {
                let s = self.mlp(x, shared, h);
                self.residual(s, routed_out)
            }
            None => routed_out,
        }
    }
}
