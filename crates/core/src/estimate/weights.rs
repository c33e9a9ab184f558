//! Storage of the (frozen) weights in the job's `weights` format. Plain storage here; the
//! quantized formats are in [`super::quant`].

use crate::error::CoreError;
use crate::inventory::Tensor;

/// The job's weight storage format.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightsFormat {
    /// As the precision says (no quantization).
    Plain,
}

impl WeightsFormat {
    pub fn is_none(&self) -> bool {
        matches!(self, WeightsFormat::Plain)
    }
}

pub fn parse(s: &str) -> Result<WeightsFormat, CoreError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" | "" => Ok(WeightsFormat::Plain),
        other => Err(CoreError::field(
            "weights",
            format!("'{other}' is not supported yet (supported: none)"),
        )),
    }
}

/// Bytes of one tensor as stored, rounded as the allocator rounds.
pub fn stored_bytes(_f: &WeightsFormat, t: &Tensor, width: u64) -> Result<u64, CoreError> {
    Ok(super::round_alloc(t.elements().saturating_mul(width)))
}
