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
];

/// Upper bounds that keep a hostile config from making the inventory huge. Real models are far
/// below them (DeepSeek-V3: 61 layers × 256 experts).
const MAX_LAYERS: u64 = 10_000;
const MAX_EXPERTS: u64 = 65_536;
const MAX_EXPERT_MATRICES: u64 = 4_000_000;
/// Largest single dimension accepted (2^40): beyond it every product overflows in practice.
const MAX_DIM: u64 = 1 << 40;

/// A parsed config: the model and anything the user should know about how it was read.
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    pub spec: ModelSpec,
    pub warnings: Vec<String>,
}

/// Parses config.json text. `origin` names the file in errors.
pub fn parse_config_str(text: &str, origin: &str) -> Result<ParsedConfig> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| FormatError::malformed(origin, format!("not valid JSON: {e}")))?;
    parse_config_value(&value, origin)
}

/// Parses an already-decoded config.json object.
pub fn parse_config_value(value: &Value, origin: &str) -> Result<ParsedConfig> {
    let top = value
        .as_object()
        .ok_or_else(|| FormatError::malformed(origin, "config.json must be a JSON object"))?;
    let mut warnings = Vec::new();
    let top_type = top.get("model_type").and_then(Value::as_str).unwrap_or("");
    let architecture = top
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(str::to_string);

    // Multimodal wrappers keep the language model under `text_config`.
    let (obj, model_type) = match top.get("text_config").and_then(Value::as_object) {
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
    let model_type = if model_type == "gemma3" {
        "gemma3_text".to_string()
    } else {
        model_type
    };
    let cfg = Cfg { obj, origin };
    let name = top
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(origin)
        .to_string();

    let mut spec = match model_type.as_str() {
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe"
        | "gemma" | "gemma2" | "gemma3_text" | "phi3" | "starcoder2" | "deepseek_v2"
        | "deepseek_v3" => llama_like(&cfg, &model_type)?,
        "gpt2" | "gpt_bigcode" => gpt2_like(&cfg, &model_type)?,
        "gpt_neox" => gpt_neox(&cfg)?,
        "opt" => opt(&cfg)?,
        "falcon" | "RefinedWeb" | "RefinedWebModel" => falcon(&cfg)?,
        "bert" | "roberta" => bert_like(&cfg, &model_type)?,
        "t5" => t5(&cfg)?,
        other => {
            if cfg.has_all(&[
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "vocab_size",
                "intermediate_size",
            ]) {
                warnings.push(format!(
                    "model_type '{other}' is not known to vramscope: read as a generic \
                     Llama-style decoder (gated MLP, RMSNorm, untied head unless \
                     tie_word_embeddings says otherwise); check the parameter count"
                ));
                llama_like(&cfg, "generic")?
            } else {
                let shown = if other.is_empty() { "(none)" } else { other };
                return Err(FormatError::Unsupported {
                    path: origin.to_string(),
                    reason: format!(
                        "model_type {shown} is not supported and the config lacks the standard \
                         fields (hidden_size, num_hidden_layers, num_attention_heads, \
                         vocab_size, intermediate_size); supported types: {}",
                        SUPPORTED_TYPES.join(", ")
                    ),
                });
            }
        }
    };
    spec.name = name;
    spec.dtype = cfg.dtype(&mut warnings)?;
    apply_architecture(&mut spec, architecture.as_deref(), &mut warnings);
    check_sizes(&spec, origin)?;
    Ok(ParsedConfig { spec, warnings })
}

/// Points the head at the class named in `architectures` (contract: `params_total` counts that
/// class): `...Model` is the bare base model, `...ForMaskedLM` the MLM head, the rest the
/// family's generation head.
fn apply_architecture(spec: &mut ModelSpec, arch: Option<&str>, warnings: &mut Vec<String>) {
    let Some(arch) = arch else { return };
    spec.architecture = arch.to_string();
    let base = arch.ends_with("Model")
        && !arch.ends_with("LMHeadModel")
        && !arch.ends_with("PreTrainedModel");
    if base {
        let pooler = matches!(spec.naming, Naming::Bert | Naming::Roberta);
        spec.head = Head::None { pooler };
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

fn field_err(origin: &str, field: &str, reason: impl Into<String>) -> FormatError {
    FormatError::Field {
        path: origin.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Typed access to config fields with the checks every size needs.
struct Cfg<'a> {
    obj: &'a Map<String, Value>,
    origin: &'a str,
}

impl Cfg<'_> {
    fn err(&self, field: &str, reason: impl Into<String>) -> FormatError {
        field_err(self.origin, field, reason)
    }

    fn has_all(&self, keys: &[&str]) -> bool {
        keys.iter()
            .all(|k| self.obj.get(*k).is_some_and(|v| !v.is_null()))
    }

    /// A non-negative integer field (an integral float like `4096.0` is accepted); `None` when
    /// absent or null.
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.obj.get(key) else {
            return Ok(None);
        };
        if v.is_null() {
            return Ok(None);
        }
        let n = if let Some(u) = v.as_u64() {
            u
        } else if let Some(i) = v.as_i64() {
            return Err(self.err(key, format!("must not be negative (got {i})")));
        } else if let Some(f) = v.as_f64() {
            if f < 0.0 {
                return Err(self.err(key, format!("must not be negative (got {f})")));
            }
            if f.fract() != 0.0 || f > MAX_DIM as f64 {
                return Err(self.err(key, format!("must be a whole number (got {f})")));
            }
            f as u64
        } else {
            return Err(self.err(key, format!("must be a number (got {v})")));
        };
        if n > MAX_DIM {
            return Err(self.err(key, format!("{n} is implausibly large")));
        }
        Ok(Some(n))
    }

    /// The first present of several spellings.
    fn uint_any(&self, keys: &[&str]) -> Result<Option<u64>> {
        for k in keys {
            if let Some(v) = self.uint(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// A size that must be at least 1; `default` when absent.
    fn size(&self, keys: &[&str], default: Option<u64>) -> Result<u64> {
        let v = self
            .uint_any(keys)?
            .or(default)
            .ok_or_else(|| self.err(keys[0], "is required and missing"))?;
        if v == 0 {
            let key = keys
                .iter()
                .find(|k| self.obj.contains_key(**k))
                .unwrap_or(&keys[0]);
            return Err(self.err(key, "must be at least 1 (got 0)"));
        }
        Ok(v)
    }

    /// A layer count: a size, bounded before anything is built per layer.
    fn layer_count(&self, keys: &[&str], default: u64) -> Result<u64> {
        let n = self.size(keys, Some(default))?;
        if n > MAX_LAYERS {
            return Err(self.err(
                keys[0],
                format!("{n} layers is more than vramscope accepts ({MAX_LAYERS})"),
            ));
        }
        Ok(n)
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.err(key, format!("must be true or false (got {other})"))),
        }
    }

    fn string(&self, key: &str) -> Option<&str> {
        self.obj.get(key).and_then(Value::as_str)
    }

    fn float(&self, key: &str) -> Option<f64> {
        self.obj.get(key).and_then(Value::as_f64)
    }

    /// A list of non-negative integers (e.g. `mlp_only_layers`).
    fn uint_list(&self, key: &str) -> Result<Vec<u64>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        self.err(key, format!("entries must be layer indices (got {v})"))
                    })
                })
                .collect(),
            Some(other) => Err(self.err(key, format!("must be a list (got {other})"))),
        }
    }

    /// `layer_types` (transformers ≥ 4.53): `"sliding_attention"` / `"full_attention"` per layer.
    fn layer_types(&self, layers: u64) -> Result<Option<Vec<bool>>> {
        match self.obj.get("layer_types") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() as u64 != layers {
                    return Err(self.err(
                        "layer_types",
                        format!("has {} entries for {layers} layers", items.len()),
                    ));
                }
                Ok(Some(
                    items
                        .iter()
                        .map(|v| v.as_str().is_some_and(|s| s.contains("sliding")))
                        .collect(),
                ))
            }
            Some(other) => Err(self.err("layer_types", format!("must be a list (got {other})"))),
        }
    }

    /// The checkpoint dtype: `dtype` (transformers 5) or `torch_dtype` (4.x); fp32 when absent,
    /// as `from_pretrained` loads without a dtype.
    fn dtype(&self, warnings: &mut Vec<String>) -> Result<DType> {
        for key in ["dtype", "torch_dtype"] {
            if let Some(v) = self.obj.get(key) {
                if v.is_null() {
                    continue;
                }
                let s = v
                    .as_str()
                    .ok_or_else(|| self.err(key, format!("must be a string (got {v})")))?;
                if s == "auto" {
                    continue;
                }
                return DType::parse(s).ok_or_else(|| {
                    self.err(key, format!("unknown dtype '{s}' (expected e.g. bfloat16)"))
                });
            }
        }
        warnings.push("config.json names no dtype: weights assumed float32".into());
        Ok(DType::F32)
    }

    /// Rotary base from `rope_parameters.rope_theta` (v5) or `rope_theta` (v4).
    fn rope_theta(&self) -> Option<f64> {
        self.obj
            .get("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or_else(|| self.float("rope_theta"))
    }

    /// Head width: explicit `head_dim` when given, else hidden / heads (which must divide).
    fn head_dim(&self, hidden: u64, heads: u64) -> Result<u64> {
        if let Some(d) = self.uint("head_dim")? {
            if d == 0 {
                return Err(self.err("head_dim", "must be at least 1 (got 0)"));
            }
            return Ok(d);
        }
        if !hidden.is_multiple_of(heads) {
            return Err(self.err(
                "num_attention_heads",
                format!("{heads} does not divide hidden_size {hidden} and no head_dim is given"),
            ));
        }
        Ok(hidden / heads)
    }

    /// KV heads (`default` when absent), which must divide the query heads: GQA groups are
    /// whole.
    fn kv_heads(&self, keys: &[&str], heads: u64, default: u64) -> Result<u64> {
        let kv = self.size(keys, Some(default))?;
        if !heads.is_multiple_of(kv) {
            let key = keys
                .iter()
                .find(|k| self.obj.contains_key(**k))
                .unwrap_or(&keys[0]);
            return Err(self.err(
                key,
                format!("{kv} does not divide num_attention_heads {heads}"),
            ));
        }
        Ok(kv)
    }
}

