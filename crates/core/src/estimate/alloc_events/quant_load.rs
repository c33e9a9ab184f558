//! A bitsandbytes 4-bit weight as its load puts it on the device: the 16-bit weight moved
//! to the GPU, quantized there, and dropped (`bnb.nn.Params4bit._quantize`,
//! `bitsandbytes/nn/modules.py`: `w = self.data.contiguous().to(device)`, then
//! `bnb.functional.quantize_4bit(w, ...)`), leaving the packed bytes and the quant state
//! (`functional.py` `quantize_4bit`; the sizes are the walk's, `quant/bitsandbytes.rs`).

use super::Sink;
use crate::estimate::quant::{BNB_4BIT_BLOCK, BNB_4BIT_CODE_BYTES, BNB_NESTED_BLOCK};

/// `name2qmap["dynamic"]`: the 256-entry fp32 code of blockwise quantization, made on the
/// device by the first `quantize_blockwise` call (`functional.py`) and shared by every
/// nested state after it.
pub const DYNAMIC_CODE_BYTES: u64 = 256 * 4;

/// One 4-bit weight's load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuantLoad {
    /// Elements of the weight.
    pub elements: u64,
    /// Bytes per element of the 16-bit weight moved to the device before quantizing.
    pub width: u64,
    /// Double quantization (`compress_statistics`, QLoRA's `bnb_4bit_use_double_quant`).
    pub nested: bool,
}

impl QuantLoad {
    /// Blocks of 64 (one absmax each).
    fn blocks(&self) -> u64 {
        self.elements.div_ceil(BNB_4BIT_BLOCK)
    }

    /// What stays on the device, requested sizes: packed `ceil(n/2)`, the absmax (fp32, or
    /// uint8 under double quantization), the 16-entry fp32 code, and under double
    /// quantization the fp32 offset and the nested state's fp32 absmax per 256 blocks.
    pub fn kept(&self) -> Vec<u64> {
        let packed = self.elements.div_ceil(2);
        if self.nested {
            let nested = self.blocks().div_ceil(BNB_NESTED_BLOCK) * 4;
            vec![packed, BNB_4BIT_CODE_BYTES, 4, nested, self.blocks()]
        } else {
            vec![self.blocks() * 4, packed, BNB_4BIT_CODE_BYTES]
        }
    }

    /// The load's events. `quantize_4bit` (bitsandbytes ≥ 0.46, the CUDA op
    /// `bitsandbytes::quantize_4bit`: `absmax = torch.empty((blocks,), float32)`, then
    /// `out = torch.empty(((n + 1) // 2, 1), uint8)`) makes the fp32 absmax and the packed
    /// weight, then `code = get_4bit_type(quant_type, device=A.device)` (16 fp32 values, a new
    /// tensor per call). With double quantization: `offset = _absmax.mean()`, the centred
    /// `_absmax - offset`, `quantize_blockwise(..., blocksize=256)` (the shared dynamic code on
    /// its first call, then the op's fp32 absmax and uint8 output), the centred copy dropped
    /// when the call returns, `del _absmax`. `_quantize` returns and the 16-bit weight goes.
    /// `dynamic_made`: the shared code exists already.
    pub fn load_into<S: Sink>(&self, s: &mut S, dynamic_made: &mut bool) {
        let full = s.alloc(self.elements.saturating_mul(self.width));
        let blocks = self.blocks();
        let absmax = s.alloc(blocks * 4);
        s.alloc(self.elements.div_ceil(2));
        s.alloc(BNB_4BIT_CODE_BYTES);
        if self.nested {
            s.alloc(4);
            let centred = s.alloc(blocks * 4);
            if !*dynamic_made {
                s.alloc(DYNAMIC_CODE_BYTES);
                *dynamic_made = true;
            }
            s.alloc(blocks.div_ceil(BNB_NESTED_BLOCK) * 4);
            s.alloc(blocks);
            s.free(centred);
            s.free(absmax);
        }
        s.free(full);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Stream;
    use super::*;

    /// A 4096 × 4096 bf16 weight under NF4 with double quantization: the 32 MiB weight,
    /// 262,144 blocks → a 1 MiB fp32 absmax, 8 MiB packed, the 64 B code, the 4 B offset, the
    /// 1 MiB centred copy, the 1 KiB dynamic code (first weight only), 1,024 nested blocks →
    /// 4 KiB fp32, the 256 KiB uint8 absmax; then the centred copy, the fp32 absmax and the
    /// weight freed. What stays is the walk's `four_bit_dq_bytes`: n/2 + blocks + nested·4 +
    /// 4 + 64 = 8,388,608 + 262,144 + 4,096 + 4 + 64 = 8,654,916 B (+ the shared code).
    /// A 4096 × 4096 bf16 weight, with or without double quantization.
    fn a_4096_square(nested: bool) -> QuantLoad {
        QuantLoad {
            elements: 4096 * 4096,
            width: 2,
            nested,
        }
    }

    #[test]
    fn a_double_quantized_load() {
        let q = a_4096_square(true);
        let mut s = Stream::default();
        let mut made = false;
        q.load_into(&mut s, &mut made);
        let allocs: Vec<u64> = s.alloc_sizes().collect();
        assert_eq!(
            allocs,
            [
                32 << 20,
                1 << 20,
                8 << 20,
                64,
                4,
                1 << 20,
                1024,
                4096,
                256 << 10
            ]
        );
        assert_eq!(s.live_bytes(), 8_654_916 + 1024);
        assert_eq!(q.kept().iter().sum::<u64>(), 8_654_916);
        // The second weight does not make the shared code again.
        q.load_into(&mut s, &mut made);
        assert_eq!(s.live_bytes(), 2 * 8_654_916 + 1024);
    }

    /// NF4 without double quantization keeps the fp32 absmax: 8 MiB + 1 MiB + 64 B, the walk's
    /// `four_bit_bytes`.
    #[test]
    fn a_plain_nf4_load() {
        let q = a_4096_square(false);
        let mut s = Stream::default();
        q.load_into(&mut s, &mut false);
        assert_eq!(s.live_bytes(), (8 << 20) + (1 << 20) + 64);
        assert_eq!(q.kept().iter().sum::<u64>(), s.live_bytes());
    }
}
