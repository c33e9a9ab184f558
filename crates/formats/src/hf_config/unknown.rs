//! A `model_type` vramscope has not learnt is refused unless the user asks for the Llama-style
//! reading (`--assume-llama`): its count depends on its transformers class's defaults and its
//! modelling code (SmolLM3's tied head by default, OLMo-2's q/k norms over whole projections:
//! each a silently wrong count when read as Llama). The refusal names what would change the
//! count: experts, vision/text sub-configs, hybrid layer kinds, state-space or linear-attention
//! fields and quantization methods it cannot size (gpt-oss-20b read as a dense Llama counts
//! 2.4 B parameters instead of about 21 B), else the count-changing keys the config leaves to
//! its class defaults.

use super::quantization_format;
use crate::error::FormatError;
use serde_json::{Map, Value};

/// How to read a config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Read an unknown family as a Llama-style decoder even when its config carries fields that
    /// change the shapes (`--assume-llama`, job `assume_llama`).
    pub assume_llama: bool,
}

/// Keys whose presence (with a non-null, non-zero value) means experts.
const EXPERT_KEYS: &[&str] = &[
    "num_local_experts",
    "n_routed_experts",
    "num_experts",
    "moe_num_experts",
    "n_shared_experts",
    "num_shared_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "expert_layer_period",
];

/// Sub-configs of multimodal and composite models.
const SUBCONFIG_KEYS: &[&str] = &[
    "vision_config",
    "text_config",
    "audio_config",
    "speech_config",
    "vision_tower",
    "mm_vision_tower",
];

/// State-space and linear-attention fields (Mamba, Jamba, Qwen3-Next, RWKV-style configs).
const RECURRENT_KEYS: &[&str] = &[
    "state_size",
    "ssm_cfg",
    "d_state",
    "conv_kernel",
    "time_step_rank",
    "attn_layer_period",
    "attn_layer_offset",
    "full_attention_interval",
    "hybrid_override_pattern",
];

/// Prefixes of state-space and linear-attention fields.
const RECURRENT_PREFIXES: &[&str] = &["ssm_", "mamba_", "linear_"];

/// Layer kinds that are ordinary softmax attention.
const ATTENTION_LAYER_KINDS: &[&str] = &[
    "full_attention",
    "sliding_attention",
    "attention",
    "global",
    "local",
];

fn meaningful(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Bool(true) => true,
    }
}

/// The fields of one config object that change the shapes a Llama reading assumes.
fn shape_fields_of(obj: &Map<String, Value>, prefix: &str, out: &mut Vec<String>) {
    let mut push = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for k in EXPERT_KEYS
        .iter()
        .chain(SUBCONFIG_KEYS)
        .chain(RECURRENT_KEYS)
    {
        if obj.get(*k).is_some_and(meaningful) {
            push(format!("{prefix}{k}"));
        }
    }
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    for k in keys {
        if RECURRENT_PREFIXES.iter().any(|p| k.starts_with(p)) && meaningful(&obj[k]) {
            push(format!("{prefix}{k}"));
        }
    }
    // `layer_types` (Qwen3-Next, Gemma 3, ...) or `layers_block_type` (Zamba2, Nemotron-H).
    for key in ["layer_types", "layers_block_type"] {
        let Some(kinds) = obj.get(key).and_then(Value::as_array) else {
            continue;
        };
        let mut odd: Vec<&str> = kinds
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| !ATTENTION_LAYER_KINDS.contains(k))
            .collect();
        odd.sort_unstable();
        odd.dedup();
        if !odd.is_empty() {
            push(format!("{prefix}{key} ({})", odd.join(", ")));
        }
    }
    if let Some(q) = obj.get("quantization_config").and_then(Value::as_object) {
        if quantization_format(q).is_none() {
            let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("?");
            push(format!("{prefix}quantization_config ({method})"));
        }
    }
}

/// Every shape-changing field of a config, its `text_config` included.
pub(crate) fn shape_fields(top: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    shape_fields_of(top, "", &mut out);
    if let Some(text) = top.get("text_config").and_then(Value::as_object) {
        shape_fields_of(text, "text_config.", &mut out);
    }
    out
}

/// The fields a Llama-style reading of an unknown family decides for the config when it leaves
/// them out — each changes the parameter count, and each family's transformers class picks its
/// own default (SmolLM3's `tie_word_embeddings` is True, Qwen3's `head_dim` 128, ...).
const DEFAULTED_KEYS: &[&str] = &[
    "tie_word_embeddings",
    "head_dim",
    "attention_bias",
    "mlp_bias",
    "num_key_value_heads",
];

/// What no config key says but the modelling code decides, and the count with it.
const MODELLING_CHOICES: &str = "q/k norms, norm kind and placement, MLP gating";

/// The count-changing keys this config leaves to its class defaults.
fn defaulted_keys(top: &Map<String, Value>) -> Vec<&'static str> {
    let obj = top
        .get("text_config")
        .and_then(Value::as_object)
        .unwrap_or(top);
    DEFAULTED_KEYS
        .iter()
        .copied()
        .filter(|k| obj.get(*k).is_none_or(Value::is_null))
        .collect()
}

/// Refuses a `model_type` vramscope has no row for (the count depends on its transformers class
/// defaults and modelling code), naming the fields that would change the count — those that
/// change the shapes a Llama reading assumes when the config has any, else the keys it leaves
/// to the class's defaults and the modelling code's choices — unless the options ask for the
/// Llama reading.
pub(crate) fn check_unknown(
    top: &Map<String, Value>,
    model_type: &str,
    origin: &str,
    opts: ReadOptions,
) -> Result<(), FormatError> {
    if opts.assume_llama {
        return Ok(());
    }
    let shown = if model_type.is_empty() {
        "(none)"
    } else {
        model_type
    };
    let fields = shape_fields(top);
    let what = if fields.is_empty() {
        let left = defaulted_keys(top);
        let left = if left.is_empty() {
            String::new()
        } else {
            format!("the config leaves {} to them; ", left.join(", "))
        };
        format!(
            "its parameter count depends on its transformers class's defaults and modelling \
             code, which vramscope has no row for ({left}{MODELLING_CHOICES} are the \
             modelling code's)"
        )
    } else {
        format!(
            "its config has fields that change the shapes a Llama-style reading assumes: {}",
            fields.join(", ")
        )
    };
    Err(FormatError::Unsupported {
        path: origin.to_string(),
        reason: format!(
            "model_type '{shown}' is not known to vramscope and {what}; refusing to guess ({})",
            override_hint(top)
        ),
    })
}

/// What `--assume-llama` would do: read a multimodal wrapper's `text_config` natively when its
/// family is known, else read the config as a Llama-style decoder.
fn override_hint(top: &Map<String, Value>) -> String {
    let inner = top
        .get("text_config")
        .and_then(Value::as_object)
        .and_then(|t| t.get("model_type"))
        .and_then(Value::as_str)
        .filter(|t| super::SUPPORTED_TYPES.contains(t));
    match inner {
        Some(t) => format!(
            "its text_config ('{t}') is read natively: pass --assume-llama, or \
             \"assume_llama\": true in a job, to count that language model alone, without the \
             vision tower and projector"
        ),
        None => "pass --assume-llama, or \"assume_llama\": true in a job, to read it as a \
                 Llama-style decoder anyway"
            .to_string(),
    }
}