fn dense(ffn: u64, gated: bool, bias: bool, activation: &str) -> DenseMlp {
    DenseMlp {
        ffn,
        gated,
        bias,
        activation: activation.to_string(),
    }
}

fn empty_spec(model_type: &str, arch: &str, naming: Naming) -> ModelSpec {
    ModelSpec {
        name: String::new(),
        model_type: model_type.to_string(),
        architecture: arch.to_string(),
        naming,
        dtype: DType::F32,
        vocab_size: 0,
        hidden_size: 0,
        max_position_embeddings: None,
        embedding: Embedding {
            dim: 0,
            positions: Positions::None,
            token_types: 0,
            norm: None,
            projection: false,
        },
        encoder: None,
        decoder: Stack {
            layers: Vec::new(),
            final_norm: None,
        },
        head: Head::LanguageModel {
            tied: false,
            bias: false,
        },
    }
}

/// Class defaults of the Llama-shaped families that differ from each other
/// (`configuration_<family>.py`, transformers 5.x).
struct Defaults {
    arch: &'static str,
    vocab: u64,
    hidden: u64,
    ffn: u64,
    layers: u64,
    heads: u64,
    kv_heads: Option<u64>,
    head_dim: Option<u64>,
    max_pos: u64,
    tied: bool,
    activation: &'static str,
}

