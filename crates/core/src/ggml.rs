//! ggml tensor types and their block layouts.
//!
//! Source: `ggml/include/ggml.h` `enum ggml_type` (ids), `ggml/src/ggml.c` `type_traits[]`
//! (`blck_size`, `type_size`) and the block structs in `ggml/src/ggml-common.h` of llama.cpp;
//! cross-checked with gguf-py's `GGML_QUANT_SIZES` (`gguf-py/gguf/constants.py`). The one
//! disagreement is Q8_1: gguf-py still says 40 B (two f32), ggml's `block_q8_1` holds two halves
//! (36 B, `static_assert` in ggml-common.h); ggml wins, and Q8_1 never appears in model files.
//! A tensor of `n` elements (n a multiple of the block size) occupies
//! `n / block_size * type_size` bytes.
//!
//! Ids 31–33 (`Q4_0_4_4`, `Q4_0_4_8`, `Q4_0_8_8`) and 36–38 (`IQ4_NL_*`) are commented out in
//! current ggml.h ("support has been removed from gguf files"): llama.cpp refuses them now, but
//! files written in late 2024 carry them, so they stay here with their old Q4_0/IQ4_NL layout.

/// Declares the ggml types once: id, name, elements per block, bytes per block.
macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:literal, $size:literal;)*) => {
        /// A ggml tensor type as stored in a GGUF tensor info (`ggml_type`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType { $($variant,)* }

        impl GgmlType {
            /// Every known type, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$variant,)*];

            /// The numeric id used in GGUF files.
            pub fn id(self) -> u32 {
                match self { $(GgmlType::$variant => $id,)* }
            }

            /// The type for a numeric id, if known.
            pub fn from_id(id: u32) -> Option<Self> {
                match id { $($id => Some(GgmlType::$variant),)* _ => None }
            }

            /// Canonical name as llama.cpp prints it (`Q4_K`, `F16`, ...).
            pub fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => $name,)* }
            }

            /// Elements per block.
            pub fn block_size(self) -> u64 {
                match self { $(GgmlType::$variant => $block,)* }
            }

            /// Bytes per block.
            pub fn type_size(self) -> u64 {
                match self { $(GgmlType::$variant => $size,)* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    Q4_0_4_4 = 31, "Q4_0_4_4", 32, 18;
    Q4_0_4_8 = 32, "Q4_0_4_8", 32, 18;
    Q4_0_8_8 = 33, "Q4_0_8_8", 32, 18;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    IQ4_NL_4_4 = 36, "IQ4_NL_4_4", 32, 18;
    IQ4_NL_4_8 = 37, "IQ4_NL_4_8", 32, 18;
    IQ4_NL_8_8 = 38, "IQ4_NL_8_8", 32, 18;
    MXFP4 = 39, "MXFP4", 32, 17;
    NVFP4 = 40, "NVFP4", 64, 36;
    Q1_0 = 41, "Q1_0", 128, 18;
    Q2_0 = 42, "Q2_0", 64, 18;
}

impl GgmlType {
    /// Looks a type up by name, case-insensitively (`q4_k` → `Q4_K`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Exact bytes for `elements` values, or `None` when `elements` is not a whole number of
    /// blocks (ggml refuses such tensors) or the product overflows.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        if elements.checked_rem(self.block_size()) != Some(0) {
            return None;
        }
        (elements / self.block_size()).checked_mul(self.type_size())
    }

    /// Average storage bits per element, block overhead included.
    pub fn bits_per_element(self) -> f64 {
        self.type_size() as f64 * 8.0 / self.block_size() as f64
    }
}

crate::serde_name::serde_by_name!(GgmlType, name, GgmlType::from_name, "ggml type");

#[cfg(test)]
mod tests {
    use super::*;

    /// Block sizes derived by hand from the C structs in ggml-common.h.
    #[test]
    fn block_layouts_match_the_c_structs() {
        // block_q8_0 { ggml_half d; int8_t qs[32]; } = 2 + 32
        assert_eq!(GgmlType::Q8_0.type_size(), 2 + 32);
        // block_q4_K { half d, dmin; uint8 scales[12]; uint8 qs[128]; } = 4 + 12 + 128
        assert_eq!(GgmlType::Q4_K.type_size(), 4 + 12 + 128);
        // block_q6_K { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d; } = 128+64+16+2
        assert_eq!(GgmlType::Q6_K.type_size(), 128 + 64 + 16 + 2);
        // block_q8_K { float d; int8 qs[256]; int16 bsums[16]; } = 4 + 256 + 32
        assert_eq!(GgmlType::Q8_K.type_size(), 4 + 256 + 32);
        // 64x64 Q8_0 = 4096/32 blocks * 34 B = 4352 B (formats.md, verified with gguf-py)
        assert_eq!(GgmlType::Q8_0.bytes_for(64 * 64), Some(4352));
        assert_eq!(GgmlType::Q4_K.bytes_for(100), None);
        // block_mxfp4 { uint8 e; uint8 qs[32/2]; } = 1 + 16
        assert_eq!(GgmlType::MXFP4.type_size(), 1 + 16);
        // block_nvfp4 { uint8 d[64/16]; uint8 qs[64/2]; } = 4 + 32, 64 elements
        assert_eq!(
            (GgmlType::NVFP4.block_size(), GgmlType::NVFP4.type_size()),
            (64, 4 + 32)
        );
        // block_q1_0 { half d; uint8 qs[128/8]; } = 2 + 16, 128 elements
        assert_eq!(
            (GgmlType::Q1_0.block_size(), GgmlType::Q1_0.type_size()),
            (128, 2 + 16)
        );
        // block_q2_0 { half d; uint8 qs[64/4]; } = 2 + 16, 64 elements
        assert_eq!(
            (GgmlType::Q2_0.block_size(), GgmlType::Q2_0.type_size()),
            (64, 2 + 16)
        );
        // block_tq1_0 { uint8 qs[(256 - 4*256/64)/5]; uint8 qh[256/64]; half d; } = 48 + 4 + 2
        assert_eq!(GgmlType::TQ1_0.type_size(), 48 + 4 + 2);
        // block_iq3_s: half d + qs[64] + qh[8] + signs[32] + scales[4] = 2 + 13*8 + 4
        assert_eq!(GgmlType::IQ3_S.type_size(), 2 + 13 * 8 + 4);
    }

    #[test]
    fn ids_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(*t));
            assert_eq!(GgmlType::from_name(&t.name().to_lowercase()), Some(*t));
        }
        assert_eq!(GgmlType::from_id(4), None); // Q4_2, removed from ggml
        assert_eq!(GgmlType::from_id(43), None); // GGML_TYPE_COUNT in ggml.h
    }
}
