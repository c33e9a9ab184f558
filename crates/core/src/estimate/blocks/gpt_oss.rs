//! gpt-oss's departures from a Llama block (transformers 5.x `modeling_gpt_oss.py`): its
//! RMSNorm scales in fp32 before casting back, its eager attention appends per-head sink logits
//! to each softmax row, and its experts run a biased router and a clamped SwiGLU with biases
//! through `grouped_mm` (`integrations/moe.py::grouped_mm_experts_forward`, `has_bias=True`,
//! `is_transposed=True`).

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::MoeMlp;

impl Prog<'_> {
    /// `x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)` over rows of `dim`, the fp32 core
    /// of gpt-oss's RMSNorm and Llama 4's L2 norm: `pow` saves the fp32 input, `rsqrt` its
    /// output (kept), the product both. Returns the fp32 normalised tensor.
    pub(super) fn normalize_fp32(&mut self, x: Id, dim: u64) -> Id {
        let rows = self.t.elements(x) / dim.max(1);
        let x32 = self.cast(x, 4);
        self.rms_normalize(x32, rows, dim)
    }

    /// The fp32 statistics and product of an RMS normalisation over `rows × dim` values of the
    /// fp32 `x32` (all of it, or a view into it): `pow(2)` saving its input, `mean`, `+ eps`,
    /// `rsqrt` (its output saved), `x · rstd` saving both. Shared by every Python RMSNorm whose
    /// input is already in fp32 (`normalize_fp32` here, Jamba's and Qwen3-Next's norms on views).
    pub(super) fn rms_normalize(&mut self, x32: Id, rows: u64, dim: u64) -> Id {
        let sq = self.t.op(&[x32], &[x32], rows * dim, 4);
        let mean = self.t.op(&[sq], &[], rows, 4);
        let eps = self.t.op(&[mean], &[], rows, 4);
        let r = self.t.op(&[eps], &[], rows, 4);
        self.t.keep(r);
        self.t.op(&[x32, r], &[x32, r], rows * dim, 4)
    }

    /// `x.float()` on `n` elements of a view of `src`: the view itself when `src` is already
    /// fp32 (`Tensor.float` returns self), else a new fp32 copy (`aten::_to_copy`).
    pub(super) fn view_fp32(&mut self, src: Id, n: u64) -> Id {
        if self.w(src) == 4 {
            src
        } else {
            self.t.op(&[src], &[], n, 4)
        }
    }

    /// [`Self::rms_normalize`] on a `[rows, dim]` view of `src` taken to fp32 first
    /// ([`Self::view_fp32`]): in fp32 the view is what `pow` saves, keeping all of `src`.
    pub(super) fn rms_normalize_view(&mut self, src: Id, rows: u64, dim: u64) -> Id {
        let x32 = self.view_fp32(src, rows * dim);
        self.rms_normalize(x32, rows, dim)
    }

    /// `K` int64 index tensors of `rows` entries made from the router's `top_idx` (the sort's
    /// permutation, the token of each copy, ...), all made before any is saved: the order the
    /// MoE forwards (`modeling_gpt_oss.py`, transformers' `grouped_mm` experts) issue them.
    pub(super) fn saved_indices<const K: usize>(&mut self, top_idx: Id, rows: u64) -> [Id; K] {
        let ids = [(); K].map(|()| self.t.op(&[top_idx], &[], rows, 8));
        for &i in &ids {
            self.t.keep(i);
        }
        ids
    }

    /// `GptOssRMSNorm`: `(weight * (x.float() * rsqrt(mean(x²) + eps))).to(input_dtype)`. The
    /// product runs in fp32 and saves the fp32 normalised tensor (for the weight's gradient;
    /// nothing when the weight is frozen), then casts back.
    pub(super) fn gpt_oss_rms_norm(&mut self, x: Id, dim: u64) -> Id {
        let rows = self.t.elements(x) / dim.max(1);
        let in_w = self.w(x);
        let hn = self.normalize_fp32(x, dim);
        let saved: &[Id] = if self.c.lora.is_some() { &[] } else { &[hn] };
        let out = self.t.op(&[hn], saved, rows * dim, 4);
        self.cast(out, in_w)
    }

    /// The softmax of `eager_attention_forward` with sinks: `cat([scores, sinks])` (one more
    /// column per row, promoted to the sinks' dtype), minus the row max (`max(dim=-1)` saves its
    /// int64 indices), `softmax(dtype=combined.dtype)` (its output saved), the sink column
    /// sliced off (a view), dropout, and `.to(value dtype)` (a copy only when the dtypes
    /// differ). Returns what `@ V` reads.
    pub(super) fn sink_softmax(&mut self, masked: Id, n: u64, v: Id) -> Id {
        let rows = n / self.c.kv_seq.max(1);
        let wide = n + rows;
        let cw = self.w(masked).max(self.c.num.param);
        let combined = self.t.op(&[masked], &[], wide, cw);
        let idx = self.t.op(&[combined], &[], rows, 8);
        self.t.keep(idx);
        let shifted = self.t.op(&[combined], &[], wide, cw);
        let probs = self.t.op(&[shifted], &[], wide, cw);
        self.t.keep(probs);
        let dropped = self.dropout(probs, self.c.attn_dropout);
        let vw = self.w(v);
        if self.w(dropped) == vw {
            dropped
        } else {
            self.t.op(&[dropped], &[], n, vw)
        }
    }

    /// gpt-oss's MLP: `GptOssTopKRouter` (a biased `F.linear`, `topk` on the logits saving its
    /// indices, `softmax` over the top-k values in their own dtype, saved), then the grouped
    /// experts: rows sorted by expert and gathered, the bias rows gathered per expert
    /// (`gate_up_proj_bias[expert_ids_g]`, saving the int64 ids) and added in place, and
    /// `_apply_gate` on the interleaved halves — `gate.clamp(max=limit)` and
    /// `up.clamp(-limit, limit)` save their inputs (views of the gate/up output, so all of it),
    /// `sigmoid(gate · alpha)` saves its output, `gate · sig` both, `(up + 1) · glu` both — the
    /// down `grouped_mm` saving its input, its bias rows, the weighting by the scores, the
    /// inverse permutation and the sum over the top-k copies.
    pub(super) fn gpt_oss_moe(&mut self, x: Id, m: &MoeMlp, h: u64) -> Id {
        let logits = self.linear(x, h, m.experts, m.router_bias);
        let lw = self.w(logits);
        let top_vals = self.t.op(&[logits], &[], self.tokens * m.top_k, lw);
        let top_idx = self.t.op(&[logits], &[], self.tokens * m.top_k, 8);
        self.t.keep(top_idx);
        let scores = self.t.op(&[top_vals], &[], self.tokens * m.top_k, lw);
        self.t.keep(scores);
        let rows = self.tokens * m.top_k;
        let xw = self.w(x);
        let w = self.c.num.param;
        // `hidden_states[perm // top_k]` and `sample_weights[perm]` save their int64 indices;
        // the bias gathers share `expert_ids_g` (one more int64 index).
        let [token_idx, perm, expert_ids] = self.saved_indices(top_idx, rows);
        let sample = self.t.op(&[scores], &[], rows, lw);
        self.t.keep(sample);
        let offsets = self.t.op(&[top_idx], &[], m.experts, 4);
        self.t.keep(offsets);
        let gathered = self.t.op(&[x, token_idx], &[], rows * h, xw);
        let input = self.cast(gathered, w);
        let ffn = m.expert.ffn;
        let gate_up = self.t.op(&[input], &[input], rows * 2 * ffn, w);
        // The gathered bias rows live only for the in-place `add_`.
        if m.expert.bias {
            self.t.op(&[expert_ids], &[], rows * 2 * ffn, w);
        }
        self.t.keep(gate_up);
        let gate = self.t.op(&[gate_up], &[], rows * ffn, w);
        let up = self.t.op(&[gate_up], &[], rows * ffn, w);
        let scaled = self.t.op(&[gate], &[], rows * ffn, w);
        let sig = self.t.op(&[scaled], &[], rows * ffn, w);
        self.t.keep(sig);
        let glu = self.t.op(&[gate, sig], &[gate, sig], rows * ffn, w);
        let up1 = self.t.op(&[up], &[], rows * ffn, w);
        let act = self.t.op(&[up1, glu], &[up1, glu], rows * ffn, w);
        let proj = self.t.op(&[act], &[act], rows * h, w);
        if m.expert.bias {
            self.t.op(&[expert_ids], &[], rows * h, w);
        }
        let ww = w.max(lw);
        let weighted = self.t.op(&[proj, sample], &[proj, sample], rows * h, ww);
        let inv_perm = self.t.op(&[perm], &[], rows, 8);
        let ordered = self.t.op(&[weighted, inv_perm], &[inv_perm], rows * h, ww);
        let summed = self.t.op(&[ordered], &[], self.tokens * h, ww);
        self.cast(summed, xw)
    }
}