fn llama_defaults(model_type: &str) -> Defaults {
    let d = Defaults {
        arch: "LlamaForCausalLM",
        vocab: 32000,
        hidden: 4096,
        ffn: 11008,
        layers: 32,
        heads: 32,
        kv_heads: None,
        head_dim: None,
        max_pos: 2048,
        tied: false,
        activation: "silu",
    };
    match model_type {
        "mistral" => Defaults {
            arch: "MistralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            ..d
        },
        "mixtral" => Defaults {
            arch: "MixtralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            ..d
        },
        "qwen2" => Defaults {
            arch: "Qwen2ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            max_pos: 32768,
            ..d
        },
        "qwen2_moe" => Defaults {
            arch: "Qwen2MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 5632,
            layers: 24,
            heads: 16,
            kv_heads: Some(16),
            max_pos: 32768,
            ..d
        },
        "qwen3" => Defaults {
            arch: "Qwen3ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            head_dim: Some(128),
            max_pos: 32768,
            ..d
        },
        "qwen3_moe" => Defaults {
            arch: "Qwen3MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 6144,
            layers: 24,
            heads: 32,
            kv_heads: Some(4),
            head_dim: Some(128),
            max_pos: 32768,
            ..d
        },
        "gemma" => Defaults {
            arch: "GemmaForCausalLM",
            vocab: 256000,
            hidden: 3072,
            ffn: 24576,
            layers: 28,
            heads: 16,
            kv_heads: Some(16),
            head_dim: Some(256),
            max_pos: 8192,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "gemma2" => Defaults {
            arch: "Gemma2ForCausalLM",
            vocab: 256000,
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            head_dim: Some(256),
            max_pos: 8192,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "gemma3_text" => Defaults {
            arch: "Gemma3ForCausalLM",
            vocab: 262208,
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            head_dim: Some(256),
            max_pos: 131072,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "phi3" => Defaults {
            arch: "Phi3ForCausalLM",
            vocab: 32064,
            hidden: 3072,
            ffn: 8192,
            max_pos: 4096,
            ..d
        },
        "starcoder2" => Defaults {
            arch: "Starcoder2ForCausalLM",
            vocab: 49152,
            hidden: 3072,
            ffn: 12288,
            layers: 30,
            heads: 24,
            kv_heads: Some(2),
            max_pos: 4096,
            tied: true,
            activation: "gelu_pytorch_tanh",
            ..d
        },
        "deepseek_v2" => Defaults {
            arch: "DeepseekV2ForCausalLM",
            vocab: 102400,
            hidden: 4096,
            ffn: 11008,
            layers: 30,
            heads: 32,
            kv_heads: Some(32),
            max_pos: 2048,
            ..d
        },
        "deepseek_v3" => Defaults {
            arch: "DeepseekV3ForCausalLM",
            vocab: 129280,
            hidden: 7168,
            ffn: 18432,
            layers: 61,
            heads: 128,
            kv_heads: Some(128),
            max_pos: 4096,
            ..d
        },
        _ => d,
    }
}

/// Llama and the decoders built like it: pre-norm RMSNorm blocks, rotary positions, gated MLP
/// (or MoE). Per-family differences: Qwen2's q/k/v biases (`modeling_qwen2.py`), Qwen3's and
/// Gemma-3's q/k norms, Gemma's explicit head_dim and tied head, Gemma-2/3's four norms per block,
/// Phi-3's fused projections, StarCoder2's LayerNorm and plain MLP with biases, Mixtral / Qwen-MoE
/// / DeepSeek experts, DeepSeek's latent attention.
fn llama_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let d = llama_defaults(model_type);
    let naming = match model_type {
        "mixtral" => Naming::Mixtral,
        "qwen2_moe" | "qwen3_moe" => Naming::QwenMoe,
        "deepseek_v2" | "deepseek_v3" => Naming::DeepSeek,
        "phi3" => Naming::Phi3,
        _ => Naming::Llama,
    };
    let arch = if model_type == "generic" {
        "CausalLM"
    } else {
        d.arch
    };
    let mut spec = empty_spec(
        if model_type == "generic" {
            cfg.string("model_type").unwrap_or("unknown")
        } else {
            model_type
        },
        arch,
        naming,
    );
    let hidden = cfg.size(&["hidden_size"], Some(d.hidden))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], d.layers)?;
    let heads = cfg.size(&["num_attention_heads"], Some(d.heads))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, d.kv_heads.unwrap_or(heads))?;
    let head_dim = match (cfg.uint("head_dim")?, d.head_dim) {
        (Some(_), _) | (None, None) => cfg.head_dim(hidden, heads)?,
        (None, Some(def)) => def,
    };
    let vocab = cfg.size(&["vocab_size"], Some(d.vocab))?;
    let ffn = cfg.size(&["intermediate_size"], Some(d.ffn))?;
    let max_pos = cfg.uint("max_position_embeddings")?.unwrap_or(d.max_pos);
    let tied = cfg.boolean("tie_word_embeddings", d.tied)?;
    let activation = cfg
        .string("hidden_act")
        .or(cfg.string("hidden_activation"))
        .unwrap_or(d.activation)
        .to_string();

    // Biases.
    let attention_bias = cfg.boolean("attention_bias", false)?;
    let bias = match model_type {
        // Qwen2 hard-codes bias=True on q/k/v (modeling_qwen2.py `Qwen2Attention`).
        "qwen2" | "qwen2_moe" => {
            let qkv = cfg.boolean("qkv_bias", true)?;
            ProjBias {
                q: qkv,
                k: qkv,
                v: qkv,
                o: false,
            }
        }
        "starcoder2" => ProjBias::all(cfg.boolean("use_bias", true)?),
        _ => ProjBias::all(attention_bias),
    };
    let mlp_bias = match model_type {
        "starcoder2" => cfg.boolean("use_bias", true)?,
        _ => cfg.boolean("mlp_bias", false)?,
    };

    let norm = match model_type {
        "starcoder2" => Norm::layer(hidden, true),
        _ => Norm::rms(hidden),
    };
    let qk_norm = match model_type {
        "qwen3" | "qwen3_moe" | "gemma3_text" => Some(Norm::rms(head_dim)),
        _ => None,
    };
    let four_norms = matches!(model_type, "gemma2" | "gemma3_text");
    let gated = model_type != "starcoder2";

    // Sliding windows: all layers (Mistral, Mixtral, Phi-3, StarCoder2), alternating
    // (Gemma-2: even layers local), a pattern (Gemma-3: every `sliding_window_pattern`-th layer
    // global), Qwen2's `use_sliding_window` above `max_window_layers`, or explicit `layer_types`.
    let window = cfg.uint("sliding_window")?;
    let layer_types = cfg.layer_types(layers)?;
    let is_sliding = |i: u64| -> bool {
        if window.is_none() {
            return false;
        }
        if let Some(types) = &layer_types {
            return types[i as usize];
        }
        match model_type {
            "gemma2" => i.is_multiple_of(2),
            "gemma3_text" => {
                let pattern = cfg
                    .uint("sliding_window_pattern")
                    .ok()
                    .flatten()
                    .unwrap_or(6)
                    .max(1);
                !(i + 1).is_multiple_of(pattern)
            }
            "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => {
                cfg.boolean("use_sliding_window", false).unwrap_or(false)
                    && i >= cfg
                        .uint("max_window_layers")
                        .ok()
                        .flatten()
                        .unwrap_or(layers)
            }
            "mistral" | "mixtral" | "phi3" | "starcoder2" => true,
            _ => false,
        }
    };

    // Attention kind.
    let latent = matches!(model_type, "deepseek_v2" | "deepseek_v3");
    let kind = if latent {
        let kv_lora_rank = cfg.size(&["kv_lora_rank"], Some(512))?;
        // `q_lora_rank: null` (DeepSeek-V2-Lite) projects queries directly.
        let q_lora_rank = match cfg.obj.get("q_lora_rank") {
            Some(Value::Null) => None,
            None => Some(1536),
            Some(_) => Some(cfg.size(&["q_lora_rank"], None)?),
        };
        AttentionKind::Latent {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim: cfg.size(&["qk_nope_head_dim"], Some(128))?,
            qk_rope_head_dim: cfg.size(&["qk_rope_head_dim"], Some(64))?,
            v_head_dim: cfg.size(&["v_head_dim"], Some(128))?,
        }
    } else {
        AttentionKind::Standard {
            heads,
            kv_heads,
            head_dim,
        }
    };

    // MoE layout.
    let moe = moe_layout(cfg, model_type, &activation)?;

    for i in 0..layers {
        let mut norms = vec![(NormSlot::PreAttention, norm)];
        if four_norms {
            norms.push((NormSlot::PostAttention, norm));
        }
        norms.push((NormSlot::PreMlp, norm));
        if four_norms {
            norms.push((NormSlot::PostMlp, norm));
        }
        let mlp = match moe.as_ref().and_then(|m| m.for_layer(i)) {
            Some(m) => Mlp::Moe(m),
            None => Mlp::Dense(dense(ffn, gated, mlp_bias, &activation)),
        };
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind,
                bias,
                qk_norm,
                sliding_window: if is_sliding(i) { window } else { None },
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp,
            norms,
            parallel_residual: false,
        });
    }
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(max_pos);
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    spec.head = Head::LanguageModel { tied, bias: false };
    Ok(spec)
}

