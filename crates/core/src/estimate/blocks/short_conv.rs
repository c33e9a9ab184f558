//! LFM2's gated short convolution on transformers' torch path (`modeling_lfm2.py`
//! `Lfm2ShortConv.forward` with no cache, as in training; `causal_conv1d_fn` is the Python
//! fallback of `use_kernel_func_from_hub_with_fallback` when no hub kernel is installed, which
//! is what the CPU runs). The `causal_conv1d` CUDA kernel, where the hub provides it, saves
//! its input and weight as the fallback's `F.conv1d` does, but not the padded output; the torch
//! path is the one modelled.

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::Ssm;

impl Prog<'_> {
    /// `BCx = in_proj(x).transpose(-1, -2)` (the linear saves `x`); `B, C, x = BCx.chunk(3)`
    /// (views); `Bx = B * x` saves both views, which keeps all of `BCx`;
    /// `causal_conv1d_fn(Bx)`: `Bx.to(weight.dtype)` (a new fp32 tensor when `Bx` is 16-bit
    /// under autocast), a depthwise `F.conv1d` with `padding = L_cache − 1` that saves its
    /// (autocast-cast) input and returns `L + L_cache − 1` positions, of which `[..., :L]` is
    /// a view, `.to(Bx.dtype)`; `y = C * conv` saves `C` and the sliced view (all of the
    /// padded output); `y.transpose(-1, -2).contiguous()` is already contiguous (the product
    /// takes `C`'s `[b, L, h]` layout), and `out_proj` saves it.
    pub(super) fn short_conv(&mut self, x: Id, s: &Ssm) -> Id {
        let h = self.c.spec.hidden_size;
        let (b, l) = (self.c.batch, self.c.seq);
        let n = b * l * h;
        let bcx = self.linear(x, h, 3 * h, s.proj_bias);
        let w = self.w(bcx);
        let bx = self.t.op(&[bcx], &[bcx], n, w);
        let xw = self.cast(bx, self.c.num.param);
        let xin = self.mm_input(xw);
        self.weight_copy(h * s.d_conv + if s.conv_bias { h } else { 0 });
        let ow = self.w(xin);
        let conv = self.t.op(&[xin], &[xin], b * h * (l + s.d_conv - 1), ow);
        let conv = self.cast(conv, w);
        let y = self.t.op(&[bcx, conv], &[bcx, conv], n, w);
        self.linear(y, h, h, s.proj_bias)
    }
}
