//! Gemma 3n's decoder layer in a block program, as transformers 5.24 runs it
//! (`models/gemma3n/modeling_gemma3n.py`: `Gemma3nTextDecoderLayer.forward`,
//! `Gemma3nTextAltUp.predict` / `correct` / `compute_router_modalities` /
//! `scale_corrected_output`, `Gemma3nTextLaurelBlock.forward`, `Gemma3nTextMLP.forward` and
//! `_gaussian_topk`, `Gemma3nRMSNorm`; the attention is Gemma 4's, `Gemma3nTextAttention` being
//! the same module). The block's input and output are the `[altup_num_inputs, b, s, hidden]`
//! stack of residual streams, in the parameters' dtype.

use super::{Prog, Role};
use crate::estimate::tape::Id;
use crate::model::{DenseMlp, Gemma3nParts, Layer, Mlp, NormKind, NormSlot};

impl Prog<'_> {
    /// `Gemma3nTextDecoderLayer.forward` on the stacked streams `x`: AltUp's prediction, the
    /// input norm of the active stream, LAuReL and attention on it, the post-attention norm
    /// and residual, `(· + laurel) / √2`, the MLP between its two norms and its residual,
    /// AltUp's correction of every stream, and the per-layer input branch added in place to
    /// every stream but the first. Returns the corrected stack.
    ///
    /// Under `no_grad` the Python lifetimes of `Gemma3nTextDecoderLayer.forward`
    /// ([`Prog::hold`]): every local it binds lives until it returns — `predictions`
    /// (`[n, t, h]`), and the nine `[t, h]` tensors `active_prediction_normed`,
    /// `laurel_output`, `attn` (post-norm), `attn_gated`, `attn_laurel`, `attn_norm`,
    /// `attn_ffw`, `attn_ffw_norm`, `attn_ffw_laurel_gated` (none is rebound) — and the
    /// block's input is held by `Gemma3nTextModel.forward`'s loop until the block returns.
    /// Measured (`scripts/generate_live_at_peak.py` on `measure_generate_gemma3n_cpu.py`'s
    /// text model, 2 × 256, fp32): at the prefill's peak, inside layer 3's
    /// `altup.correct`, all nine `[512, 256]` fp32 locals (524,288 B each) are live beside
    /// the input and `predictions` stacks.
    pub(super) fn gemma3n_block(&mut self, x: Id, layer: &Layer, g: Gemma3nParts) -> Id {
        let (h, t) = (self.c.spec.hidden_size, self.tokens);
        let p = self.gemma3n_predict(x, g);
        // `predictions[altup_active_idx]`: a view of the stack; the norm's `pow` saves it.
        let a_in = self.gemma3n_view_norm(p, h);
        let laurel = self.gemma3n_laurel(a_in, g.laurel_rank);
        let a = self.gemma4_attention(a_in, &layer.attention);
        let a = self.norm_in(a, layer, NormSlot::PostAttention);
        let gated = self
            .t
            .fused_op(&[p, a], &[], t * h, self.w(p).max(self.w(a)));
        let summed = self.residual(gated, laurel);
        let attn_laurel = self.elementwise(&[summed], &[]);
        let m_in = self.norm_in(attn_laurel, layer, NormSlot::PreMlp);
        let ffw = match &layer.mlp {
            Mlp::Dense(d) => self.gemma3n_mlp(m_in, d, h),
            _ => self.ffn(m_in, layer),
        };
        let m = self.norm_in(ffw, layer, NormSlot::PostMlp);
        let activated = self.residual(attn_laurel, m);
        let c = self.gemma3n_correct(p, activated, g);
        let out = self.gemma3n_per_layer_input(c, layer, g);
        for local in [
            x,
            p,
            a_in,
            laurel,
            a,
            gated,
            attn_laurel,
            m_in,
            ffw,
            m,
            activated,
        ] {
            self.hold(local);
        }
        out
    }

    /// `Gemma3nTextAltUp.predict`: the router modalities of the active stream, the
    /// `prediction_coefs` linear, then `torch.matmul(hidden_states.permute(1, 2, 3, 0),
    /// all_coefs)`: the permuted stack reshapes to `[b·s, hidden, n]` as a view, which `bmm`
    /// saves (under autocast its 16-bit cast, a new tensor); the product is permuted back,
    /// `+= hidden_states` in place, made contiguous (a copy) and `type_as` the stack (under
    /// autocast one more copy, in fp32): the predictions, saved through the views the next
    /// norm reads.
    fn gemma3n_predict(&mut self, x: Id, g: Gemma3nParts) -> Id {
        let (h, n, t) = (self.c.spec.hidden_size, g.altup_inputs, self.tokens);
        let modalities = self.gemma3n_router(x, g);
        let coefs = self.linear(modalities, n, n * n, false);
        let xs = self.mm_input(x);
        let product = self
            .t
            .op(&[xs, coefs], &[xs, coefs], n * t * h, self.matmul_width());
        self.t.touch(x);
        let contiguous = self.t.op(&[product], &[], n * t * h, self.w(product));
        self.cast(contiguous, self.w(x))
    }

    /// `Gemma3nRMSNorm` with its weight on the active stream, a `[b·s, hidden]` view of the
    /// stack `src`: in fp32 (and under autocast) `pow` saves the view, keeping the stack; in
    /// pure 16-bit training `.float()` copies the view first and `pow` saves the copy; `x ·
    /// rstd` the fp32 normalised tensor that the weight's multiply saves; `type_as` the
    /// stack.
    fn gemma3n_view_norm(&mut self, src: Id, h: u64) -> Id {
        let t = self.tokens;
        let hn = self.rms_normalize_view(src, t, h);
        let saved: &[Id] = if self.c.lora.is_some() { &[] } else { &[hn] };
        let out = self.t.fused_op(&[hn], saved, t * h, 4);
        self.cast(out, self.w(src))
    }

    /// `Gemma3nTextAltUp.compute_router_modalities`: `router_norm` (on the active stream's
    /// view of `x`, or on a whole `[b·s, hidden]` tensor), `· router_input_scale` (a buffer:
    /// nothing saved but the product, which `modality_router` saves), the `[b·s, n]` linear,
    /// `tanh` in fp32 saving its output, `type_as` the input.
    fn gemma3n_router(&mut self, x: Id, g: Gemma3nParts) -> Id {
        let (h, t) = (self.c.spec.hidden_size, self.tokens);
        let normed = self.gemma3n_view_norm(x, h);
        let scaled = self.t.fused_op(&[normed], &[], t * h, self.w(normed));
        let routed = self.linear(scaled, h, g.altup_inputs, false);
        let r32 = self.cast(routed, 4);
        let th = self.t.fused_op(&[r32], &[], t * g.altup_inputs, 4);
        self.t.keep(th);
        self.cast(th, self.w(x))
    }

    /// `Gemma3nTextLaurelBlock.forward`: `linear_left` and `linear_right` (each saving its
    /// input), `post_laurel_norm`, the sum with the block's normed input.
    fn gemma3n_laurel(&mut self, x: Id, rank: u64) -> Id {
        let h = self.c.spec.hidden_size;
        let l = self.linear(x, h, rank, false);
        let r = self.linear(l, rank, h, false);
        let n = self.norm(r, NormKind::RmsNorm, h);
        self.residual(x, n)
    }

    /// `Gemma3nTextMLP.forward`: as a gated MLP, with `_gaussian_topk` on the gate where the
    /// layer is sparse: `mean` and `std` over the gate (`std` saves its input and its
    /// `[b·s, 1]` result), the cutoff, `inputs - cutoff` (nothing saved) and `relu` (saving
    /// its output, which the activation then saves as its input).
    fn gemma3n_mlp(&mut self, x: Id, d: &DenseMlp, h: u64) -> Id {
        if !d.gaussian_topk {
            return self.mlp(x, d, h);
        }
        let gate = self.linear_named(x, h, d.ffn, d.bias, Role::Gate);
        let rows = self.tokens;
        let gw = self.w(gate);
        self.t.keep(gate);
        let std = self.t.op(&[gate], &[], rows, gw);
        self.t.keep(std);
        let shifted = self.t.fused_op(&[gate, std], &[], rows * d.ffn, gw);
        let sparse = self.t.fused_op(&[shifted], &[], rows * d.ffn, gw);
        self.t.keep(sparse);
        let a = self.activation(sparse, &d.activation);
        let u = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
        let p = self.elementwise(&[a, u], &[a, u]);
        self.linear_named(p, d.ffn, h, d.bias, Role::Down)
    }

    /// `Gemma3nTextAltUp.correct`: the router modalities of the corrected active stream,
    /// `innovation = activated - predictions[active]`, repeated to every stream (a new
    /// `[n, b, s, hidden]` tensor, saved by the multiply), `correction_coefs` (its clamped
    /// weight through `F.linear`) `+ 1`, the multiply by the coefficients (saving both), and
    /// `corrected += predictions` in place. Under `no_grad` the `[t, n]` `modalities` is held
    /// to the multiply (a local of `correct`; measured live at the prefill's peak).
    fn gemma3n_correct(&mut self, p: Id, activated: Id, g: Gemma3nParts) -> Id {
        let (h, n, t) = (self.c.spec.hidden_size, g.altup_inputs, self.tokens);
        let modalities = self.gemma3n_router(activated, g);
        let innovation = self
            .t
            .fused_op(&[activated, p], &[], t * h, self.w(activated));
        let repeated = self.t.op(&[innovation], &[], n * t * h, self.w(innovation));
        let coefs = self.linear(modalities, n, n, false);
        let coefs = self.t.fused_op(&[coefs], &[], t * n, self.w(coefs));
        let w = self.w(repeated).max(self.w(coefs));
        let corrected = self
            .t
            .op(&[repeated, coefs], &[repeated, coefs], n * t * h, w);
        self.t.touch(p);
        // Under `no_grad` `modalities` lives until `correct` returns (its other locals,
        // `innovation` repeated and `all_coefs`, are the multiply's inputs).
        self.hold(modalities);
        corrected
    }

    /// The per-layer input branch of `Gemma3nTextDecoderLayer.forward`: the active stream
    /// cloned, `scale_corrected_output` (`· correct_output_scale`, saving the clone) when
    /// `altup_correct_scale`, then Gemma 4's branch (`per_layer_input_gate`, the activation,
    /// the product with this layer's per-layer input slice, `per_layer_projection`,
    /// `post_per_layer_input_norm`), added in place to streams `1..` of `c` (no new tensor).
    fn gemma3n_per_layer_input(&mut self, c: Id, layer: &Layer, g: Gemma3nParts) -> Id {
        let (h, t) = (self.c.spec.hidden_size, self.tokens);
        let Some(ple) = self.c.spec.embedding.per_layer_inputs else {
            return c;
        };
        let act = match &layer.mlp {
            Mlp::Dense(d) => d.activation.clone(),
            _ => "gelu_pytorch_tanh".to_string(),
        };
        let mut first = self.t.op(&[c], &[], t * h, self.w(c));
        if g.correct_scale {
            let saved: &[Id] = if self.c.lora.is_some() { &[] } else { &[first] };
            first = self.t.fused_op(&[first], saved, t * h, self.w(c));
        }
        let gate = self.linear(first, h, ple.width, false);
        let a = self.activation(gate, &act);
        let slice = self.t.external(t * ple.width, self.c.num.param);
        let prod = self.elementwise(&[a, slice], &[a, slice]);
        let y = self.linear(prod, ple.width, h, false);
        let y = self.norm(y, NormKind::RmsNorm, h);
        self.t.touch(y);
        self.t.touch(c);
        c
    }
}