/// Which layers are MoE and what their experts look like.
struct MoeLayout {
    template: MoeMlp,
    /// Layer indices that stay dense.
    dense_layers: Vec<u64>,
    first_dense: u64,
    step: u64,
    /// DeepSeek counts MoE layers as `i % moe_layer_freq == 0` (`modeling_deepseek_v3.py`);
    /// Qwen-MoE as `(i + 1) % decoder_sparse_step == 0` (`modeling_qwen2_moe.py`).
    zero_based_step: bool,
}

impl MoeLayout {
    fn for_layer(&self, i: u64) -> Option<MoeMlp> {
        if i < self.first_dense || self.dense_layers.contains(&i) {
            return None;
        }
        let moe_here = if self.zero_based_step {
            i.is_multiple_of(self.step)
        } else {
            (i + 1).is_multiple_of(self.step)
        };
        moe_here.then(|| self.template.clone())
    }
}

fn moe_layout(cfg: &Cfg, model_type: &str, activation: &str) -> Result<Option<MoeLayout>> {
    let layout = match model_type {
        "mixtral" => MoeLayout {
            template: MoeMlp {
                experts: cfg.size(&["num_local_experts", "num_experts"], Some(8))?,
                top_k: cfg.size(&["num_experts_per_tok"], Some(2))?,
                expert: dense(
                    cfg.size(&["intermediate_size"], Some(14336))?,
                    true,
                    false,
                    activation,
                ),
                shared: None,
                shared_gate: false,
            },
            dense_layers: Vec::new(),
            first_dense: 0,
            step: 1,
            zero_based_step: false,
        },
        "qwen2_moe" | "qwen3_moe" => {
            let experts = cfg.size(
                &["num_experts"],
                Some(if model_type == "qwen2_moe" { 60 } else { 128 }),
            )?;
            let shared_ffn = if model_type == "qwen2_moe" {
                cfg.uint("shared_expert_intermediate_size")?.unwrap_or(5632)
            } else {
                0
            };
            MoeLayout {
                template: MoeMlp {
                    experts,
                    top_k: cfg.size(
                        &["num_experts_per_tok"],
                        Some(if model_type == "qwen2_moe" { 4 } else { 8 }),
                    )?,
                    expert: dense(
                        cfg.size(
                            &["moe_intermediate_size"],
                            Some(if model_type == "qwen2_moe" { 1408 } else { 768 }),
                        )?,
                        true,
                        false,
                        activation,
                    ),
                    shared: (shared_ffn > 0).then(|| dense(shared_ffn, true, false, activation)),
                    shared_gate: shared_ffn > 0,
                },
                dense_layers: cfg.uint_list("mlp_only_layers")?,
                first_dense: 0,
                step: cfg.size(&["decoder_sparse_step"], Some(1))?,
                zero_based_step: false,
            }
        }
        "deepseek_v2" | "deepseek_v3" => {
            let Some(experts) = cfg.uint_any(&["n_routed_experts", "num_local_experts"])? else {
                return Ok(None);
            };
            if experts == 0 {
                return Ok(None);
            }
            let expert_ffn = cfg.size(
                &["moe_intermediate_size"],
                Some(if model_type == "deepseek_v3" {
                    2048
                } else {
                    1407
                }),
            )?;
            let shared = cfg
                .uint("n_shared_experts")?
                .unwrap_or(if model_type == "deepseek_v3" { 1 } else { 0 });
            MoeLayout {
                template: MoeMlp {
                    experts,
                    top_k: cfg.size(&["num_experts_per_tok"], Some(8))?,
                    expert: dense(expert_ffn, true, false, activation),
                    // DeepseekV3MoE: one MLP of width moe_intermediate_size × n_shared_experts.
                    shared: (shared > 0)
                        .then(|| dense(expert_ffn.saturating_mul(shared), true, false, activation)),
                    shared_gate: false,
                },
                dense_layers: Vec::new(),
                first_dense: cfg.uint("first_k_dense_replace")?.unwrap_or(0),
                step: cfg.size(&["moe_layer_freq"], Some(1))?,
                zero_based_step: true,
            }
        }
        _ => return Ok(None),
    };
    if layout.template.top_k > layout.template.experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!(
                "{} is more than the {} experts",
                layout.template.top_k, layout.template.experts
            ),
        ));
    }
    Ok(Some(layout))
}

