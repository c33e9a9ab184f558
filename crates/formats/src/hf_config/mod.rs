//! Hugging Face `config.json` → [`ModelSpec`].
//!
//! Each family follows its transformers configuration class (`configuration_<family>.py`) for
//! field names and defaults — an absent key takes the class default, not zero — and its
//! modeling file (`modeling_<family>.py`) for which tensors exist. Both transformers 4.x and 5.x
//! spellings are read (`torch_dtype`/`dtype`, `rope_theta`/`rope_parameters`).

use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use vramscope_core::model::*;
use vramscope_core::DType;

mod decoder_tail;
mod encoders;
mod falcon_h1;
mod fields;
pub mod gemma3n;
pub mod gemma3n_audio;
pub mod gemma4;
pub mod gemma4_towers;
mod gemma4_vision;
mod gemma_shared;
mod gpt;
mod granite;
mod hybrid;
mod lfm2;
mod llama;
mod llama4;
mod llava_onevision;
mod mamba;
mod mamba2_heads;
mod mllama;
pub mod mobilenetv5;
mod nemotron_h;
mod quant_methods;
mod qwen3_5;
mod qwen3_next;
mod unknown;
mod vision;
mod vision_families;
mod vision_parts;
mod vision_season;
mod zamba2;

use encoders::{bert_like, t5};
use fields::Cfg;
use gpt::{falcon, gpt2_like, gpt_neox, opt};
use llama::{is_llama_family, llama_like};
use mamba::mamba_like;
pub use unknown::ReadOptions;
pub use vision::{apply_preprocessor, VISION_TYPES};

/// The families read natively, by `model_type`.
pub const SUPPORTED_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
    "falcon",
    "bert",
    "roberta",
    "t5",
    "gpt_bigcode",
    "starcoder2",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "olmoe",
    "phimoe",
    "glm4_moe",
    "llama4_text",
    "llama4",
    "kimi_k2",
    "qwen2_vl",
    "qwen2_5_vl",
    "llava",
    "llava_next",
    "mistral3",
    "idefics3",
    "smolvlm",
    "qwen3_vl",
    "internvl",
    "mllama",
    "llava_onevision",
    "qwen3_vl_moe",
    "mamba",
    "falcon_mamba",
    "mamba2",
    "jamba",
    "falcon_h1",
    "qwen3_next",
    "nemotron_h",
    "smollm3",
    "olmo2",
    "olmo3",
    "exaone4",
    "granitemoe",
    "granitemoehybrid",
    "bamba",
    "lfm2",
    "lfm2_moe",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "deepseek_v32",
    "glm_moe_dsa",
    "zamba2",
    "paligemma",
    "lfm2_vl",
];

/// Upper bounds that keep a hostile config from making the inventory huge. Real models are far
/// below them (DeepSeek-V3: 61 layers × 256 experts).
pub(crate) const MAX_LAYERS: u64 = 10_000;
const MAX_EXPERTS: u64 = 65_536;
const MAX_EXPERT_MATRICES: u64 = 4_000_000;
/// Largest single dimension accepted (2^40): beyond it every product overflows in practice.
pub(crate) const MAX_DIM: u64 = 1 << 40;

/// A parsed config: the model and anything the user should know about how it was read.
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    pub spec: ModelSpec,
    pub warnings: Vec<String>,
}

/// Parses config.json text. `origin` names the file in errors.
pub fn parse_config_str(text: &str, origin: &str) -> Result<ParsedConfig> {
    parse_config_str_with(text, origin, ReadOptions::default())
}

/// [`parse_config_str`] with explicit read options.
pub fn parse_config_str_with(text: &str, origin: &str, opts: ReadOptions) -> Result<ParsedConfig> {
    // Python's `Infinity` / `NaN` (transformers writes config.json with `json.dumps`).
    let value: Value = serde_json::from_str(&crate::python_json::to_strict(text))
        .map_err(|e| FormatError::malformed(origin, format!("not valid JSON: {e}")))?;
    parse_config_value_with(&value, origin, opts)
}

/// Parses an already-decoded config.json object.
pub fn parse_config_value(value: &Value, origin: &str) -> Result<ParsedConfig> {
    parse_config_value_with(value, origin, ReadOptions::default())
}

/// The `model_type`s read natively, with the old Falcon spellings.
fn is_known_type(t: &str) -> bool {
    SUPPORTED_TYPES.contains(&t)
        || matches!(
            t,
            "RefinedWeb"
                | "RefinedWebModel"
                | "gemma4"
                | "gemma4_text"
                | "gemma3n"
                | "gemma3n_text"
        )
}

