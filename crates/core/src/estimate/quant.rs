//! Storage bytes of weights in every contract `weights` format, tensor by tensor.
//!
//! Sources (read for this module):
//! - bitsandbytes `functional.py` `int8_vectorwise_quant` (int8 `CB` + fp32 `SCB` per output
//!   row) and `quantize_4bit` (uint8 packed `(n+1)//2`, fp32 `absmax` per block of 64, a fresh
//!   16-entry fp32 `code` per tensor; with `compress_statistics`: uint8 absmax, fp32 `offset`,
//!   and a nested blockwise state of block 256 whose fp32 absmax is one per 256 blocks and whose
//!   256-entry `code` is the shared `name2qmap["dynamic"]`).
//! - AutoGPTQ `qlinear_cuda.py` `QuantLinear`: `qweight` int32 `[in//32*bits, out]`, `qzeros`
//!   int32 `[ceil(in/g), out//32*bits]`, `scales` fp16 `[ceil(in/g), out]`, `g_idx` int32 `[in]`.
//! - AutoAWQ `awq/modules/linear/gemm.py` `WQLinear_GEMM`: `qweight` int32 `[in, out/8]`,
//!   `qzeros` int32 `[in/g, out/8]`, `scales` fp16 `[in/g, out]` (asserts `in % g == 0`).
//! - llama.cpp `src/llama-quant.cpp` (`tensor_allows_quantization`, `llama_tensor_get_type_impl`,
//!   `tensor_type_fallback`, `llama_ftype_get_default_type`) and `convert_hf_to_gguf.py` (1-D
//!   tensors, norms, biases, routers, position and token-type tables are stored as F32).
//!
//! Which tensors are quantized: for bitsandbytes, GPTQ, AWQ and FP8 only the 2-D (or 3-D expert)
//! weights of the attention, MLP and expert blocks; embeddings, norms, biases, routers and the
//! LM head stay as stored (transformers skips `lm_head` in `llm_int8_skip_modules` /
//! `modules_to_not_convert`; GPTQ/AWQ quantize only the decoder layers). For GGUF, llama.cpp's own
//! rules: every ≥ 2-D `*weight` except norms, routers, position/token-type tables and T5's
//! relative bias, including `token_embd` and `output`.

use crate::error::CoreError;
use crate::ggml::GgmlType;
use crate::inventory::{elements_of, Component, Tensor};
use crate::model::{Head, Mlp, ModelSpec, Naming};
use crate::DType;
use std::fmt;

/// bitsandbytes 4-bit block (Params4bit default `blocksize=64`).
pub const BNB_4BIT_BLOCK: u64 = 64;
/// Block of the nested (double) quantization of the 4-bit absmax.
pub const BNB_NESTED_BLOCK: u64 = 256;
/// The NF4/FP4 code table each 4-bit tensor's quant state holds (16 fp32 values).
pub const BNB_4BIT_CODE_BYTES: u64 = 16 * 4;
/// Default GPTQ/AWQ group size.
pub const DEFAULT_GROUP: u64 = 128;

/// How a model's frozen weights are stored (contract field `weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// As stored (the model dtype).
    None,
    /// bitsandbytes LLM.int8 (`Linear8bitLt`, `has_fp16_weights=False`).
    Int8,
    /// bitsandbytes 4-bit NF4, block 64, fp32 absmax.
    Nf4,
    /// bitsandbytes 4-bit FP4, block 64, fp32 absmax.
    Fp4,
    /// NF4 with double quantization (QLoRA): 8-bit absmax, fp32 scale per 256 blocks.
    Nf4Dq,
    /// 1-byte FP8 weights with an fp32 scale per tensor, or per `block`×`block` tile.
    Fp8 { block: Option<u64> },
    /// GPTQ (AutoGPTQ layout); `group: None` is one group per column (`group_size=-1`).
    Gptq { bits: u32, group: Option<u64> },
    /// AWQ (AutoAWQ GEMM layout).
    Awq { bits: u32, group: Option<u64> },
    /// A GGUF file as llama-quantize writes it.
    Gguf(GgufFormat),
}

/// The GGUF variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufFormat {
    /// Every quantizable tensor in one ggml type (llama-quantize `--pure`).
    Pure(GgmlType),
    /// A llama-quantize file type with its per-tensor mix.
    Mix(FileType),
}

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
            pub fn name(self) -> &'static str { match self { $(FileType::$v => $name,)* } }

            /// `llama_ftype_get_default_type`.
            pub fn default_type(self) -> GgmlType { match self { $(FileType::$v => GgmlType::$def,)* } }
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
    fn has_imatrix(self) -> bool {
        self.name().starts_with("IQ")
    }
}

const FORMS: &str = "none, int8, nf4, fp4, nf4-dq, fp8, fp8:bN, gptq:BITS[:gN], awq:4[:gN], \
                     gguf:TYPE[:pure]";

fn bad(s: &str, why: &str) -> CoreError {
    CoreError::field("weights", format!("'{s}' {why} (valid: {FORMS})"))
}

/// Parses `:gN` (N ≥ 1) or `:g-1` (one group per column).
fn parse_group(s: &str, part: &str) -> Result<Option<u64>, CoreError> {
    let g = part
        .strip_prefix('g')
        .ok_or_else(|| bad(s, "has a group size that is not gN"))?;
    if g == "-1" {
        return Ok(None);
    }
    match g.parse::<u64>() {
        Ok(n) if (1..=1 << 20).contains(&n) => Ok(Some(n)),
        _ => Err(bad(
            s,
            "has a group size that is not a whole number from 1 to 1048576",
        )),
    }
}

impl WeightFormat {
    /// Parses the contract spelling, case-insensitively.
    pub fn parse(s: &str) -> Result<WeightFormat, CoreError> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let parts: Vec<&str> = lower.split(':').collect();
        Ok(match parts.as_slice() {
            ["none"] => WeightFormat::None,
            ["int8"] => WeightFormat::Int8,
            ["nf4"] => WeightFormat::Nf4,
            ["fp4"] => WeightFormat::Fp4,
            ["nf4-dq"] => WeightFormat::Nf4Dq,
            ["fp8"] => WeightFormat::Fp8 { block: None },
            ["fp8", b] => {
                let n = b
                    .strip_prefix('b')
                    .and_then(|n| n.parse::<u64>().ok())
                    .filter(|n| (1..=1 << 20).contains(n))
                    .ok_or_else(|| bad(t, "has an FP8 block that is not bN"))?;
                WeightFormat::Fp8 { block: Some(n) }
            }
            [kind @ ("gptq" | "awq"), bits, rest @ ..] => {
                let bits: u32 = bits
                    .parse()
                    .map_err(|_| bad(t, "needs the bits as a number"))?;
                let group = match rest {
                    [] => Some(DEFAULT_GROUP),
                    [g] => parse_group(t, g)?,
                    _ => return Err(bad(t, "has too many parts")),
                };
                if *kind == "gptq" {
                    if ![2, 3, 4, 8].contains(&bits) {
                        return Err(bad(t, "has GPTQ bits other than 2, 3, 4 or 8"));
                    }
                    WeightFormat::Gptq { bits, group }
                } else {
                    if bits != 4 {
                        return Err(bad(
                            t,
                            "has AWQ bits other than 4 (AutoAWQ supports 4 only)",
                        ));
                    }
                    WeightFormat::Awq { bits, group }
                }
            }
            ["gguf", ty, rest @ ..] => {
                let pure = match rest {
                    [] => false,
                    ["pure"] => true,
                    _ => return Err(bad(t, "has something other than :pure after the GGUF type")),
                };
                let ft = FileType::from_name(ty);
                let gt = GgmlType::from_name(ty);
                WeightFormat::Gguf(match (pure, ft, gt) {
                    (false, Some(f), _) => GgufFormat::Mix(f),
                    (_, _, Some(g)) => GgufFormat::Pure(g),
                    (true, Some(f), None) => GgufFormat::Pure(f.default_type()),
                    (_, None, None) => {
                        return Err(bad(
                            t,
                            "names no llama.cpp type (use a llama-quantize type such as Q4_K_M or \
                             a ggml type such as Q8_0)",
                        ))
                    }
                })
            }
            _ => return Err(bad(t, "is not a weight format")),
        })
    }

    /// Whether the weights are stored as given.
    pub fn is_none(&self) -> bool {
        *self == WeightFormat::None
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = |g: &Option<u64>| match g {
            Some(n) => format!("g{n}"),
            None => "g-1".to_string(),
        };
        match self {
            WeightFormat::None => f.write_str("none"),
            WeightFormat::Int8 => f.write_str("int8"),
            WeightFormat::Nf4 => f.write_str("nf4"),
            WeightFormat::Fp4 => f.write_str("fp4"),
            WeightFormat::Nf4Dq => f.write_str("nf4-dq"),
            WeightFormat::Fp8 { block: None } => f.write_str("fp8"),
            WeightFormat::Fp8 { block: Some(b) } => write!(f, "fp8:b{b}"),
            WeightFormat::Gptq { bits, group: g } => write!(f, "gptq:{bits}:{}", group(g)),
            WeightFormat::Awq { bits, group: g } => write!(f, "awq:{bits}:{}", group(g)),
            WeightFormat::Gguf(GgufFormat::Mix(t)) => write!(f, "gguf:{}", t.name()),
            WeightFormat::Gguf(GgufFormat::Pure(t)) => {
                if FileType::from_name(t.name()).is_some() {
                    write!(f, "gguf:{}:pure", t.name())
                } else {
                    write!(f, "gguf:{}", t.name())
                }
            }
        }
    }
}

