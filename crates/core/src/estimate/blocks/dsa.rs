//! DeepSeek Sparse Attention's lightning indexer in a block program (DeepSeek-V3.2, GLM-5):
//! `DeepseekV32Indexer.forward` and the sparse mask `DeepseekV32Attention.forward` builds from
//! its top-k (`modeling_deepseek_v32.py`, transformers 5.24; `GlmMoeDsaIndexer` differs only in
//! its RoPE layout). The indexer runs under `@torch.no_grad()`: it saves nothing for backward
//! (a measured step: the block's activations match MLA's alone) and its weights get no
//! gradient; what it costs is transient — its fp32 scores `[b, s, heads, t]`, two at once
//! while `relu` runs — and the per-layer float mask that eager or SDPA attention reads.

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::Indexer;

impl Prog<'_> {
    /// The indexer on the block input `x` and the query latent `q_resid` (`q_a_layernorm`'s
    /// output), then the sparse mask; returns the mask `[b, 1, s, t]`, which the attention
    /// reads (the caller holds it until the attention has run). A GLM-5 `"shared"` layer runs
    /// no indexer and builds the mask from the previous layer's top-k indices.
    pub(super) fn dsa_indexer(&mut self, x: Id, q_resid: Id, ix: Indexer, rope: u64) -> Id {
        let (b, s, t) = (self.c.batch, self.c.seq, self.c.kv_seq);
        let k = ix.topk.min(t);
        let indices = if ix.shared {
            // `prev_topk_indices`: int32 `[b, s, topk]`, made by an earlier layer.
            self.t.external(b * s * k, 4)
        } else {
            let scores = self.index_scores(x, q_resid, ix, rope);
            // `index_scores + attention_mask` (promoted to the wider of the two), then `topk`:
            // values and int64 indices, `.to(torch.int32)`.
            let mw = self.w(scores).max(self.c.num.param);
            let masked = self.t.op(&[scores], &[], b * s * t, mw);
            let _values = self.t.op(&[masked], &[], b * s * k, mw);
            let long = self.t.op(&[masked], &[], b * s * k, 8);
            self.t.op(&[long], &[], b * s * k, 4)
        };
        // `new_ones((b, s, t), bool).scatter(-1, topk.long(), False)`: a bool tensor, the
        // int64 indices and the scattered copy; then `attention_mask.masked_fill(index_mask,
        // min)` in the mask's dtype (the embeddings': the parameters' width).
        let ones = self.t.op(&[indices], &[], b * s * t, 1);
        let long = self.t.op(&[indices], &[], b * s * k, 8);
        let index_mask = self.t.op(&[ones, long], &[], b * s * t, 1);
        self.t.op(&[index_mask], &[], b * s * t, self.c.num.param)
    }

    /// `index_scores [b, s, t]`: the indexer's query `wq_b(q_resid)` and key
    /// `k_norm(wk(x))`, RoPE on their first `rope` features, `q.float() @ k.float()ᵀ` over all
    /// heads (`[b, s, heads, t]`, fp32, or 16-bit under autocast), scaled, `relu`'d, and summed
    /// over heads with the `weights_proj(x).float()` weights.
    fn index_scores(&mut self, x: Id, q_resid: Id, ix: Indexer, rope: u64) -> Id {
        let (b, s, t) = (self.c.batch, self.c.seq, self.c.kv_seq);
        let rows = self.tokens;
        let mm_w = if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        };
        let qi = self.mm_input(q_resid);
        let q_wqb = self.t.op(&[qi], &[], rows * ix.heads * ix.head_dim, mm_w);
        let xi = self.mm_input(x);
        let k_lin = self.t.op(&[xi], &[], rows * ix.head_dim, mm_w);
        // `k_norm` is a LayerNorm (fp32 under autocast).
        let kw = if self.c.num.autocast { 4 } else { mm_w };
        let k_normed = self.t.op(&[k_lin], &[], rows * ix.head_dim, kw);
        let q_rot = self.rotary_no_grad(q_wqb, rows * ix.heads * rope.min(ix.head_dim));
        let k_rot = self.rotary_no_grad(k_normed, rows * rope.min(ix.head_dim));
        let qw = self.w(q_rot).max(mm_w);
        let q = self
            .t
            .op(&[q_rot, q_wqb], &[], rows * ix.heads * ix.head_dim, qw);
        let kcw = self.w(k_rot).max(kw);
        let k = self.t.op(&[k_rot, k_normed], &[], rows * ix.head_dim, kcw);
        // `q.float() @ k.float()ᵀ`: under autocast `matmul` casts both back to 16 bit (new
        // tensors) and its scores, the scaled and the `relu`'d ones, are 16-bit too.
        let qf = self.t.cast(q, 4);
        let kf = self.t.cast(k, 4);
        let (qi, ki) = (self.mm_input(qf), self.mm_input(kf));
        let sw = if self.c.num.autocast { 2 } else { 4 };
        let n = b * s * ix.heads * t;
        let raw = self.t.op(&[qi, ki], &[], n, sw);
        let scaled = self.t.op(&[raw], &[], n, sw);
        let relu = self.t.op(&[scaled], &[], n, sw);
        // `weights_proj(x).float()`; autocast's matmul casts it back down.
        let weights = self.t.op(&[x], &[], rows * ix.heads, 4);
        let wi = self.mm_input(weights);
        let index_scores = self.t.op(&[wi, relu], &[], b * s * t, sw);
        // The indexer's Python names hold its tensors until it returns: `q` (the `wq_b` output
        // behind the `q_rot` / `q_pass` views, then the concatenation), `k`, the rotated parts.
        for id in [q_wqb, q_rot, q, k_normed, k_rot, k] {
            self.t.touch(id);
        }
        index_scores
    }

    /// RoPE on `n` elements without autograd: `x·cos + rotate_half(x)·sin` makes four tensors
    /// of `n` (the products, the half-negated concatenation, the sum); returns the sum.
    fn rotary_no_grad(&mut self, x: Id, n: u64) -> Id {
        let w = self.w(x).max(self.c.num.param);
        let a = self.t.op(&[x], &[], n, w);
        let rh = self.t.op(&[x], &[], n, self.w(x));
        let b2 = self.t.op(&[rh], &[], n, w);
        self.t.op(&[a, b2], &[], n, w)
    }
}