/// [`parse_config_value`] with explicit read options: an unknown family whose config changes
/// the shapes is refused unless `opts.assume_llama`.
pub fn parse_config_value_with(
    value: &Value,
    origin: &str,
    opts: ReadOptions,
) -> Result<ParsedConfig> {
    let top = value
        .as_object()
        .ok_or_else(|| FormatError::malformed(origin, "config.json must be a JSON object"))?;
    let mut warnings = Vec::new();
    let top_type = top.get("model_type").and_then(Value::as_str).unwrap_or("");
    if !is_known_type(top_type) {
        unknown::check_unknown(top, top_type, origin, opts)?;
    }
    if top_type == "gemma3n" {
        // The text model is read from text_config, the towers added around it (`gemma3n.rs`).
        gemma3n::needs_text_config(top, origin)?;
    }
    vision::check_subconfigs(top, top_type, origin)?;
    let architecture = top
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(str::to_string);
    let (obj, model_type) = language_model(top, top_type, &mut warnings);
    let cfg = Cfg { obj, origin };
    let name = top
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(origin)
        .to_string();

    let mut spec = read_family(&cfg, &model_type, &mut warnings)?;
    if matches!(top_type, "qwen3_5" | "qwen3_5_moe") {
        qwen3_5::as_vlm(&mut spec, top_type, &Cfg { obj: top, origin })?;
    }
    if top_type == "gemma3n" {
        gemma3n::as_conditional(&mut spec, top, origin)?;
    }
    spec.name = name;
    spec.vision = vision::read_vision(top, top_type, spec.hidden_size, origin)?;
    if top_type == "gemma4" {
        // E2B / E4B's audio tower: loaded, never run (no job field feeds audio).
        spec.idle_tensors = gemma4_towers::audio_part(top, origin, spec.hidden_size)?;
    }
    if top_type == "mllama" {
        mllama::cross_layers(&mut spec, &cfg)?;
    }
    if matches!(top_type, "paligemma" | "lfm2_vl" | "gemma4" | "gemma3n") {
        vision_season::tie_head(&mut spec, top_type, &Cfg { obj: top, origin })?;
    }
    if let Some(q) = top.get("quantization_config").and_then(Value::as_object) {
        spec.quantization = quantization_format(q);
        if spec.quantization.is_none() {
            warnings.push(format!(
                "quantization_config method {} is not modelled: weights counted in the config's \
                 dtype",
                q.get("quant_method").unwrap_or(&Value::Null)
            ));
        }
    }
    spec.dtype = if spec.quantization.as_deref() == Some("mxfp4") && !names_dtype(obj) {
        // gpt-oss's config names no dtype; its checkpoint stores every tensor that is not an
        // MXFP4 expert weight in bf16 (the safetensors headers), and transformers loads it so.
        DType::BF16
    } else if (spec.vision.is_some() || top_type == "gemma3n")
        && !names_dtype(obj)
        && names_dtype(top)
    {
        // A VLM's text_config may leave the dtype to the top level (Gemma 3).
        Cfg { obj: top, origin }.dtype(&mut warnings)?
    } else {
        cfg.dtype(&mut warnings)?
    };
    let labels = cfg
        .uint("num_labels")?
        .or_else(|| {
            obj.get("id2label")
                .and_then(Value::as_object)
                .map(|m| m.len() as u64)
        })
        .unwrap_or(2)
        .max(1);
    apply_architecture(&mut spec, architecture.as_deref(), labels, &mut warnings);
    check_sizes(&spec, origin)?;
    Ok(ParsedConfig { spec, warnings })
}

/// Whether the config names its weights' dtype (`dtype` / `torch_dtype`, not `auto`).
fn names_dtype(obj: &Map<String, Value>) -> bool {
    ["dtype", "torch_dtype"].iter().any(|k| {
        obj.get(*k)
            .and_then(Value::as_str)
            .is_some_and(|s| s != "auto")
    })
}

/// The object that describes the language model, and its `model_type`: multimodal wrappers keep
/// it under `text_config` (with a warning that only it is counted); `gemma3` reads as
/// `gemma3_text`.
fn language_model<'a>(
    top: &'a Map<String, Value>,
    top_type: &str,
    warnings: &mut Vec<String>,
) -> (&'a Map<String, Value>, String) {
    if VISION_TYPES.contains(&top_type) {
        // Read natively: the language model is one component of the VLM (`vision.rs`).
        let text = top.get("text_config").and_then(Value::as_object);
        return (text.unwrap_or(top), vision::text_type(top_type, text));
    }
    let text = top.get("text_config").and_then(Value::as_object);
    if let (Some(text), "gemma3n") = (text, top_type) {
        // Counted whole, towers included (`gemma3n::as_conditional`): no warning.
        return (text, "gemma3n_text".to_string());
    }
    let (obj, model_type) = match text {
        Some(text) if !SUPPORTED_TYPES.contains(&top_type) || top_type == "gemma3" => {
            let inner = text
                .get("model_type")
                .and_then(Value::as_str)
                .unwrap_or(match top_type {
                    "gemma3" => "gemma3_text",
                    other => other,
                })
                .to_string();
            warnings.push(format!(
                "'{top_type}' is multimodal: only its language model ('{inner}' in text_config) \
                 is counted; the vision tower and projector are not"
            ));
            (text, inner)
        }
        _ => (top, top_type.to_string()),
    };
    if model_type == "gemma3" {
        (obj, "gemma3_text".to_string())
    } else {
        (obj, model_type)
    }
}