/// Contract-level parse (the error names the field `weights`).
pub fn parse(s: &str) -> Result<WeightFormat, CoreError> {
    WeightFormat::parse(s)
}

/// What llama.cpp's per-tensor rules need to know about the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantContext {
    /// Transformer layers (llama.cpp `n_layer`).
    pub n_layers: u32,
    /// Routed experts per MoE layer (0 or 1 for dense models).
    pub n_expert: u64,
    /// Query heads per key/value head in the first layer (`hparams.n_gqa()`).
    pub n_gqa: u64,
    /// llama.cpp's Falcon exceptions.
    pub falcon: bool,
    /// llama.cpp `LLM_TYPE_70B` (80-layer Llama-2/3-70B, Qwen2-72B): attn_v gets more bits.
    pub llm_70b: bool,
    /// 2-D attention/MLP weights are stored `[in, out]` (GPT-2's `Conv1D`).
    pub conv1d: bool,
    /// No separate output matrix: the token embedding gets the output tensor's rules.
    pub tied_embeddings: bool,
}

impl QuantContext {
    /// Reads the context from a model description.
    pub fn from_spec(spec: &ModelSpec) -> Self {
        let n_layers = u32::try_from(spec.num_layers()).unwrap_or(u32::MAX);
        let n_expert = spec
            .all_layers()
            .map(|l| match &l.mlp {
                Mlp::Moe(m) => m.experts,
                Mlp::Dense(_) => 0,
            })
            .max()
            .unwrap_or(0);
        let n_gqa = spec
            .all_layers()
            .next()
            .map(|l| {
                let a = l.attention.kind;
                a.heads() / a.kv_heads().max(1)
            })
            .unwrap_or(1);
        let family = spec.model_type.to_ascii_lowercase();
        QuantContext {
            n_layers,
            n_expert,
            n_gqa,
            falcon: family == "falcon",
            llm_70b: matches!(family.as_str(), "llama" | "qwen2") && n_layers == 80 && n_gqa > 1,
            conv1d: spec.naming == Naming::Gpt2,
            tied_embeddings: !matches!(spec.head, Head::LanguageModel { tied: false, .. }),
        }
    }
}

/// One tensor as the format stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Whether the format quantized it (false: kept as stored, or F32 in GGUF).
    pub quantized: bool,
    /// The ggml type it gets in a GGUF file.
    pub ggml: Option<GgmlType>,
    pub bytes: u64,
}

/// llama.cpp's tensor categories (`tensor_category` in llama-quant.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

fn is_gguf_name(name: &str) -> bool {
    name.starts_with("blk.") || name == "token_embd.weight" || name == "output.weight"
}

/// Maps a tensor to llama.cpp's category from a GGUF name (as llama.cpp matches it) or a
/// Hugging Face name (the module name inside its component).
fn category(t: &Tensor) -> Category {
    use Category::*;
    let name = t.name.as_str();
    if is_gguf_name(name) || name.ends_with("token_embd.weight") {
        return match name {
            "output.weight" => Output,
            n if n.ends_with("token_embd.weight") => TokenEmbd,
            n if n.contains("attn_qkv.weight") => AttnQkv,
            n if n.contains("attn_kv_b.weight") => AttnKvB,
            n if n.contains("attn_v.weight") => AttnV,
            n if n.contains("attn_k.weight") => AttnK,
            n if n.contains("attn_q.weight") => AttnQ,
            n if n.contains("attn_output.weight") => AttnOutput,
            n if n.contains("ffn_up") => FfnUp,
            n if n.contains("ffn_gate") => FfnGate,
            n if n.contains("ffn_down") => FfnDown,
            _ => Other,
        };
    }
    let base = name.strip_suffix(".weight").unwrap_or(name);
    let last = base.rsplit('.').next().unwrap_or(base);
    match t.component {
        Component::Embedding => match last {
            "embed_tokens" | "wte" | "word_embeddings" | "embed_in" | "shared" => TokenEmbd,
            _ => Other,
        },
        Component::Head => {
            if matches!(last, "lm_head" | "embed_out" | "output")
                || base.ends_with("predictions.decoder")
            {
                Output
            } else {
                Other
            }
        }
        Component::Attention => match last {
            "q_proj" | "query" | "q" => AttnQ,
            "k_proj" | "key" | "k" => AttnK,
            "v_proj" | "value" | "v" => AttnV,
            "qkv_proj" | "query_key_value" | "c_attn" | "Wqkv" | "qkv" => AttnQkv,
            "kv_b_proj" => AttnKvB,
            "o_proj" | "out_proj" | "dense" | "c_proj" | "o" => AttnOutput,
            _ => Other,
        },
        Component::Mlp | Component::Experts => match last {
            "gate_proj" | "w1" | "wi_0" => FfnGate,
            "up_proj" | "w3" | "wi_1" | "wi" | "c_fc" | "fc1" | "dense_h_to_4h"
            | "gate_up_proj" => FfnUp,
            "down_proj" | "w2" | "wo" | "c_proj" | "fc2" | "dense_4h_to_h" => FfnDown,
            "dense" if base.ends_with("intermediate.dense") => FfnUp,
            "dense" if base.ends_with("output.dense") => FfnDown,
            _ => Other,
        },
        _ => Other,
    }
}

fn is_position_or_type_table(name: &str) -> bool {
    [
        "wpe.",
        "position_embeddings",
        "embed_positions",
        "token_type_embeddings",
        "position_embd",
        "token_types",
    ]
    .iter()
    .any(|p| name.contains(p))
}

/// Whether bitsandbytes / GPTQ / AWQ / FP8 quantize this tensor: a ≥ 2-D weight of the
/// attention, MLP or expert blocks (T5's relative-position table is an embedding).
fn is_linear_target(t: &Tensor) -> bool {
    matches!(
        t.component,
        Component::Attention | Component::Mlp | Component::Experts
    ) && t.shape.len() >= 2
        && t.name.ends_with("weight")
        && !t.name.contains("relative_attention_bias")
}