/// GPT-2 (`modeling_gpt2.py`: Conv1D projections with biases, learned positions, pre-norm
/// LayerNorm, tied head) and GPTBigCode (same layout with Linear weights and multi-query
/// attention, `modeling_gpt_bigcode.py`).
fn gpt2_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let bigcode = model_type == "gpt_bigcode";
    let mut spec = empty_spec(
        model_type,
        if bigcode {
            "GPTBigCodeForCausalLM"
        } else {
            "GPT2LMHeadModel"
        },
        if bigcode {
            Naming::BigCode
        } else {
            Naming::Gpt2
        },
    );
    let hidden = cfg.size(&["n_embd", "hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["n_layer", "num_hidden_layers"], 12)?;
    let heads = cfg.size(&["n_head", "num_attention_heads"], Some(12))?;
    if hidden % heads != 0 {
        return Err(cfg.err("n_head", format!("{heads} does not divide n_embd {hidden}")));
    }
    let head_dim = hidden / heads;
    let ffn = match cfg.uint("n_inner")? {
        Some(0) => return Err(cfg.err("n_inner", "must be at least 1 (got 0)")),
        Some(n) => n,
        None => 4 * hidden,
    };
    let positions = cfg.size(&["n_positions", "max_position_embeddings"], Some(1024))?;
    let vocab = cfg.size(&["vocab_size"], Some(50257))?;
    let kv_heads = if bigcode && cfg.boolean("multi_query", true)? {
        1
    } else {
        heads
    };
    let activation = cfg
        .string("activation_function")
        .unwrap_or("gelu_new")
        .to_string();
    let ln = Norm::layer(hidden, true);
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads,
                    kv_heads,
                    head_dim,
                },
                bias: ProjBias::all(true),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(dense(ffn, false, true, &activation)),
            norms: vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
            parallel_residual: false,
        });
    }
    spec.decoder.final_norm = Some(ln);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(positions);
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Learned { rows: positions };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", true)?,
        bias: false,
    };
    Ok(spec)
}

