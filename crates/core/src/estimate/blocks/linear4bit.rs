//! A frozen bitsandbytes 4-bit projection as the training step runs it (QLoRA): the packed
//! weight dequantized for the matmul in forward and again in backward, and PEFT's defensive
//! copy of the base output. Stream-only events (`Tape::dequant`): the walk counts the largest
//! dequantized matrix apart (`activations.rs`).

use super::{Prog, Tape};
use crate::estimate::quant::BNB_4BIT_BLOCK;
use crate::estimate::tape::Id;

/// How a block's 4-bit base weights are dequantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dequant {
    /// Bytes per element of the dequantized weight (the walk's `compute.min(2)`:
    /// `quant_state.dtype`, the 16-bit dtype the weight was loaded in).
    pub width: u64,
    /// Double quantization (`compress_statistics`): `dequantize_4bit` first dequantizes the
    /// uint8 absmax to fp32 (`dequantize_blockwise(quant_state.absmax, quant_state.state2)`),
    /// one fp32 value per block of 64, alive until the weight is made.
    pub nested: bool,
    /// The output is cast back to the input's dtype: `Linear4bit.forward` returns
    /// `bnb.matmul_4bit(x.to(self.compute_dtype), ...).to(inp_dtype)`
    /// (`bitsandbytes/nn/modules.py`). Written where the input is fp32 because PEFT's
    /// `prepare_model_for_kbit_training` made the residual stream fp32 (`job::kbit_casts`):
    /// the input is copied to the 16-bit compute dtype, the 16-bit output copied to fp32, under
    /// autocast too. Elsewhere the walk keeps the output at the matmul's width.
    pub input_dtype: bool,
}

impl Dequant {
    /// The tensors one dequantization makes for an `inp × out` weight, in order: the fp32
    /// absmax (double quantization only), then the weight.
    fn tensors(self, inp: u64, out: u64) -> [u64; 2] {
        let n = inp.saturating_mul(out);
        let absmax = if self.nested {
            n.div_ceil(BNB_4BIT_BLOCK) * 4
        } else {
            0
        };
        [absmax, n.saturating_mul(self.width)]
    }
}

/// Records one dequantization's tensors for the next op (`forward`) or the last op's
/// backward. The fp32 absmax of double quantization is freed with the weight here, when the
/// op returns, where `dequantize_4bit` frees it on its own return, before the matmul's output
/// is made: the stream holds it (1/32 of the 16-bit weight) over that output too.
fn record(t: &mut Tape, d: Dequant, inp: u64, out: u64, forward: bool) {
    for bytes in d.tensors(inp, out) {
        if forward {
            t.dequant(bytes);
        } else {
            t.dequant_backward(bytes);
        }
    }
}

impl Prog<'_> {
    /// `bnb.nn.Linear4bit.forward` → `bnb.matmul_4bit` → `MatMul4Bit.apply`
    /// (`bitsandbytes/nn/modules.py`, `autograd/_functions.py`): the input cast to the
    /// compute dtype (a no-op when it is already), the weight dequantized, `F.linear`, the
    /// dequantized weight dropped; the packed weight is frozen, so the input is not saved
    /// (`ctx.tensors = (None, B)`) and no weight gradient is made. In backward the weight is
    /// dequantized again for `grad_A`.
    /// With [`Dequant::input_dtype`] the input is first cast to the dequantized width and the
    /// output cast back to the input's.
    pub(super) fn linear_4bit(&mut self, x: Id, inp: u64, out: u64, d: Dequant) -> Id {
        let (xin, width) = if d.input_dtype {
            (self.cast(x, d.width), d.width)
        } else if self.c.num.autocast {
            (self.mm_input(x), 2)
        } else {
            (x, self.c.num.compute)
        };
        let rows = self.t.elements(x) / inp.max(1);
        record(&mut self.t, d, inp, out, true);
        let y = self.t.op(&[xin], &[], rows * out, width);
        record(&mut self.t, d, inp, out, false);
        if d.input_dtype {
            let back = self.w(x);
            self.cast(y, back)
        } else {
            y
        }
    }

    /// PEFT's `lora.bnb.Linear4bit.forward`: `result = result.clone()` after the base layer
    /// ("As per Tim Dettmers, for 4bit, we need to defensively clone here",
    /// `peft/tuners/lora/bnb.py`): a copy of the base output is made and the original
    /// dropped. Written as a stream-only tensor of the output's size made and dropped by the
    /// adapter's first op (the same bytes at each moment, the walk's tape unchanged; the
    /// surviving block is the original's rather than the copy's, and the copy overlaps that
    /// first op's r-wide output).
    pub(super) fn peft_clone(&mut self, y: Id) {
        let bytes = self.t.elements(y).saturating_mul(self.w(y));
        self.t.dequant(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Double quantization of a 4096 × 4096 weight: 262,144 blocks of 64, their fp32 absmax
    /// 1 MiB; the bf16 weight 32 MiB.
    #[test]
    fn a_dequantization_makes_the_absmax_then_the_weight() {
        let d = Dequant {
            width: 2,
            nested: true,
            input_dtype: false,
        };
        assert_eq!(d.tensors(4096, 4096), [1 << 20, 32 << 20]);
        let plain = Dequant {
            width: 2,
            nested: false,
            input_dtype: false,
        };
        assert_eq!(plain.tensors(4096, 4096), [0, 32 << 20]);
    }
}