/// llama.cpp `tensor_allows_quantization`, applied to GGUF or Hugging Face names.
fn gguf_allows(t: &Tensor) -> bool {
    let n = t.name.as_str();
    t.shape.len() >= 2
        && n.ends_with("weight")
        && t.component != Component::Norm
        && !n.contains("_norm.weight")
        && t.component != Component::Router
        && !n.contains("ffn_gate_inp")
        && !is_position_or_type_table(n)
        && !n.contains("relative_attention_bias")
        && !n.contains("attn_rel_b")
}

/// Whether `format` quantizes `t` (as opposed to keeping it in its stored dtype).
pub fn is_quantized(format: &WeightFormat, t: &Tensor) -> bool {
    match format {
        WeightFormat::None => false,
        WeightFormat::Gguf(_) => gguf_allows(t),
        _ => is_linear_target(t),
    }
}

fn ov(name: &str) -> CoreError {
    CoreError::Overflow {
        what: format!("quantized size of tensor '{name}'"),
    }
}

/// `(matrices, out_features, in_features)` of a weight: `[.., out, in]` for `nn.Linear` (leading
/// dimensions are stacked experts), `[in, out]` for GPT-2's `Conv1D`.
fn matrix_dims(t: &Tensor, ctx: &QuantContext) -> Result<(u64, u64, u64), CoreError> {
    let s = &t.shape;
    let k = s.len();
    if k < 2 {
        return Err(CoreError::InvalidTensor {
            name: t.name.clone(),
            reason: "a quantized weight needs at least two dimensions".into(),
        });
    }
    if ctx.conv1d && k == 2 && matches!(t.component, Component::Attention | Component::Mlp) {
        return Ok((1, s[1], s[0]));
    }
    let batch = elements_of(&s[..k - 2]).ok_or_else(|| ov(&t.name))?;
    Ok((batch, s[k - 2], s[k - 1]))
}

/// The row length llama.cpp checks against the block size (`ne[0]`, the input features).
fn gguf_row(t: &Tensor, ctx: &QuantContext) -> Result<u64, CoreError> {
    Ok(matrix_dims(t, ctx)?.2)
}

/// Bytes of one quantized weight in a non-GGUF format.
fn linear_bytes(format: &WeightFormat, t: &Tensor, ctx: &QuantContext) -> Result<u64, CoreError> {
    let n = elements_of(&t.shape).ok_or_else(|| ov(&t.name))?;
    let (batch, out, inp) = matrix_dims(t, ctx)?;
    let o = || ov(&t.name);
    let add = |parts: &[Option<u64>]| -> Result<u64, CoreError> {
        parts
            .iter()
            .try_fold(0u64, |a, p| a.checked_add((*p)?))
            .ok_or_else(o)
    };
    match *format {
        WeightFormat::Int8 => add(&[
            Some(n),
            batch.checked_mul(out).and_then(|x| x.checked_mul(4)),
        ]),
        WeightFormat::Nf4 | WeightFormat::Fp4 => {
            let blocks = n.div_ceil(BNB_4BIT_BLOCK);
            add(&[
                Some(n / 2 + n % 2),
                blocks.checked_mul(4),
                Some(BNB_4BIT_CODE_BYTES),
            ])
        }
        WeightFormat::Nf4Dq => {
            let blocks = n.div_ceil(BNB_4BIT_BLOCK);
            let nested = blocks.div_ceil(BNB_NESTED_BLOCK);
            // packed + uint8 absmax + fp32 nested absmax + fp32 offset + 16-entry code.
            add(&[
                Some(n / 2 + n % 2),
                Some(blocks),
                nested.checked_mul(4),
                Some(4),
                Some(BNB_4BIT_CODE_BYTES),
            ])
        }
        WeightFormat::Fp8 { block: None } => add(&[Some(n), Some(4)]),
        WeightFormat::Fp8 { block: Some(b) } => {
            let tiles = batch
                .checked_mul(out.div_ceil(b))
                .and_then(|x| x.checked_mul(inp.div_ceil(b)));
            add(&[Some(n), tiles.and_then(|x| x.checked_mul(4))])
        }
        WeightFormat::Gptq { bits, group } => {
            let bits = u64::from(bits);
            let g = group.unwrap_or(inp).max(1);
            let groups = inp.div_ceil(g);
            let qweight = (inp / 32 * bits)
                .checked_mul(out)
                .and_then(|x| x.checked_mul(4));
            let qzeros = groups
                .checked_mul(out / 32 * bits)
                .and_then(|x| x.checked_mul(4));
            let scales = groups.checked_mul(out).and_then(|x| x.checked_mul(2));
            let g_idx = inp.checked_mul(4);
            let one = add(&[qweight, qzeros, scales, g_idx])?;
            one.checked_mul(batch).ok_or_else(o)
        }
        WeightFormat::Awq { bits, group } => {
            let pack = 32 / u64::from(bits.max(1));
            let g = group.unwrap_or(inp).max(1);
            if inp % g != 0 || out % pack != 0 {
                return Err(CoreError::InvalidTensor {
                    name: t.name.clone(),
                    reason: format!(
                        "AWQ needs in_features ({inp}) divisible by the group size {g} and \
                         out_features ({out}) divisible by {pack}"
                    ),
                });
            }
            let qweight = inp.checked_mul(out / pack).and_then(|x| x.checked_mul(4));
            let qzeros = (inp / g)
                .checked_mul(out / pack)
                .and_then(|x| x.checked_mul(4));
            let scales = (inp / g).checked_mul(out).and_then(|x| x.checked_mul(2));
            let one = add(&[qweight, qzeros, scales])?;
            one.checked_mul(batch).ok_or_else(o)
        }
        WeightFormat::None | WeightFormat::Gguf(_) => Ok(t.bytes),
    }
}

/// The per-category counters llama-quantize keeps while it walks the tensors.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    i_attention_wv: i64,
    n_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

fn is_ggml_quantized(t: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(t, F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64)
}

/// What llama-quantize looks at in one tensor.
#[derive(Debug, Clone, Copy)]
struct TensorFacts {
    cat: Category,
    /// `ne[0]`: the input features.
    row: u64,
    layer: Option<u32>,
    /// Routed experts stacked in one tensor (`ne[2] > 1`; per-expert HF tensors count too).
    stacked_expert: bool,
}

