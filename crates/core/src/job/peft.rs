//! The job's `peft`: LoRA / QLoRA adapters.

use super::fields::{count, text};
use super::PeftMethod;
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
}

pub(super) fn parse_peft(v: &Value) -> Result<Option<Peft>, CoreError> {
    let obj = match v {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        other => {
            return Err(CoreError::field(
                "peft",
                format!("must be null or an object (got {other})"),
            ))
        }
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
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_str().map(str::to_string).ok_or_else(|| {
                    CoreError::field(
                        "peft.targets",
                        format!("entries must be module names (got {t})"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(CoreError::field(
                "peft.targets",
                format!("must be a list (got {other})"),
            ))
        }
    };
    if targets.is_empty() {
        return Err(CoreError::field(
            "peft.targets",
            "must name at least one module",
        ));
    }
    Ok(Some(Peft {
        method,
        rank,
        alpha,
        targets,
    }))
}