/// GPT-NeoX / Pythia (`modeling_gpt_neox.py`): fused query_key_value with biases, parallel
/// residual with two LayerNorms, rotary positions, untied `embed_out` by default.
fn gpt_neox(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("gpt_neox", "GPTNeoXForCausalLM", Naming::NeoX);
    let hidden = cfg.size(&["hidden_size"], Some(6144))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 44)?;
    let heads = cfg.size(&["num_attention_heads"], Some(64))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["intermediate_size"], Some(24576))?;
    let vocab = cfg.size(&["vocab_size"], Some(50432))?;
    let bias = cfg.boolean("attention_bias", true)?;
    let ln = Norm::layer(hidden, true);
    let parallel = cfg.boolean("use_parallel_residual", true)?;
    let activation = cfg.string("hidden_act").unwrap_or("gelu").to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads,
                    kv_heads: heads,
                    head_dim,
                },
                bias: ProjBias::all(bias),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(dense(ffn, false, true, &activation)),
            norms: vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
            parallel_residual: parallel,
        });
    }
    spec.decoder.final_norm = Some(ln);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(cfg.uint("max_position_embeddings")?.unwrap_or(2048));
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", false)?,
        bias: false,
    };
    Ok(spec)
}

/// OPT (`modeling_opt.py`): learned positions with an offset of 2 rows
/// (`OPTLearnedPositionalEmbedding`), optional project_in/out when `word_embed_proj_dim` differs
/// from the width (OPT-350m), biases everywhere (`enable_bias`), a final LayerNorm unless
/// `do_layer_norm_before` is false or `_remove_final_layer_norm`, tied head.
fn opt(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("opt", "OPTForCausalLM", Naming::Opt);
    let hidden = cfg.size(&["hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 12)?;
    let heads = cfg.size(&["num_attention_heads"], Some(12))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["ffn_dim"], Some(3072))?;
    let vocab = cfg.size(&["vocab_size"], Some(50272))?;
    let max_pos = cfg.size(&["max_position_embeddings"], Some(2048))?;
    let proj_dim = cfg.size(&["word_embed_proj_dim"], Some(hidden))?;
    let bias = cfg.boolean("enable_bias", true)?;
    let affine = cfg.boolean("layer_norm_elementwise_affine", true)?;
    let pre_norm = cfg.boolean("do_layer_norm_before", true)?;
    let remove_final = cfg.boolean("_remove_final_layer_norm", false)?;
    let ln = Norm::layer(hidden, true);
    let activation = cfg
        .string("activation_function")
        .unwrap_or("relu")
        .to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads,
                    kv_heads: heads,
                    head_dim,
                },
                bias: ProjBias::all(bias),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(dense(ffn, false, bias, &activation)),
            norms: if affine {
                vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)]
            } else {
                Vec::new()
            },
            parallel_residual: false,
        });
    }
    spec.decoder.final_norm = (pre_norm && !remove_final && affine).then_some(ln);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(max_pos);
    spec.embedding.dim = proj_dim;
    spec.embedding.projection = proj_dim != hidden;
    spec.embedding.positions = Positions::Learned { rows: max_pos + 2 };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", true)?,
        bias: false,
    };
    Ok(spec)
}

