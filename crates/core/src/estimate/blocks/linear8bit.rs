//! A frozen LLM.int8 projection as the training step runs it (`bnb.nn.Linear8bitLt` with
//! `has_fp16_weights=False` under LoRA), from bitsandbytes 0.50.1 (`autograd/_functions.py`
//! `MatMul8bitLt`; the CUDA kernels of `backends/cuda/ops.py`; `int8_scaled_mm` and
//! `int8_mixed_scaled_mm` have no CUDA kernel and run `backends/default/ops.py`'s composite,
//! which calls the CUDA `int8_linear_matmul` and `int8_mm_dequant`).
//!
//! Forward, for an input `A` of `M` rows × `K` and a weight `CB` of `N` × `K` (int8, with its
//! fp32 row scales `SCB`): `A.to(torch.float16)` (a copy unless `A` is fp16);
//! `int8_vectorwise_quant` makes `row_stats` (M fp32) and `out_row` (M·K int8), then with a
//! threshold (transformers' `llm_int8_threshold`, 6.0 by default) the outlier mask
//! `A.abs() >= threshold` (the fp16 `abs` freed once the bool mask exists), `outliers.any()`
//! (one byte) and `outliers.any(dim=0)` (K bytes) for `argwhere`; the fp16 copy and the mask
//! go when the call returns. `int8_linear_matmul` makes the int32 product (M·N·4),
//! `int8_mm_dequant` an fp16 result (M·N·2) and `.to(A.dtype)` a copy of it unless `A` is fp16;
//! with outlier columns the product is made once more by `output.addmm(subA, subB)`. The
//! quantized input and its scales go when the forward returns.
//!
//! `ctx.tensors = (CAt, subA, A)` holds the input `A` itself (a view of the projection's
//! input) — a ctx attribute, not `save_for_backward`, so autograd's release of saved tensors
//! does not drop it: it lives until the graph is freed, after the whole backward
//! (`Tape::hold_in_ctx`; `scripts/check_ctx_lifetime.py` shows the mechanism on the CPU).
//!
//! Backward (frozen weight, so only `grad_A`): `state.CB.to(dtype_A, copy=True)` (N·K in
//! `A`'s dtype), multiplied in place by `SCB.unsqueeze(1).mul(1/127)` (N fp32), then
//! `torch.matmul(grad_output, CB)` and the copy dropped.
//!
//! What depends on the data: the number `n` of outlier columns (input columns with some
//! |value| ≥ threshold). `argwhere`'s n int64 indices (held as `state.idx`), the zeroing
//! `out_row[:, outlier_cols] = 0`, `subA = A[:, outlier_cols]` (M·n, held in `ctx.tensors`),
//! and the dequantized weight columns `subB` (N·n int8 → fp32 → `A`'s dtype) scale with `n`
//! and are written at n = 0 bytes; whether `addmm` remakes the output depends on `n > 0`,
//! which is written as true under a threshold (LLM.int8, Dettmers et al. 2022, §4: from
//! 6.7B parameters on, features of magnitude ≥ 6 occur in every layer).

use super::Prog;
use crate::estimate::tape::Id;

/// How a block's LLM.int8 projections run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8Lt {
    /// The activations are fp16, so `A.to(torch.float16)` and `out.to(A.dtype)` return their
    /// tensor; bf16 or fp32 activations are copied both ways.
    pub fp16: bool,
    /// `threshold > 0` (transformers' default 6.0): the outlier mask, and `addmm`'s second
    /// product for the outlier columns.
    pub outliers: bool,
}

impl Prog<'_> {
    /// `Linear8bitLt.forward` → `bnb.matmul` → `MatMul8bitLt.apply` (module docs): every
    /// tensor of the Function's forward is `detached` (autograd sees only its output), the
    /// input is held until the graph is freed (`ctx.tensors`: `Tape::hold_in_ctx`), and the
    /// backward dequantizes `CB` (stream-only:
    /// the walk adds the largest such matrix to the block's backward, `activations.rs`).
    pub(super) fn linear_int8(&mut self, x: Id, inp: u64, out: u64, q: Int8Lt) -> Id {
        let w = self.w(x);
        let rows = self.t.elements(x) / inp.max(1);
        let same = q.fp16 && w == 2;
        let a16 = if same {
            x
        } else {
            self.t.detached_op(&[x], rows * inp, 2)
        };
        let row_stats = self.t.detached_op(&[a16], rows, 4);
        let ca = self.t.detached_op(&[a16], rows * inp, 1);
        if q.outliers {
            let abs = self.t.detached_op(&[a16], rows * inp, 2);
            let mask = self.t.detached_op(&[abs], rows * inp, 1);
            self.t.detached_op(&[mask], 1, 1);
            self.t.detached_op(&[mask], inp, 1);
            // The fp16 copy and the mask go when `int8_vectorwise_quant` returns.
            self.t.touch(a16);
        }
        let i32 = self.t.detached_op(&[ca, row_stats], rows * out, 4);
        // The product's fp16, its copy in A's dtype, `addmm`'s remake: the last is the
        // Function's output, the rest detached.
        let steps = 1 + usize::from(!same) + usize::from(q.outliers);
        let mut y = i32;
        for k in 1..=steps {
            let width = if k == 1 { 2 } else { w };
            y = if k == steps {
                let y = self.t.op(&[y, x, ca, row_stats], &[], rows * out, width);
                self.t.hold_in_ctx(x);
                y
            } else {
                self.t.detached_op(&[y], rows * out, width)
            };
            if k == 1 + usize::from(!same) {
                // `int8_scaled_mm` returns: the int32 product goes.
                self.t.touch(i32);
            }
        }
        self.t
            .dequant_backward(inp.saturating_mul(out).saturating_mul(w));
        self.t.dequant_backward(out.saturating_mul(4));
        y
    }
}
