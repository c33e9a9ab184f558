//! The job's `peft`: LoRA / QLoRA adapters.

use super::enums::{AdapterDtype, PeftMethod};
use super::fields::{count, object, text};
use crate::error::CoreError;
use serde::Serialize;
use serde_json::Value;

/// LoRA / QLoRA settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Peft {
    pub method: PeftMethod,
    pub rank: u64,
    pub alpha: f64,
    pub targets: Vec<String>,
    /// The adapters' dtype; absent from the report's echo when it is the default (fp32).
    #[serde(skip_serializing_if = "AdapterDtype::is_default")]
    pub adapter_dtype: AdapterDtype,
    /// The dropout before `lora_A` (PEFT's `lora_dropout`, torchtune's `lora_dropout`); absent
    /// from the report's echo when it is the default, [`DEFAULT_DROPOUT`].
    #[serde(skip_serializing_if = "is_default_dropout")]
    pub dropout: f64,
    /// Modules trained in full beside the adapters (PEFT `modules_to_save`, axolotl
    /// `lora_modules_to_save`, e.g. `["embed_tokens", "lm_head"]`), matched by module name as
    /// `targets` are; absent from the echo when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modules_to_save: Vec<String>,
}

/// The LoRA dropout assumed when the job does not say: 0.05, what the common recipes set
/// (axolotl's and LLaMA-Factory's LoRA examples, the QLoRA paper's 7B–13B runs). With a
/// dropout above 0 PEFT's `nn.Dropout` makes a copy of each adapted module's input (and a
/// 1-byte mask) that `lora_A` saves; at 0 PEFT and torchtune use `nn.Identity` and `lora_A`
/// saves the input itself.
pub const DEFAULT_DROPOUT: f64 = 0.05;

/// Every linear module of a Llama-style layer, attention and gated MLP: what PEFT's
/// `target_modules="all-linear"` (`tuners/tuners_utils.py`, `_maybe_include_all_linear_layers`)
/// and axolotl's `lora_target_linear: true` reach in it, `lm_head` left out.
pub const LLAMA_LINEARS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

fn is_default_dropout(p: &f64) -> bool {
    *p == DEFAULT_DROPOUT
}

/// `peft.dropout`: a probability in [0, 1).
fn parse_dropout(v: Option<&Value>) -> Result<f64, CoreError> {
    let field = "peft.dropout";
    match v {
        None | Some(Value::Null) => Ok(DEFAULT_DROPOUT),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(p) if (0.0..1.0).contains(&p) => Ok(p),
            _ => Err(CoreError::field(
                field,
                format!("must be a probability from 0 up to (not including) 1 (got {n})"),
            )),
        },
        Some(other) => Err(CoreError::field(
            field,
            format!("must be a number from 0 up to 1 (got {other})"),
        )),
    }
}

impl AdapterDtype {
    /// Bytes of one adapter element (and of its gradient).
    pub fn bytes(self) -> u64 {
        match self {
            AdapterDtype::Fp32 => 4,
            AdapterDtype::Bf16 | AdapterDtype::Fp16 => 2,
        }
    }

    fn is_default(&self) -> bool {
        *self == AdapterDtype::Fp32
    }

    /// Parses `peft.adapter_dtype`: the contract's spellings and PyTorch's names
    /// (`float32`, `bfloat16`, `float16`).
    fn parse_field(v: Option<&Value>) -> Result<Self, CoreError> {
        let field = "peft.adapter_dtype";
        match v {
            None | Some(Value::Null) => Ok(AdapterDtype::Fp32),
            Some(Value::String(s)) => {
                let t = s.trim().to_ascii_lowercase();
                let t = t.strip_prefix("torch.").unwrap_or(&t);
                let canonical = match t {
                    "float32" | "float" => "fp32",
                    "bfloat16" => "bf16",
                    "float16" | "half" => "fp16",
                    other => other,
                };
                if !AdapterDtype::ALL.iter().any(|d| d.as_str() == canonical) {
                    // The value quoted with escapes: the error stays one line.
                    return Err(CoreError::field(
                        field,
                        format!("{s:?} is not one of fp32, bf16, fp16"),
                    ));
                }
                AdapterDtype::parse(field, canonical)
            }
            Some(other) => Err(CoreError::field(
                field,
                format!("must be one of fp32, bf16, fp16 (got {other})"),
            )),
        }
    }
}

pub(super) fn parse_peft(v: &Value) -> Result<Option<Peft>, CoreError> {
    let Some(obj) = object("peft", Some(v), "null or an object")? else {
        return Ok(None);
    };
    let method = match text("peft.method", obj.get("method"))? {
        Some(m) => PeftMethod::parse("peft.method", m)?,
        None => {
            return Err(CoreError::field(
                "peft.method",
                "is required (lora or qlora)",
            ))
        }
    };
    let rank = count("peft.rank", obj.get("rank"), 16, 1, 1 << 20)?;
    let alpha = obj
        .get("alpha")
        .and_then(Value::as_f64)
        .unwrap_or(2.0 * rank as f64);
    let targets = match obj.get("targets") {
        None | Some(Value::Null) => ["q_proj", "k_proj", "v_proj", "o_proj"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(v) => names("peft.targets", v)?,
    };
    if targets.is_empty() {
        return Err(CoreError::field(
            "peft.targets",
            "must name at least one module",
        ));
    }
    let adapter_dtype = AdapterDtype::parse_field(obj.get("adapter_dtype"))?;
    let dropout = parse_dropout(obj.get("dropout"))?;
    let modules_to_save = match obj.get("modules_to_save") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => names("peft.modules_to_save", v)?,
    };
    Ok(Some(Peft {
        method,
        rank,
        alpha,
        targets,
        adapter_dtype,
        dropout,
        modules_to_save,
    }))
}

/// A list of module names (`peft.targets`, `peft.modules_to_save`).
fn names(field: &str, v: &Value) -> Result<Vec<String>, CoreError> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|t| {
                t.as_str().map(str::to_string).ok_or_else(|| {
                    CoreError::field(field, format!("entries must be module names (got {t})"))
                })
            })
            .collect(),
        other => Err(CoreError::field(
            field,
            format!("must be a list (got {other})"),
        )),
    }
}