/// `llama_tensor_get_type_impl` for a file type (counters are advanced by the caller).
fn mix_type(
    ft: FileType,
    ctx: &QuantContext,
    c: &Counters,
    tied: bool,
    x: &TensorFacts,
) -> GgmlType {
    let TensorFacts {
        cat,
        row,
        layer,
        stacked_expert,
    } = *x;
    use Category as C;
    use FileType as F;
    use GgmlType as G;
    let mut t = ft.default_type();
    let n_layer = i64::from(ctx.n_layers);
    let gqa = ctx.n_gqa;
    let n_expert = ctx.n_expert.max(1);
    let imatrix = ft.has_imatrix();
    let more_bits = |i: i64, n: i64| i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    // llama.cpp reads the layer from the name for MoE models, else uses its counter.
    let layer_of = |counter: i64| match layer {
        Some(l) if n_expert > 1 => i64::from(l),
        _ => counter,
    };
    let is = |set: &[F]| set.contains(&ft);
    if cat == C::Output || (tied && cat == C::TokenEmbd) {
        if ft == F::MXFP4_MOE || ctx.falcon || !row.is_multiple_of(t.block_size()) {
            t = G::Q8_0;
        } else if is(&[
            F::IQ2_XXS,
            F::IQ2_XS,
            F::IQ3_XXS,
            F::IQ1_S,
            F::IQ2_S,
            F::IQ2_M,
            F::IQ1_M,
        ]) {
            t = G::Q5_K;
        } else if t != G::Q8_0 {
            t = G::Q6_K;
        }
    } else if ft == F::MXFP4_MOE {
        t = if stacked_expert { G::MXFP4 } else { G::Q8_0 };
    } else if cat == C::TokenEmbd {
        if is(&[F::IQ2_XXS, F::IQ2_XS, F::IQ1_S, F::IQ1_M]) {
            t = G::Q2_K;
        } else if is(&[F::IQ2_S, F::IQ2_M, F::IQ3_XXS]) {
            t = G::IQ3_S;
        } else if is(&[F::TQ1_0, F::TQ2_0, F::Q2_0]) {
            t = G::Q4_K;
        }
    } else if is(&[
        F::IQ2_XXS,
        F::IQ2_XS,
        F::IQ1_S,
        F::IQ2_S,
        F::IQ2_M,
        F::IQ1_M,
    ]) {
        let s_or_m = is(&[F::IQ2_S, F::IQ2_M]);
        if cat.is_attn_v() {
            t = if gqa >= 4 || ctx.n_expert >= 4 {
                G::Q4_K
            } else if s_or_m {
                G::IQ3_S
            } else {
                G::Q2_K
            };
        } else if ctx.n_expert == 8 && cat == C::AttnK {
            t = G::Q4_K;
        } else if cat == C::FfnDown {
            if c.i_ffn_down < n_layer / 8 {
                t = if s_or_m { G::IQ3_S } else { G::Q2_K };
            }
        } else if cat == C::AttnOutput {
            if ctx.n_expert == 8 {
                t = G::Q5_K;
            } else if is(&[F::IQ1_S, F::IQ1_M]) {
                t = G::IQ2_XXS;
            } else if s_or_m {
                t = G::IQ3_S;
            }
        }
    } else if cat.is_attn_v() {
        let (i, n) = (c.i_attention_wv, c.n_attention_wv);
        if ft == F::Q2_K {
            t = if gqa >= 4 { G::Q4_K } else { G::Q3_K };
        } else if ft == F::Q2_K_S && gqa >= 4 {
            t = G::Q4_K;
        } else if ft == F::IQ3_XXS {
            t = if gqa >= 4 {
                G::Q4_K
            } else if !imatrix {
                G::IQ3_S
            } else {
                G::IQ3_XXS
            };
        } else if (is(&[F::IQ3_XS, F::IQ3_S]) && gqa >= 4) || ft == F::IQ3_M {
            t = G::Q4_K;
        } else if ft == F::Q3_K_M {
            t = if i < 2 { G::Q5_K } else { G::Q4_K };
        } else if ft == F::Q3_K_L || (is(&[F::IQ4_NL, F::IQ4_XS]) && gqa >= 4) {
            t = G::Q5_K;
        } else if is(&[F::Q4_K_M, F::Q5_K_M]) && more_bits(i, n) {
            t = G::Q6_K;
        } else if ft == F::Q4_K_S && i < 4 {
            t = G::Q5_K;
        }
        if ctx.llm_70b && (t == G::Q3_K || t == G::Q4_K) {
            t = G::Q5_K;
        }
        if ctx.n_expert == 8 {
            t = G::Q8_0;
        }
    } else if cat == C::AttnK {
        if ctx.n_expert == 8 {
            t = G::Q8_0;
        } else if ft == F::IQ3_XS {
            t = G::IQ3_XXS;
        } else if ft == F::IQ3_XXS {
            t = G::IQ2_S;
        }
    } else if cat == C::AttnQ {
        if ft == F::IQ3_XS {
            t = G::IQ3_XXS;
        } else if ft == F::IQ3_XXS {
            t = G::IQ2_S;
        }
    } else if cat == C::FfnDown {
        let (i, n) = (layer_of(c.i_ffn_down), n_layer);
        if ft == F::Q2_K {
            t = G::Q3_K;
        } else if ft == F::Q2_K_S {
            if i < n / 8 {
                t = G::Q4_K;
            }
        } else if ft == F::IQ3_XXS && !imatrix {
            t = if i < n / 8 { G::Q4_K } else { G::Q3_K };
        } else if ft == F::Q3_K_M {
            t = if i < n / 16 {
                G::Q5_K
            } else if !ctx.falcon || more_bits(i, n) {
                G::Q4_K
            } else {
                G::Q3_K
            };
        } else if ft == F::IQ3_M && (i < n / 8 || (ctx.n_expert == 8 && more_bits(i, n))) {
            t = G::Q4_K;
        } else if ft == F::Q3_K_L {
            t = if ctx.falcon { G::Q4_K } else { G::Q5_K };
        } else if ft == F::Q4_K_M {
            if ctx.falcon {
                t = if i < n / 16 {
                    G::Q6_K
                } else if more_bits(i, n) {
                    G::Q5_K
                } else {
                    G::Q4_K
                };
            } else if more_bits(i, n) {
                t = G::Q6_K;
            }
        } else if i < n / 8 && is(&[F::IQ4_NL, F::IQ4_XS]) && !imatrix {
            t = G::Q5_K;
        } else if ft == F::Q5_K_M && more_bits(i, n) {
            t = G::Q6_K;
        } else if ft == F::Q4_K_S && !ctx.falcon && i < n / 8 {
            t = G::Q5_K;
        } else if is(&[F::Q4_0, F::Q5_0]) && imatrix && i < n / 8 {
            t = if ft == F::Q4_0 { G::Q4_1 } else { G::Q5_1 };
        }
    } else if cat == C::AttnOutput {
        if !ctx.falcon {
            if ctx.n_expert == 8 {
                if is(&[
                    F::Q2_K,
                    F::IQ3_XS,
                    F::IQ3_XXS,
                    F::Q3_K_S,
                    F::Q3_K_M,
                    F::IQ4_NL,
                    F::Q4_K_S,
                    F::Q4_K_M,
                    F::IQ3_S,
                    F::IQ3_M,
                    F::IQ4_XS,
                ]) {
                    t = G::Q5_K;
                }
            } else if ft == F::Q2_K {
                t = G::Q3_K;
            } else if ft == F::IQ3_XXS {
                t = G::IQ3_S;
            } else if is(&[F::Q3_K_M, F::IQ3_M]) {
                t = G::Q4_K;
            } else if ft == F::Q3_K_L {
                t = G::Q5_K;
            }
        } else if ft == F::Q3_K_L {
            t = G::Q4_K;
        }
    } else if cat == C::AttnQkv {
        if is(&[F::Q3_K_M, F::Q3_K_L, F::IQ3_M]) {
            t = G::Q4_K;
        } else if ft == F::Q4_K_M {
            t = G::Q5_K;
        } else if ft == F::Q5_K_M {
            t = G::Q6_K;
        }
    } else if cat == C::FfnGate || cat == C::FfnUp {
        let counter = if cat == C::FfnGate {
            c.i_ffn_gate
        } else {
            c.i_ffn_up
        };
        let i = layer_of(counter);
        if ft == F::IQ3_XS && i >= n_layer / 8 && i < 7 * n_layer / 8 {
            t = G::IQ3_XXS;
        }
    }
    t
}

/// `tensor_type_fallback`: the type a row length that is not a whole number of blocks gets.
fn fallback(t: &Tensor, ty: GgmlType, row: u64) -> Result<GgmlType, CoreError> {
    use GgmlType as G;
    if row.is_multiple_of(ty.block_size()) {
        return Ok(ty);
    }
    let next = match ty {
        G::IQ1_S
        | G::IQ1_M
        | G::IQ2_XXS
        | G::IQ2_XS
        | G::IQ2_S
        | G::IQ3_XXS
        | G::IQ3_S
        | G::IQ4_XS => G::IQ4_NL,
        G::Q2_0 | G::Q2_K | G::Q3_K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        other => {
            return Err(CoreError::InvalidTensor {
                name: t.name.clone(),
                reason: format!(
                    "rows of {row} are not whole {} blocks and llama-quantize has no fallback",
                    other.name()
                ),
            })
        }
    };
    Ok(if row.is_multiple_of(next.block_size()) {
        next
    } else {
        G::F16
    })
}

