//! Errors of the readers. Each names the file (or field) and what was wrong, in one line, so the
//! CLI can print it as is and exit 2.

use thiserror::Error;
use vramscope_core::CoreError;

#[derive(Debug, Error)]
pub enum FormatError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file's bytes do not follow its format.
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
    /// A config.json field is missing or has a value that makes no sense.
    #[error("{path}: field '{field}': {reason}")]
    Field {
        path: String,
        field: String,
        reason: String,
    },
    /// The model family is not supported.
    #[error("{path}: {reason}")]
    Unsupported { path: String, reason: String },
    /// Fetching a model from elsewhere (the Hugging Face Hub or its cache) failed; the message
    /// is the whole line.
    #[error("{0}")]
    Remote(String),
    /// The Hub could not be asked at all (no network, a timeout, `HF_HUB_OFFLINE=1` with the
    /// model in no cache); the message is the whole line. Callers may fall back to what is known
    /// offline.
    #[error("{0}")]
    Unreachable(String),
    /// A size computation failed (overflow, partial block).
    #[error("{path}: {source}")]
    Core {
        path: String,
        #[source]
        source: CoreError,
    },
}

impl FormatError {
    pub fn malformed(path: impl Into<String>, reason: impl Into<String>) -> Self {
        FormatError::Malformed {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, FormatError>;
