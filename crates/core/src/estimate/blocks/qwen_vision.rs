//! The Qwen2-VL / Qwen2.5-VL vision tower's block and patch merger as transformers 5 runs them
//! (`modeling_qwen2_vl.py`: `Qwen2VLVisionBlock`, `VisionAttention`, `VisionMlp`,
//! `PatchMerger`; `modeling_qwen2_5_vl.py`: `Qwen2_5_VLVisionBlock`, `Qwen2_5_VLMLP`,
//! `Qwen2_5_VLPatchMerger`). Besides its attention (`Prog::qwen_vision_attention`: fused
//! `qkv`, fp32 rotary, per-image chunks joined by `torch.cat`), the tower differs from a
//! language model in its residual stream: it starts at the patch embedding's `Conv3d`, which
//! autocast runs in 16 bit, so under autocast the stream is 16-bit and every fp32-list op
//! (LayerNorm) saves an fp32 copy of it instead of the stream itself.

use super::{BlockCtx, BlockMemory, Numerics, Prog};
use crate::estimate::tape::Id;
use crate::model::{Layer, NormKind, NormSlot};

/// Bytes per element of the tower's residual stream: the `Conv3d` patch embedding's output
/// (`PatchEmbed.forward`), 16-bit under autocast (`conv3d` is on autocast's lower-precision
/// list, `aten/src/ATen/autocast_mode.cpp`), else the weights' width.
pub fn qwen_vision_stream_width(num: Numerics) -> u64 {
    if num.autocast {
        2
    } else {
        num.param
    }
}

impl Prog<'_> {
    /// `Qwen2VLVisionBlock.forward`: `x + attn(norm1(x))`, then `h + mlp(norm2(h))`; the
    /// residual adds stay in the stream's dtype.
    fn qwen_vision_block(&mut self, x: Id, layer: &Layer) -> Id {
        let a_in = self.norm_in(x, layer, NormSlot::PreAttention);
        let a = self.qwen_vision_attention(a_in, layer);
        let h = self.residual(x, a);
        let m_in = self.norm_in(h, layer, NormSlot::PreMlp);
        let m = self.ffn(m_in, layer);
        self.residual(h, m)
    }

    /// `PatchMerger.forward`: `mlp(ln_q(x).view(-1, D·m²))` with `mlp` = Linear(D·m², D·m²),
    /// `nn.GELU` (saves its input), Linear(D·m², out).
    fn qwen_merger(&mut self, x: Id, norm: NormKind, merge: u64, out: u64) -> Id {
        let d = self.c.spec.hidden_size;
        let wide = d * merge * merge;
        let n = self.norm(x, norm, d);
        let a = self.linear(n, wide, wide, true);
        let g = self.activation(a, "gelu");
        self.linear(g, wide, out, true)
    }
}

/// One tower block over `c.batch` chunks (images, or Qwen2.5-VL's windows) of `c.seq`
/// patches: what it keeps (its output included) and its peak, its input in the stream's
/// width.
pub fn qwen_vision_block_memory(c: BlockCtx, layer: &Layer) -> BlockMemory {
    let mut p = Prog::new(c);
    let d = c.spec.hidden_size;
    let x = p.t.external(p.tokens * d, qwen_vision_stream_width(c.num));
    let out = p.qwen_vision_block(x, layer);
    p.finish(x, out)
}

/// The patch merger over the tower's `c.batch · c.seq` patches (`merge²` of them become one
/// language-model token of width `out`). Its output is not kept: the model joins the images'
/// tokens (`torch.cat`), casts them to the embeddings' dtype and `masked_scatter`s them into
/// the embeddings (`Qwen2VLModel.forward`), ops that save none of it.
pub fn qwen_merger_memory(c: BlockCtx, norm: NormKind, merge: u64, out: u64) -> BlockMemory {
    let mut p = Prog::new(c);
    let d = c.spec.hidden_size;
    let x = p.t.external(p.tokens * d, qwen_vision_stream_width(c.num));
    let y = p.qwen_merger(x, norm, merge, out);
    let y_bytes = super::super::overhead::round_size(p.t.elements(y) * p.t.width(y));
    let mut m = p.finish(x, y);
    m.kept = m.kept.saturating_sub(y_bytes);
    m
}