/// The GGUF storage of one tensor, given llama-quantize's counters at that tensor.
fn gguf_stored(
    g: &GgufFormat,
    t: &Tensor,
    ctx: &QuantContext,
    c: &Counters,
    tied: bool,
) -> Result<Stored, CoreError> {
    let n = elements_of(&t.shape).ok_or_else(|| ov(&t.name))?;
    if !gguf_allows(t) {
        // convert_hf_to_gguf.py: 1-D tensors, norms, biases, routers and position/token-type
        // tables are F32; anything else unquantized keeps its stored type.
        let f32_kept = t.shape.len() <= 1
            || t.name.ends_with("_norm.weight")
            || !t.name.ends_with(".weight")
            || t.component == Component::Norm
            || t.component == Component::Router
            || is_position_or_type_table(&t.name);
        return Ok(if f32_kept {
            Stored {
                quantized: false,
                ggml: Some(GgmlType::F32),
                bytes: n.checked_mul(4).ok_or_else(|| ov(&t.name))?,
            }
        } else {
            Stored {
                quantized: false,
                ggml: None,
                bytes: t.bytes,
            }
        });
    }
    let row = gguf_row(t, ctx)?;
    let (default, pure, ft) = match *g {
        GgufFormat::Pure(ty) => (ty, true, None),
        GgufFormat::Mix(f) => (f.default_type(), false, Some(f)),
    };
    let mut ty = default;
    if is_ggml_quantized(default) {
        if let (false, Some(f)) = (pure, ft) {
            let stacked =
                t.component == Component::Experts || (t.shape.len() >= 3 && t.shape[0] > 1);
            let facts = TensorFacts {
                cat: category(t),
                row,
                layer: t.layer,
                stacked_expert: stacked,
            };
            ty = mix_type(f, ctx, c, tied, &facts);
        }
        ty = fallback(t, ty, row)?;
    }
    let bytes = ty.bytes_for(n).ok_or_else(|| CoreError::InvalidTensor {
        name: t.name.clone(),
        reason: format!("{n} elements do not fill whole {} blocks", ty.name()),
    })?;
    Ok(Stored {
        quantized: true,
        ggml: Some(ty),
        bytes,
    })
}

/// Bytes of one tensor in `format`. For GGUF mixes the llama-quantize counters are taken from
/// the tensor's layer index, which is exact for models with one attn_v-like and one ffn_down
/// tensor per layer; use [`plan`] over the whole inventory for the exact walk.
pub fn tensor_bytes(
    format: &WeightFormat,
    tensor: &Tensor,
    ctx: &QuantContext,
) -> Result<u64, CoreError> {
    Ok(stored_one(format, tensor, ctx)?.bytes)
}

fn stored_one(format: &WeightFormat, t: &Tensor, ctx: &QuantContext) -> Result<Stored, CoreError> {
    match format {
        WeightFormat::Gguf(g) => {
            let l = i64::from(t.layer.unwrap_or(0));
            let c = Counters {
                i_attention_wv: l,
                n_attention_wv: i64::from(ctx.n_layers),
                i_ffn_down: l,
                i_ffn_gate: l,
                i_ffn_up: l,
            };
            gguf_stored(g, t, ctx, &c, ctx.tied_embeddings)
        }
        _ if is_quantized(format, t) => Ok(Stored {
            quantized: true,
            ggml: None,
            bytes: linear_bytes(format, t, ctx)?,
        }),
        _ => Ok(Stored {
            quantized: false,
            ggml: None,
            bytes: t.bytes,
        }),
    }
}

