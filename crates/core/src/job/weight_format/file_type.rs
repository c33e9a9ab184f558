//! llama.cpp's file types (`llama_ftype`, the names llama-quantize accepts) and the ggml type
//! each stores by default (`llama_ftype_get_default_type` in `src/llama-quant.cpp`).

use crate::ggml::GgmlType;

/// Declares llama.cpp's file types (`llama_ftype`) with their default tensor type.
macro_rules! file_types {
    ($($v:ident = $name:literal => $def:ident,)*) => {
        /// A llama-quantize file type (`LLAMA_FTYPE_MOSTLY_*`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum FileType { $($v,)* }

        impl FileType {
            pub const ALL: &'static [FileType] = &[$(FileType::$v,)*];

            /// The name llama-quantize accepts.
            pub fn name(self) -> &'static str {
                match self {
                    $(FileType::$v => $name,)*
                }
            }

            /// `llama_ftype_get_default_type`.
            pub fn default_type(self) -> GgmlType {
                match self {
                    $(FileType::$v => GgmlType::$def,)*
                }
            }
        }
    };
}

file_types! {
    F32 = "F32" => F32,
    F16 = "F16" => F16,
    BF16 = "BF16" => BF16,
    Q4_0 = "Q4_0" => Q4_0,
    Q4_1 = "Q4_1" => Q4_1,
    Q5_0 = "Q5_0" => Q5_0,
    Q5_1 = "Q5_1" => Q5_1,
    Q8_0 = "Q8_0" => Q8_0,
    Q1_0 = "Q1_0" => Q1_0,
    Q2_0 = "Q2_0" => Q2_0,
    MXFP4_MOE = "MXFP4_MOE" => MXFP4,
    NVFP4 = "NVFP4" => NVFP4,
    Q2_K_S = "Q2_K_S" => Q2_K,
    Q2_K = "Q2_K" => Q2_K,
    IQ3_XS = "IQ3_XS" => IQ3_S,
    Q3_K_S = "Q3_K_S" => Q3_K,
    Q3_K_M = "Q3_K_M" => Q3_K,
    Q3_K_L = "Q3_K_L" => Q3_K,
    Q4_K_S = "Q4_K_S" => Q4_K,
    Q4_K_M = "Q4_K_M" => Q4_K,
    Q5_K_S = "Q5_K_S" => Q5_K,
    Q5_K_M = "Q5_K_M" => Q5_K,
    Q6_K = "Q6_K" => Q6_K,
    TQ1_0 = "TQ1_0" => TQ1_0,
    TQ2_0 = "TQ2_0" => TQ2_0,
    IQ2_XXS = "IQ2_XXS" => IQ2_XXS,
    IQ2_XS = "IQ2_XS" => IQ2_XS,
    IQ2_S = "IQ2_S" => IQ2_XS,
    IQ2_M = "IQ2_M" => IQ2_S,
    IQ3_XXS = "IQ3_XXS" => IQ3_XXS,
    IQ1_S = "IQ1_S" => IQ1_S,
    IQ1_M = "IQ1_M" => IQ1_M,
    IQ4_NL = "IQ4_NL" => IQ4_NL,
    IQ4_XS = "IQ4_XS" => IQ4_XS,
    IQ3_S = "IQ3_S" => IQ3_S,
    IQ3_M = "IQ3_M" => IQ3_S,
}

impl FileType {
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// Whether files of this type are made with an importance matrix. The i-quants require one
    /// (`tensor_requires_imatrix`); for the others we assume none, which is llama-quantize's
    /// default.
    pub(crate) fn has_imatrix(self) -> bool {
        self.name().starts_with("IQ")
    }
}
