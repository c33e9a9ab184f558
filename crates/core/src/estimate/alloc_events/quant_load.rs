//! A bitsandbytes weight as its load puts it on the device. 4-bit: the 16-bit weight moved
//! to the GPU, quantized there, and dropped (`bnb.nn.Params4bit._quantize`,
//! `bitsandbytes/nn/modules.py`: `w = self.data.contiguous().to(device)`, then
//! `bnb.functional.quantize_4bit(w, ...)`), leaving the packed bytes and the quant state
//! (`functional.py` `quantize_4bit`; the sizes are the walk's, `quant/bitsandbytes.rs`).
//! LLM.int8: `Int8Params._quantize` (bitsandbytes 0.50.1) casts the weight to an fp16 copy on
//! the device and runs `int8_vectorwise_quant` on it, keeping `CB` and `SCB`.

use super::Sink;
use crate::estimate::quant::{BNB_4BIT_BLOCK, BNB_4BIT_CODE_BYTES, BNB_NESTED_BLOCK};

/// `name2qmap["dynamic"]`: the 256-entry fp32 code of blockwise quantization, made on the
/// device by the first `quantize_blockwise` call (`functional.py`) and shared by every
/// nested state after it.
pub const DYNAMIC_CODE_BYTES: u64 = 256 * 4;

/// One bitsandbytes weight's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantLoad {
    /// Elements of the weight.
    pub elements: u64,
    /// Bytes per element of the 16-bit weight on the device before quantizing.
    pub width: u64,
    /// The format.
    pub kind: QuantKind,
}

/// Which bitsandbytes format a weight is loaded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantKind {
    /// NF4/FP4 (`Params4bit`); `nested`: double quantization (`compress_statistics`,
    /// QLoRA's `bnb_4bit_use_double_quant`).
    FourBit { nested: bool },
    /// LLM.int8 (`Int8Params`, `has_fp16_weights=False`) of a weight with `rows` output
    /// features (one fp32 scale each).
    Int8 { rows: u64 },
}

impl QuantLoad {
    /// Blocks of 64 (one absmax each).
    fn blocks(&self) -> u64 {
        self.elements.div_ceil(BNB_4BIT_BLOCK)
    }

    /// What stays on the device, requested sizes: 4-bit, packed `ceil(n/2)`, the absmax
    /// (fp32, or uint8 under double quantization), the 16-entry fp32 code, and under double
    /// quantization the fp32 offset and the nested state's fp32 absmax per 256 blocks;
    /// int8, `SCB` (fp32 per row) and `CB` (one byte per element).
    pub fn kept(&self) -> Vec<u64> {
        let packed = self.elements.div_ceil(2);
        match self.kind {
            QuantKind::Int8 { rows } => vec![rows.saturating_mul(4), self.elements],
            QuantKind::FourBit { nested: true } => {
                let nested = self.blocks().div_ceil(BNB_NESTED_BLOCK) * 4;
                vec![packed, BNB_4BIT_CODE_BYTES, 4, nested, self.blocks()]
            }
            QuantKind::FourBit { nested: false } => {
                vec![self.blocks() * 4, packed, BNB_4BIT_CODE_BYTES]
            }
        }
    }

    /// The load's events (`dynamic_made`: the shared code of double quantization exists
    /// already).
    pub fn load_into<S: Sink>(&self, s: &mut S, dynamic_made: &mut bool) {
        match self.kind {
            QuantKind::FourBit { nested } => self.load_4bit(s, nested, dynamic_made),
            QuantKind::Int8 { rows } => self.load_int8(s, rows),
        }
    }

    /// transformers 5.24's `Bnb8bitQuantize.convert` (`integrations/bitsandbytes.py`) hands
    /// the loaded weight (on the device, `width` bytes per element) to
    /// `Int8Params(value.to("cpu"), ...).to(value_device)`, whose `_quantize` makes
    /// `B = self.data.contiguous().to(device=device, dtype=torch.float16)` and
    /// `int8_vectorwise_quant(B)` (`backends/cuda/ops.py`: `row_stats = torch.empty(rows,
    /// float32)`, then `out_row = torch.empty(A.shape, int8)`; the load's threshold is 0, so
    /// no outlier mask). `B` goes when `_quantize` returns, the loaded weight when the loader
    /// drops it.
    fn load_int8<S: Sink>(&self, s: &mut S, rows: u64) {
        let loaded = s.alloc(self.elements.saturating_mul(self.width));
        let b = s.alloc(self.elements.saturating_mul(2));
        s.alloc(rows.saturating_mul(4));
        s.alloc(self.elements);
        s.free(b);
        s.free(loaded);
    }

    /// The load's events. `quantize_4bit` (bitsandbytes ≥ 0.46, the CUDA op
    /// `bitsandbytes::quantize_4bit`: `absmax = torch.empty((blocks,), float32)`, then
    /// `out = torch.empty(((n + 1) // 2, 1), uint8)`) makes the fp32 absmax and the packed
    /// weight, then `code = get_4bit_type(quant_type, device=A.device)` (16 fp32 values, a new
    /// tensor per call). With double quantization: `offset = _absmax.mean()`, the centred
    /// `_absmax - offset`, `quantize_blockwise(..., blocksize=256)` (the shared dynamic code on
    /// its first call, then the op's fp32 absmax and uint8 output), the centred copy dropped
    /// when the call returns, `del _absmax`. `_quantize` returns and the 16-bit weight goes.
    fn load_4bit<S: Sink>(&self, s: &mut S, nested: bool, dynamic_made: &mut bool) {
        let full = s.alloc(self.elements.saturating_mul(self.width));
        let blocks = self.blocks();
        let absmax = s.alloc(blocks * 4);
        s.alloc(self.elements.div_ceil(2));
        s.alloc(BNB_4BIT_CODE_BYTES);
        if nested {
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
            kind: QuantKind::FourBit { nested },
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

    /// Llama-3.1-8B's `gate_proj` (14336 × 4096) loaded in bf16 under LLM.int8: the loaded
    /// bf16 weight (14336·4096·2 = 117,440,512 B), its fp16 copy `B` (the same), `SCB`
    /// (14336 fp32 = 57,344 B), `CB` (58,720,256 B, one byte each); then `B` and the loaded
    /// weight freed. What stays is the walk's `int8_bytes`: n + out·4 = 58,777,600 B.
    #[test]
    fn an_int8_load() {
        let q = QuantLoad {
            elements: 14336 * 4096,
            width: 2,
            kind: QuantKind::Int8 { rows: 14336 },
        };
        let mut s = Stream::default();
        q.load_into(&mut s, &mut false);
        let allocs: Vec<u64> = s.alloc_sizes().collect();
        assert_eq!(allocs, [117_440_512, 117_440_512, 57_344, 58_720_256]);
        assert_eq!(s.live_bytes(), 58_777_600);
        assert_eq!(q.kept().iter().sum::<u64>(), 58_777_600);
    }
}