/// How `format` stores every tensor of a model, in the order given. For GGUF this walks the
/// tensors as llama-quantize does (tensors outside the layers first, then layer by layer),
/// counting attn_v-like and FFN tensors, and treats the token embedding as the output matrix
/// when there is no separate output tensor.
pub fn plan(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
) -> Result<Vec<Stored>, CoreError> {
    let WeightFormat::Gguf(g) = format else {
        return tensors.iter().map(|t| stored_one(format, t, ctx)).collect();
    };
    let cats: Vec<Category> = tensors.iter().map(category).collect();
    let tied = !cats.contains(&Category::Output);
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].layer.map_or(-1, i64::from));
    let mut c = Counters {
        n_attention_wv: cats.iter().filter(|c| c.is_attn_v()).count() as i64,
        ..Counters::default()
    };
    let mut out = vec![
        Stored {
            quantized: false,
            ggml: None,
            bytes: 0
        };
        tensors.len()
    ];
    for i in order {
        let t = &tensors[i];
        out[i] = gguf_stored(g, t, ctx, &c, tied)?;
        if gguf_allows(t) {
            match cats[i] {
                cat if cat.is_attn_v() => c.i_attention_wv += 1,
                Category::FfnDown => c.i_ffn_down += 1,
                Category::FfnGate => c.i_ffn_gate += 1,
                Category::FfnUp => c.i_ffn_up += 1,
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Total bytes of all tensors in `format` (see [`plan`]).
pub fn total_bytes(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
) -> Result<u64, CoreError> {
    plan(format, tensors, ctx)?
        .iter()
        .try_fold(0u64, |a, s| a.checked_add(s.bytes))
        .ok_or_else(|| CoreError::Overflow {
            what: "quantized model size".into(),
        })
}

/// Bits per parameter as a fraction `(numerator, denominator)` when every parameter is
/// quantized and no shapes are known. Per-row and per-tensor extras that need shapes are left
/// out (int8's row scales, FP8's tensor scale, GPTQ's `g_idx`, bnb's 64-byte code tables);
/// a GGUF mix counts its default type.
pub fn bits_per_param(format: &WeightFormat, model_dtype: DType) -> (u64, u64) {
    match *format {
        WeightFormat::None => match model_dtype {
            DType::Ggml(t) => (t.type_size() * 8, t.block_size()),
            d => (d.bits().unwrap_or(16), 1),
        },
        WeightFormat::Int8 => (8, 1),
        // 4 bits + a 32-bit absmax per 64.
        WeightFormat::Nf4 | WeightFormat::Fp4 => (4 * 64 + 32, 64),
        // QLoRA: 4 + 8/64 + 32/(64·256) = 4.126953125.
        WeightFormat::Nf4Dq => (4 * 64 * 256 + 8 * 256 + 32, 64 * 256),
        WeightFormat::Fp8 { block: None } => (8, 1),
        WeightFormat::Fp8 { block: Some(b) } => (8 * b * b + 32, b * b),
        // bits + (fp16 scale + packed zero) per group.
        WeightFormat::Gptq { bits, group } | WeightFormat::Awq { bits, group } => {
            let b = u64::from(bits);
            match group {
                Some(g) => (b * g + 16 + b, g),
                None => (b, 1),
            }
        }
        WeightFormat::Gguf(GgufFormat::Pure(t)) => (t.type_size() * 8, t.block_size()),
        WeightFormat::Gguf(GgufFormat::Mix(f)) => {
            let t = f.default_type();
            (t.type_size() * 8, t.block_size())
        }
    }
}

/// Bytes of `params` parameters all stored in `format` (rounded up to a whole byte): for a
/// model known only by its parameter count.
pub fn bytes_for_params(
    format: &WeightFormat,
    params: u64,
    model_dtype: DType,
) -> Result<u64, CoreError> {
    let (num, den) = bits_per_param(format, model_dtype);
    let bits = u128::from(params) * u128::from(num);
    let bytes = bits.div_ceil(u128::from(den) * 8);
    u64::try_from(bytes).map_err(|_| CoreError::Overflow {
        what: "quantized parameter bytes".into(),
    })
}

/// The temporary a quantized layer materialises while it runs: the largest quantized weight
/// dequantized to the compute dtype (`compute_bytes` per element).
///
/// - bitsandbytes 4-bit: `MatMul4Bit` dequantizes the whole weight (`dequantize_4bit`) in
///   forward and again in backward; with double quantization the fp32 absmax is dequantized
///   first. (Single-token decoding takes the gemv kernel and dequantizes nothing.)
/// - int8: the forward is an int8 matmul (outlier columns only are dequantized); the backward
///   dequantizes `CB` to the compute dtype (`backward = true`).
/// - GPTQ/AWQ: fp16 dequantization for prefill-sized batches (AutoAWQ from 1024 tokens,
///   AutoGPTQ's torch path); an approximation for the kernels that dequantize in tiles.
/// - FP8 (scaled matmuls), GGUF (llama.cpp's own compute buffer) and none: nothing here.
pub fn dequant_scratch_bytes(
    format: &WeightFormat,
    tensors: &[Tensor],
    ctx: &QuantContext,
    compute_bytes: u64,
    backward: bool,
) -> Result<u64, CoreError> {
    let per_elem_extra_dq = matches!(format, WeightFormat::Nf4Dq);
    let applies = match format {
        WeightFormat::Nf4 | WeightFormat::Fp4 | WeightFormat::Nf4Dq => true,
        WeightFormat::Int8 => backward,
        WeightFormat::Gptq { .. } | WeightFormat::Awq { .. } => true,
        WeightFormat::None | WeightFormat::Fp8 { .. } | WeightFormat::Gguf(_) => false,
    };
    if !applies {
        return Ok(0);
    }
    let mut peak = 0u64;
    for t in tensors.iter().filter(|t| is_linear_target(t)) {
        let (_, out, inp) = matrix_dims(t, ctx)?;
        let n = out.checked_mul(inp).ok_or_else(|| ov(&t.name))?;
        let mut b = n.checked_mul(compute_bytes).ok_or_else(|| ov(&t.name))?;
        if per_elem_extra_dq {
            b = b
                .checked_add(n.div_ceil(BNB_4BIT_BLOCK) * 4)
                .ok_or_else(|| ov(&t.name))?;
        }
        peak = peak.max(b);
    }
    Ok(peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, shape: &[u64], layer: Option<u32>, c: Component) -> Tensor {
        Tensor::new(name.into(), shape.to_vec(), DType::BF16, layer, c).unwrap()
    }

    fn sq() -> Tensor {
        t(
            "model.layers.0.self_attn.q_proj.weight",
            &[4096, 4096],
            Some(0),
            Component::Attention,
        )
    }

    fn ctx() -> QuantContext {
        QuantContext {
            n_layers: 32,
            n_gqa: 1,
            ..QuantContext::default()
        }
    }

    fn bytes(f: &str, x: &Tensor) -> u64 {
        tensor_bytes(&WeightFormat::parse(f).unwrap(), x, &ctx()).unwrap()
    }

    #[test]
    fn parses_every_form() {
        use WeightFormat as W;
        assert_eq!(W::parse("none").unwrap(), W::None);
        assert_eq!(W::parse(" NF4-DQ ").unwrap(), W::Nf4Dq);
        assert_eq!(W::parse("fp8:b128").unwrap(), W::Fp8 { block: Some(128) });
        assert_eq!(
            W::parse("gptq:4").unwrap(),
            W::Gptq {
                bits: 4,
                group: Some(128)
            }
        );
        assert_eq!(
            W::parse("gptq:3:g-1").unwrap(),
            W::Gptq {
                bits: 3,
                group: None
            }
        );
        assert_eq!(
            W::parse("awq:4:g64").unwrap(),
            W::Awq {
                bits: 4,
                group: Some(64)
            }
        );
        assert_eq!(
            W::parse("gguf:q4_k_m").unwrap(),
            W::Gguf(GgufFormat::Mix(FileType::Q4_K_M))
        );
        // A file type name gets the file's mix; a ggml-only name or :pure is uniform.
        assert_eq!(
            W::parse("gguf:Q8_0").unwrap(),
            W::Gguf(GgufFormat::Mix(FileType::Q8_0))
        );
        assert_eq!(
            W::parse("gguf:Q4_K").unwrap(),
            W::Gguf(GgufFormat::Pure(GgmlType::Q4_K))
        );
        assert_eq!(
            W::parse("gguf:Q4_0:pure").unwrap(),
            W::Gguf(GgufFormat::Pure(GgmlType::Q4_0))
        );
        for s in [
            "none",
            "int8",
            "nf4-dq",
            "fp8:b128",
            "gptq:8:g32",
            "awq:4:g-1",
            "gguf:IQ2_M",
            "gguf:Q6_K:pure",
            "gguf:Q8_K",
        ] {
            let f = W::parse(s).unwrap();
            assert_eq!(W::parse(&f.to_string()).unwrap(), f, "{s}");
        }
    }

    #[test]
    fn bad_forms_name_the_field() {
        for s in [
            "",
            "nf5",
            "gptq",
            "gptq:5",
            "gptq:4:64",
            "gptq:4:g0",
            "awq:8",
            "fp8:x",
            "gguf",
            "gguf:Q4_K_X",
            "gguf:Q4_K:fast",
            "int8:g64",
        ] {
            let e = parse(s).unwrap_err().to_string();
            assert!(e.starts_with("weights: "), "{s}: {e}");
            assert!(e.contains("gguf:TYPE"), "{s}: {e}");
        }
    }

    #[test]
    fn square_weight_in_each_format() {
        let w = sq();
        let n = 16_777_216u64;
        assert_eq!(bytes("none", &w), 2 * n);
        // int8 + one fp32 SCB per output row.
        assert_eq!(bytes("int8", &w), n + 4 * 4096);
        // n/2 packed + fp32 absmax per 64 + 16-entry fp32 code.
        assert_eq!(bytes("nf4", &w), 8_388_608 + 4 * 262_144 + 64);
        assert_eq!(bytes("fp4", &w), 8_388_608 + 4 * 262_144 + 64);
        // n/2 + uint8 absmax per 64 + fp32 per 256 absmax blocks (1024) + offset + code.
        assert_eq!(bytes("nf4-dq", &w), 8_388_608 + 262_144 + 4 * 1024 + 4 + 64);
        assert_eq!(bytes("fp8", &w), n + 4);
        // 32 x 32 tiles of 128 x 128, fp32 scale each.
        assert_eq!(bytes("fp8:b128", &w), n + 4 * 32 * 32);
        // qweight [512, 4096] i32 + qzeros [32, 512] i32 + scales [32, 4096] f16 + g_idx [4096].
        assert_eq!(bytes("gptq:4", &w), 8_388_608 + 65_536 + 262_144 + 16_384);
        // g64: 64 groups.
        assert_eq!(
            bytes("gptq:4:g64", &w),
            8_388_608 + 64 * 512 * 4 + 64 * 4096 * 2 + 16_384
        );
        // qweight [4096, 512] i32 + qzeros [32, 512] i32 + scales [32, 4096] f16.
        assert_eq!(bytes("awq:4", &w), 8_388_608 + 65_536 + 262_144);
        // ggml blocks: Q4_K 144 B / 256, Q8_0 34 B / 32.
        assert_eq!(bytes("gguf:Q4_K", &w), 65_536 * 144);
        assert_eq!(bytes("gguf:Q8_0", &w), 524_288 * 34);
    }

    #[test]
    fn only_linear_weights_are_quantized() {
        let emb = t(
            "model.embed_tokens.weight",
            &[32000, 4096],
            None,
            Component::Embedding,
        );
        let norm = t("model.norm.weight", &[4096], None, Component::Norm);
        let head = t("lm_head.weight", &[32000, 4096], None, Component::Head);
        let bias = t(
            "model.layers.0.self_attn.q_proj.bias",
            &[4096],
            Some(0),
            Component::Attention,
        );
        let router = t(
            "model.layers.0.block_sparse_moe.gate.weight",
            &[8, 4096],
            Some(0),
            Component::Router,
        );
        for f in ["int8", "nf4", "nf4-dq", "gptq:4", "awq:4", "fp8"] {
            let wf = parse(f).unwrap();
            for x in [&emb, &norm, &head, &bias, &router] {
                assert!(!is_quantized(&wf, x), "{f} {}", x.name);
                assert_eq!(tensor_bytes(&wf, x, &ctx()).unwrap(), x.bytes);
            }
            assert!(is_quantized(&wf, &sq()));
        }
        // GGUF quantizes embeddings and the head, keeps 1-D and routers in F32.
        let g = parse("gguf:Q8_0").unwrap();
        assert!(is_quantized(&g, &emb) && is_quantized(&g, &head));
        assert_eq!(tensor_bytes(&g, &norm, &ctx()).unwrap(), 4 * 4096);
        assert_eq!(tensor_bytes(&g, &router, &ctx()).unwrap(), 4 * 8 * 4096);
        assert_eq!(tensor_bytes(&g, &bias, &ctx()).unwrap(), 4 * 4096);
    }

    #[test]
    fn gpt2_conv1d_uses_out_rows() {
        let c = QuantContext {
            conv1d: true,
            ..ctx()
        };
        // Conv1D [in=768, out=2304]: 2304 SCB rows.
        let w = t(
            "transformer.h.0.attn.c_attn.weight",
            &[768, 2304],
            Some(0),
            Component::Attention,
        );
        let int8 = tensor_bytes(&WeightFormat::Int8, &w, &c).unwrap();
        assert_eq!(int8, 768 * 2304 + 4 * 2304);
        // GPTQ: qweight [768/32*4=96, 2304] + qzeros [6, 288] + scales [6, 2304] + g_idx [768].
        let g = tensor_bytes(&parse("gptq:4").unwrap(), &w, &c).unwrap();
        assert_eq!(g, 96 * 2304 * 4 + 6 * 288 * 4 + 6 * 2304 * 2 + 768 * 4);
    }

    #[test]
    fn awq_misaligned_is_an_error() {
        let w = t(
            "model.layers.0.mlp.down_proj.weight",
            &[4096, 11000],
            Some(0),
            Component::Mlp,
        );
        let e = tensor_bytes(&parse("awq:4").unwrap(), &w, &ctx()).unwrap_err();
        assert!(e.to_string().contains("AWQ"), "{e}");
    }

    #[test]
    fn qlora_65b_bare_count() {
        // Dev case qlora-nf4-double-quant-65b: 65e9 x 4.126953125 / 8 = 33,531,494,140.625.
        let b = bytes_for_params(&WeightFormat::Nf4Dq, 65_000_000_000, DType::BF16).unwrap();
        assert_eq!(b, 33_531_494_141);
        // nf4: 4.5 bits; int8: 8 bits; gptq:4:g128: 4 + 20/128 bits.
        assert_eq!(
            bytes_for_params(&WeightFormat::Nf4, 1000, DType::BF16).unwrap(),
            563
        );
        assert_eq!(
            bytes_for_params(&WeightFormat::Int8, 1000, DType::BF16).unwrap(),
            1000
        );
        assert_eq!(
            bytes_for_params(&parse("gptq:4").unwrap(), 128_000, DType::BF16).unwrap(),
            64_000 + 2_500
        );
        assert_eq!(
            bytes_for_params(&WeightFormat::None, 10, DType::F32).unwrap(),
            40
        );
        // Q4_K: 4.5 bits per weight.
        assert_eq!(
            bytes_for_params(&parse("gguf:Q4_K_M").unwrap(), 256, DType::BF16).unwrap(),
            144
        );
        assert!(bytes_for_params(&WeightFormat::None, u64::MAX, DType::F64).is_err());
    }

    #[test]
    fn dequant_scratch() {
        let ts = vec![
            sq(),
            t(
                "model.layers.0.mlp.up_proj.weight",
                &[11008, 4096],
                Some(0),
                Component::Mlp,
            ),
            t("lm_head.weight", &[32000, 4096], None, Component::Head),
        ];
        let n = 11008 * 4096u64;
        let c = ctx();
        let nf4 = dequant_scratch_bytes(&WeightFormat::Nf4, &ts, &c, 2, false).unwrap();
        assert_eq!(nf4, 2 * n);
        let dq = dequant_scratch_bytes(&WeightFormat::Nf4Dq, &ts, &c, 2, false).unwrap();
        assert_eq!(dq, 2 * n + 4 * n / 64);
        assert_eq!(
            dequant_scratch_bytes(&WeightFormat::Int8, &ts, &c, 2, false).unwrap(),
            0
        );
        assert_eq!(
            dequant_scratch_bytes(&WeightFormat::Int8, &ts, &c, 2, true).unwrap(),
            2 * n
        );
        assert_eq!(
            dequant_scratch_bytes(&WeightFormat::None, &ts, &c, 2, true).unwrap(),
            0
        );
    }

    /// Llama-2-7B as llama.cpp names it: 32 layers, MHA, vocab 32000, untied output.
    fn llama2_7b_gguf() -> Vec<Tensor> {
        let mut v = vec![
            t(
                "token_embd.weight",
                &[32000, 4096],
                None,
                Component::Embedding,
            ),
            t("output_norm.weight", &[4096], None, Component::Norm),
            t("output.weight", &[32000, 4096], None, Component::Head),
        ];
        for l in 0..32u32 {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            let at = Some(l);
            v.push(t(&p("attn_norm"), &[4096], at, Component::Norm));
            v.push(t(&p("attn_q"), &[4096, 4096], at, Component::Attention));
            v.push(t(&p("attn_k"), &[4096, 4096], at, Component::Attention));
            v.push(t(&p("attn_v"), &[4096, 4096], at, Component::Attention));
            v.push(t(
                &p("attn_output"),
                &[4096, 4096],
                at,
                Component::Attention,
            ));
            v.push(t(&p("ffn_norm"), &[4096], at, Component::Norm));
            v.push(t(&p("ffn_gate"), &[11008, 4096], at, Component::Mlp));
            v.push(t(&p("ffn_up"), &[11008, 4096], at, Component::Mlp));
            v.push(t(&p("ffn_down"), &[4096, 11008], at, Component::Mlp));
        }
        v
    }

    #[test]
    fn q4_k_m_mix_of_llama2_7b() {
        let ts = llama2_7b_gguf();
        let c = ctx();
        let plan = plan(&parse("gguf:Q4_K_M").unwrap(), &ts, &c).unwrap();
        let count = |ty: GgmlType| plan.iter().filter(|s| s.ggml == Some(ty)).count();
        // llama.cpp's loader prints for llama-2-7b Q4_K_M: f32 65, q4_K 193, q6_K 33.
        assert_eq!(
            (
                count(GgmlType::F32),
                count(GgmlType::Q4_K),
                count(GgmlType::Q6_K)
            ),
            (65, 193, 33)
        );
        // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2 -> layer 6 yes, 5 no.
        let ty = |name: &str| {
            let i = ts.iter().position(|x| x.name == name).unwrap();
            plan[i].ggml.unwrap()
        };
        assert_eq!(ty("blk.6.attn_v.weight"), GgmlType::Q6_K);
        assert_eq!(ty("blk.5.ffn_down.weight"), GgmlType::Q4_K);
        assert_eq!(ty("blk.31.ffn_down.weight"), GgmlType::Q6_K);
        assert_eq!(ty("output.weight"), GgmlType::Q6_K);
        assert_eq!(ty("token_embd.weight"), GgmlType::Q4_K);
        // Bytes by hand: token_embd Q4_K 512,000 blocks * 144 = 73,728,000; output Q6_K
        // 512,000 * 210 = 107,520,000; output_norm 16,384. A Q4_K layer: q, k, v, o
        // 4 * 9,437,184 + gate, up, down 3 * 25,362,432 + norms 32,768 = 113,868,800; the 16
        // layers with Q6_K attn_v and ffn_down add 4,325,376 + 11,624,448 = 15,949,824 each.
        let expected = 73_728_000 + 107_520_000 + 16_384 + 32 * 113_868_800 + 16 * 15_949_824;
        assert_eq!(
            total_bytes(&parse("gguf:Q4_K_M").unwrap(), &ts, &c).unwrap(),
            expected
        );
    }

    #[test]
    fn mixes_and_fallbacks() {
        let ts = llama2_7b_gguf();
        let c = ctx();
        let count = |f: &str, ty: GgmlType| {
            plan(&parse(f).unwrap(), &ts, &c)
                .unwrap()
                .iter()
                .filter(|s| s.ggml == Some(ty))
                .count()
        };
        // Q4_K_S: attn_v of the first 4 layers and ffn_down of the first 32/8 = 4 layers Q5_K.
        assert_eq!(count("gguf:Q4_K_S", GgmlType::Q5_K), 8);
        assert_eq!(count("gguf:Q4_K_S", GgmlType::Q6_K), 1); // output
                                                             // Q3_K_M: attn_v Q5_K for the first 2, Q4_K after; ffn_down Q5_K below 32/16 = 2, else
                                                             // Q4_K; attn_output Q4_K.
        assert_eq!(count("gguf:Q3_K_M", GgmlType::Q5_K), 4);
        assert_eq!(count("gguf:Q3_K_M", GgmlType::Q4_K), 30 + 30 + 32);
        // Q2_K without GQA: attn_v, ffn_down, attn_output Q3_K; q, k, gate, up and the
        // embedding Q2_K.
        assert_eq!(count("gguf:Q2_K", GgmlType::Q3_K), 96);
        assert_eq!(count("gguf:Q2_K", GgmlType::Q2_K), 4 * 32 + 1);
        // Pure Q4_0 keeps the output in Q4_0; the Q4_0 file type gives it Q6_K.
        assert_eq!(count("gguf:Q4_0:pure", GgmlType::Q4_0), 226);
        assert_eq!(count("gguf:Q4_0", GgmlType::Q6_K), 1);
        // 70B-class models bump Q4_K attn_v to Q5_K.
        let big = QuantContext { llm_70b: true, ..c };
        let n = plan(&parse("gguf:Q4_K_S").unwrap(), &ts, &big)
            .unwrap()
            .iter()
            .filter(|s| s.ggml == Some(GgmlType::Q5_K))
            .count();
        assert_eq!(n, 32 + 4);
        // A row of 11040 = 43 * 256 + 32 is not whole 256-blocks: Q4_K falls back to Q5_0
        // (block 32, 22 B).
        let odd = t(
            "blk.0.ffn_down.weight",
            &[4096, 11040],
            Some(0),
            Component::Mlp,
        );
        assert_eq!(
            tensor_bytes(&parse("gguf:Q4_K").unwrap(), &odd, &c).unwrap(),
            4096 * 345 * 22
        );
        // 100 is not whole 32-blocks either: F16.
        let odder = t("blk.0.ffn_down.weight", &[64, 100], Some(0), Component::Mlp);
        assert_eq!(
            tensor_bytes(&parse("gguf:Q4_K").unwrap(), &odder, &c).unwrap(),
            64 * 100 * 2
        );
        // Q8_0 has no fallback in llama-quantize.
        assert!(tensor_bytes(&parse("gguf:Q8_0").unwrap(), &odder, &c).is_err());
    }

    #[test]
    fn tied_embedding_takes_the_output_rule() {
        let mut ts = llama2_7b_gguf();
        ts.retain(|x| x.name != "output.weight");
        let p = plan(&parse("gguf:Q4_K_M").unwrap(), &ts, &ctx()).unwrap();
        assert_eq!(p[0].ggml, Some(GgmlType::Q6_K));
    }

    #[test]
    fn hf_names_map_to_llama_cpp_categories() {
        let c = ctx();
        let cat = |name: &str, comp| category(&t(name, &[64, 64], Some(0), comp));
        assert_eq!(
            cat(
                "model.layers.0.self_attn.v_proj.weight",
                Component::Attention
            ),
            Category::AttnV
        );
        assert_eq!(
            cat("transformer.h.0.attn.c_attn.weight", Component::Attention),
            Category::AttnQkv
        );
        assert_eq!(
            cat("transformer.h.0.mlp.c_proj.weight", Component::Mlp),
            Category::FfnDown
        );
        assert_eq!(
            cat("transformer.h.0.attn.c_proj.weight", Component::Attention),
            Category::AttnOutput
        );
        assert_eq!(
            cat(
                "bert.encoder.layer.0.intermediate.dense.weight",
                Component::Mlp
            ),
            Category::FfnUp
        );
        assert_eq!(
            cat("bert.encoder.layer.0.output.dense.weight", Component::Mlp),
            Category::FfnDown
        );
        assert_eq!(
            cat(
                "model.layers.0.block_sparse_moe.experts.3.w2.weight",
                Component::Experts
            ),
            Category::FfnDown
        );
        assert_eq!(
            cat(
                "model.layers.0.self_attn.kv_b_proj.weight",
                Component::Attention
            ),
            Category::AttnKvB
        );
        assert_eq!(cat("lm_head.weight", Component::Head), Category::Output);
        // Q4_K_M on an HF-named v_proj of layer 0 (use_more_bits) -> Q6_K.
        let v = t(
            "model.layers.0.self_attn.v_proj.weight",
            &[4096, 4096],
            Some(0),
            Component::Attention,
        );
        assert_eq!(
            tensor_bytes(&parse("gguf:Q4_K_M").unwrap(), &v, &c).unwrap(),
            65_536 * 210
        );
        // An HF position table is not quantized and is stored F32.
        let wpe = t(
            "transformer.wpe.weight",
            &[1024, 768],
            None,
            Component::Embedding,
        );
        assert_eq!(
            tensor_bytes(&parse("gguf:Q4_K_M").unwrap(), &wpe, &c).unwrap(),
            4 * 1024 * 768
        );
    }

    #[test]
    fn context_from_a_spec() {
        use crate::model::*;
        let layer = Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads: 64,
                    kv_heads: 8,
                    head_dim: 128,
                },
                bias: ProjBias::default(),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(DenseMlp {
                ffn: 28672,
                gated: true,
                bias: false,
                activation: "silu".into(),
            }),
            norms: vec![],
            parallel_residual: false,
        };
        let spec = ModelSpec {
            name: "llama-70b-like".into(),
            model_type: "llama".into(),
            architecture: "LlamaForCausalLM".into(),
            naming: Naming::Llama,
            dtype: DType::BF16,
            vocab_size: 128256,
            hidden_size: 8192,
            max_position_embeddings: None,
            embedding: Embedding {
                dim: 8192,
                positions: Positions::Rotary { theta: None },
                token_types: 0,
                norm: None,
                projection: false,
            },
            encoder: None,
            decoder: Stack {
                layers: vec![layer; 80],
                final_norm: None,
            },
            head: Head::LanguageModel {
                tied: false,
                bias: false,
            },
            dropout: Default::default(),
            quantization: None,
            softcapping: Default::default(),
        };
        let c = QuantContext::from_spec(&spec);
        // 64 query heads over 8 KV heads; 80 layers of Llama = llama.cpp's LLM_TYPE_70B.
        assert_eq!((c.n_layers, c.n_gqa, c.n_expert), (80, 8, 0));
        assert!(c.llm_70b && !c.falcon && !c.conv1d && !c.tied_embeddings);
    }
}