/// Falcon (`modeling_falcon.py`): fused query_key_value sized by the attention variant (new
/// decoder architecture: grouped KV; `multi_query`: one KV head; else MHA), parallel attention,
/// one or two input LayerNorms, tied head.
fn falcon(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("falcon", "FalconForCausalLM", Naming::Falcon);
    let hidden = cfg.size(&["hidden_size"], Some(4544))?;
    let layers = cfg.layer_count(&["num_hidden_layers", "n_layer"], 32)?;
    let heads = cfg.size(&["num_attention_heads", "n_head"], Some(71))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let vocab = cfg.size(&["vocab_size"], Some(65024))?;
    let new_arch = cfg.boolean("new_decoder_architecture", false)?;
    let multi_query = cfg.boolean("multi_query", true)?;
    let parallel = cfg.boolean("parallel_attn", true)?;
    let bias = cfg.boolean("bias", false)?;
    let kv_heads = if new_arch {
        cfg.kv_heads(&["num_kv_heads", "n_head_kv"], heads, heads)?
    } else if multi_query {
        1
    } else {
        heads
    };
    let ffn = match cfg.uint("ffn_hidden_size")? {
        Some(0) => return Err(cfg.err("ffn_hidden_size", "must be at least 1 (got 0)")),
        Some(f) => f,
        None => 4 * hidden,
    };
    let ln = Norm::layer(hidden, true);
    let norms = if new_arch {
        match cfg.uint("num_ln_in_parallel_attn")? {
            Some(1) => vec![(NormSlot::PreAttention, ln)],
            _ => vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
        }
    } else if parallel {
        vec![(NormSlot::PreAttention, ln)]
    } else {
        vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)]
    };
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads,
                    kv_heads,
                    head_dim,
                },
                bias: ProjBias::all(bias),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(dense(ffn, false, bias, "gelu")),
            norms: norms.clone(),
            parallel_residual: parallel || new_arch,
        });
    }
    spec.decoder.final_norm = Some(ln);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(cfg.uint("max_position_embeddings")?.unwrap_or(2048));
    spec.embedding.dim = hidden;
    spec.embedding.positions = if cfg.boolean("alibi", false)? {
        Positions::None
    } else {
        Positions::Rotary {
            theta: cfg.rope_theta(),
        }
    };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", true)?,
        bias: false,
    };
    Ok(spec)
}