/// The family's reader for `model_type`; an unknown type with the standard fields reads as a
/// generic Llama-style decoder (with a warning), one without them is refused.
fn read_family(cfg: &Cfg, model_type: &str, warnings: &mut Vec<String>) -> Result<ModelSpec> {
    Ok(match model_type {
        t if is_llama_family(t) => llama_like(cfg, t)?,
        "gpt2" | "gpt_bigcode" => gpt2_like(cfg, model_type)?,
        "gpt_neox" => gpt_neox(cfg)?,
        "opt" => opt(cfg)?,
        "falcon" | "RefinedWeb" | "RefinedWebModel" => falcon(cfg)?,
        "bert" | "roberta" => bert_like(cfg, model_type)?,
        "t5" => t5(cfg)?,
        "mamba" | "falcon_mamba" | "mamba2" => mamba_like(cfg, model_type)?,
        "jamba" => hybrid::jamba(cfg)?,
        "falcon_h1" => falcon_h1::falcon_h1(cfg)?,
        "qwen3_next" => qwen3_next::qwen3_next(cfg)?,
        "granitemoe" => granite::granitemoe(cfg)?,
        "granitemoehybrid" => granite::granitemoehybrid(cfg)?,
        "bamba" => granite::bamba(cfg)?,
        "lfm2" => lfm2::lfm2(cfg, false)?,
        "lfm2_moe" => lfm2::lfm2(cfg, true)?,
        "qwen3_5_text" => qwen3_5::qwen3_5(cfg)?,
        "qwen3_5_moe_text" => qwen3_5::qwen3_5_moe(cfg)?,
        "nemotron_h" => nemotron_h::nemotron_h(cfg)?,
        "zamba2" => zamba2::zamba2(cfg)?,
        "gemma4_text" => gemma4::text_spec(cfg)?,
        "gemma3n_text" => gemma3n::text_spec(cfg)?,
        other => {
            if !cfg.has_all(&[
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "vocab_size",
                "intermediate_size",
            ]) {
                let shown = if other.is_empty() { "(none)" } else { other };
                return Err(FormatError::Unsupported {
                    path: cfg.origin.to_string(),
                    reason: format!(
                        "model_type {shown} is not supported and the config lacks the standard \
                         fields (hidden_size, num_hidden_layers, num_attention_heads, \
                         vocab_size, intermediate_size); supported types: {}",
                        SUPPORTED_TYPES.join(", ")
                    ),
                });
            }
            // Reached only with `--assume-llama` (`unknown::check_unknown` refuses otherwise).
            warnings.push(format!(
                "model_type '{other}' is not known to vramscope: read as a Llama-style decoder \
                 on request (--assume-llama: gated MLP, pre-norm RMSNorm, no q/k norms, untied \
                 head unless tie_word_embeddings says otherwise); transformers may count it \
                 differently"
            ));
            llama_like(cfg, "generic")?
        }
    })
}

/// Points the head at the class named in `architectures` (contract: `params_total` counts that
/// class): `...Model` is the bare base model, `...ForMaskedLM` the MLM head, the rest the
/// family's generation head.
fn apply_architecture(
    spec: &mut ModelSpec,
    arch: Option<&str>,
    labels: u64,
    warnings: &mut Vec<String>,
) {
    let Some(arch) = arch else { return };
    spec.architecture = arch.to_string();
    let base = arch.ends_with("Model")
        && !arch.ends_with("LMHeadModel")
        && !arch.ends_with("PreTrainedModel");
    if base {
        let pooler = matches!(spec.naming, Naming::Bert | Naming::Roberta);
        spec.head = Head::None { pooler };
    } else if arch.ends_with("ForSequenceClassification") {
        spec.head = Head::Classifier {
            labels,
            pooler: spec.naming == Naming::Bert,
        };
    } else if arch.ends_with("ForMaskedLM") {
        if !matches!(spec.head, Head::MaskedLm { .. }) {
            warnings.push(format!("{arch}: masked-LM head counted as a plain LM head"));
        }
    } else if !(arch.ends_with("ForCausalLM")
        || arch.ends_with("LMHeadModel")
        || arch.ends_with("ForConditionalGeneration"))
    {
        warnings.push(format!(
            "architecture {arch}: its task head is not modelled; counted as the family's \
             generation model"
        ));
    }
}

