//! Errors of the core library. Every message names what was wrong, in one line.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// A number that would not fit in 64 bits.
    #[error("{what} overflows 64 bits; check the sizes given")]
    Overflow { what: String },
    /// A tensor whose shape and dtype do not make a whole number of bytes or blocks.
    #[error("tensor '{name}': {reason}")]
    InvalidTensor { name: String, reason: String },
    /// A field of the model or job with a value that makes no sense.
    #[error("{field}: {reason}")]
    InvalidField { field: String, reason: String },
    /// A name that is not in a catalog.
    #[error("unknown {kind} '{name}'{hint}")]
    Unknown {
        kind: &'static str,
        name: String,
        hint: String,
    },
}

impl CoreError {
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        CoreError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