/// BERT and RoBERTa (`modeling_bert.py`, `modeling_roberta.py`): post-norm encoder with biases,
/// learned positions, token types and an embedding LayerNorm; the MLM head (dense + LayerNorm +
/// tied decoder + bias) or the bare model with its pooler.
fn bert_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let roberta = model_type == "roberta";
    let mut spec = empty_spec(
        model_type,
        if roberta {
            "RobertaForMaskedLM"
        } else {
            "BertForMaskedLM"
        },
        if roberta {
            Naming::Roberta
        } else {
            Naming::Bert
        },
    );
    let hidden = cfg.size(&["hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 12)?;
    let heads = cfg.size(&["num_attention_heads"], Some(12))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["intermediate_size"], Some(3072))?;
    let vocab = cfg.size(&["vocab_size"], Some(if roberta { 50265 } else { 30522 }))?;
    let max_pos = cfg.size(&["max_position_embeddings"], Some(512))?;
    let token_types = cfg.uint("type_vocab_size")?.unwrap_or(2);
    let ln = Norm::layer(hidden, true);
    let activation = cfg.string("hidden_act").unwrap_or("gelu").to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind: AttentionKind::Standard {
                    heads,
                    kv_heads: heads,
                    head_dim,
                },
                bias: ProjBias::all(true),
                qk_norm: None,
                sliding_window: None,
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp: Mlp::Dense(dense(ffn, false, true, &activation)),
            norms: vec![(NormSlot::PostAttention, ln), (NormSlot::PostMlp, ln)],
            parallel_residual: false,
        });
    }
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(max_pos);
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Learned { rows: max_pos };
    spec.embedding.token_types = token_types;
    spec.embedding.norm = Some(ln);
    spec.head = Head::MaskedLm {
        tied: cfg.boolean("tie_word_embeddings", true)?,
    };
    Ok(spec)
}

/// T5 (`modeling_t5.py`): encoder and decoder stacks of RMS-style T5LayerNorm blocks without
/// biases, a relative-position bias table in the first block of each stack, cross-attention in
/// the decoder, relu or gated-gelu MLP, a shared embedding, and an lm_head that is tied unless
/// `tie_word_embeddings` is false (T5 v1.1, Flan-T5).
fn t5(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("t5", "T5ForConditionalGeneration", Naming::T5);
    let d_model = cfg.size(&["d_model"], Some(512))?;
    let d_kv = cfg.size(&["d_kv"], Some(64))?;
    let d_ff = cfg.size(&["d_ff"], Some(2048))?;
    let enc_layers = cfg.layer_count(&["num_layers"], 6)?;
    let dec_layers = cfg.layer_count(&["num_decoder_layers"], enc_layers)?;
    let heads = cfg.size(&["num_heads"], Some(8))?;
    let buckets = cfg.size(&["relative_attention_num_buckets"], Some(32))?;
    let vocab = cfg.size(&["vocab_size"], Some(32128))?;
    let proj = cfg.string("feed_forward_proj").unwrap_or("relu");
    let gated = proj.starts_with("gated-");
    let activation = proj.trim_start_matches("gated-").to_string();
    let ln = Norm::rms(d_model);
    let attention = |first: bool| Attention {
        kind: AttentionKind::Standard {
            heads,
            kv_heads: heads,
            head_dim: d_kv,
        },
        bias: ProjBias::all(false),
        qk_norm: None,
        sliding_window: None,
        relative_bias_buckets: first.then_some(buckets),
    };
    let mut encoder = Stack {
        layers: Vec::new(),
        final_norm: Some(ln),
    };
    for i in 0..enc_layers {
        encoder.layers.push(Layer {
            attention: attention(i == 0),
            cross_attention: None,
            mlp: Mlp::Dense(dense(d_ff, gated, false, &activation)),
            norms: vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
            parallel_residual: false,
        });
    }
    for i in 0..dec_layers {
        spec.decoder.layers.push(Layer {
            attention: attention(i == 0),
            cross_attention: Some(attention(false)),
            mlp: Mlp::Dense(dense(d_ff, gated, false, &activation)),
            norms: vec![
                (NormSlot::PreAttention, ln),
                (NormSlot::PreCrossAttention, ln),
                (NormSlot::PreMlp, ln),
            ],
            parallel_residual: false,
        });
    }
    spec.decoder.final_norm = Some(ln);
    spec.encoder = Some(encoder);
    spec.vocab_size = vocab;
    spec.hidden_size = d_model;
    spec.max_position_embeddings = cfg.uint("n_positions")?;
    spec.embedding.dim = d_model;
    spec.embedding.positions = Positions::Relative { buckets };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", true)?,
        bias: false,
    };
    Ok(spec)
}