/// Rejects layer and expert counts that would make the inventory unreasonably large.
fn check_sizes(spec: &ModelSpec, origin: &str) -> Result<()> {
    let layers = spec.num_layers();
    if layers > MAX_LAYERS {
        return Err(field_err(
            origin,
            "num_hidden_layers",
            format!("{layers} layers is more than vramscope accepts ({MAX_LAYERS})"),
        ));
    }
    let mut matrices = 0u64;
    for l in spec.all_layers() {
        if let Mlp::Moe(m) = &l.mlp {
            if m.experts > MAX_EXPERTS {
                return Err(field_err(
                    origin,
                    "num_experts",
                    format!("{} experts is more than vramscope accepts", m.experts),
                ));
            }
            matrices += m.experts;
        }
    }
    if matrices > MAX_EXPERT_MATRICES {
        return Err(field_err(
            origin,
            "num_experts",
            format!("{matrices} expert MLPs over all layers is more than vramscope accepts"),
        ));
    }
    Ok(())
}

pub(crate) fn field_err(origin: &str, field: &str, reason: impl Into<String>) -> FormatError {
    FormatError::Field {
        path: origin.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Global attention without q/k norms or windows: the older families' only kind.
pub(crate) fn plain_attention(
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    bias: ProjBias,
) -> Attention {
    Attention::new(
        AttentionKind::Standard {
            heads,
            kv_heads,
            head_dim,
        },
        bias,
    )
}

pub(crate) fn dense(ffn: u64, gated: bool, bias: bool, activation: &str) -> DenseMlp {
    DenseMlp {
        ffn,
        gated,
        bias,
        activation: activation.to_string(),
        gaussian_topk: false,
    }
}

pub(crate) fn empty_spec(model_type: &str, arch: &str, naming: Naming) -> ModelSpec {
    ModelSpec {
        name: String::new(),
        model_type: model_type.to_string(),
        architecture: arch.to_string(),
        naming,
        dtype: DType::F32,
        vocab_size: 0,
        hidden_size: 0,
        max_position_embeddings: None,
        embedding: Embedding::plain(0, Positions::None),
        encoder: None,
        decoder: Stack {
            layers: Vec::new(),
            final_norm: None,
        },
        head: Head::LanguageModel {
            tied: false,
            bias: false,
        },
        dropout: Dropout::default(),
        quantization: None,
        softcapping: Default::default(),
        vision: None,
        gemma3n: None,
        idle_tensors: Vec::new(),
    }
}

/// The `weights` format of transformers' `quantization_config` (`quant_method` and its fields,
/// `transformers/utils/quantization_config.py`); `None` for methods vramscope does not model.
pub(crate) fn quantization_format(q: &Map<String, Value>) -> Option<String> {
    let num = |k: &str| q.get(k).and_then(Value::as_u64);
    let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
    match q.get("quant_method").and_then(Value::as_str)? {
        "bitsandbytes" if flag("load_in_8bit") => Some("int8".into()),
        "bitsandbytes" if flag("load_in_4bit") => {
            let kind = q
                .get("bnb_4bit_quant_type")
                .and_then(Value::as_str)
                .unwrap_or("fp4");
            Some(match (kind, flag("bnb_4bit_use_double_quant")) {
                ("nf4", true) => "nf4-dq".into(),
                ("nf4", false) => "nf4".into(),
                _ => "fp4".into(),
            })
        }
        "gptq" => {
            let bits = num("bits")?;
            let group = q.get("group_size").and_then(Value::as_i64).unwrap_or(128);
            Some(format!("gptq:{bits}:g{group}"))
        }
        "awq" => {
            let bits = num("bits").or_else(|| num("w_bit"))?;
            let group = num("group_size")
                .or_else(|| num("q_group_size"))
                .unwrap_or(128);
            Some(format!("awq:{bits}:g{group}"))
        }
        // transformers `Mxfp4Config`: the experts in MXFP4, the rest as stored.
        "mxfp4" => Some("mxfp4".into()),
        // FBGEMM: an fp32 scale per output row (`FbgemmFp8Linear`).
        "fbgemm_fp8" => Some("fp8:row".into()),
        "compressed-tensors" => quant_methods::compressed_tensors(q),
        "bitnet" => quant_methods::bitnet(q),
        "fp8" => Some(
            match q
                .get("weight_block_size")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_u64)
            {
                Some(b) => format!("fp8:b{b}"),
                None => "fp8".into(),
            },
        ),
        _ => None,
    }
}
