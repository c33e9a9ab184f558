//! The application layer's one error: the CLI's one-line message and its exit code.

use std::fmt;

/// Why a command could not answer: `message` is the one line the CLI prints after `error: `
/// (it names the field or file and what was wrong), `exit_code` what the CLI exits with (2: bad
/// input or usage, as the contract says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppError {
    pub message: String,
    pub exit_code: i32,
}

impl AppError {
    /// Bad input (exit 2), with the message flattened to one line.
    pub fn bad(message: impl fmt::Display) -> Self {
        AppError {
            message: message.to_string().replace('\n', " "),
            exit_code: 2,
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AppError {}

/// Every reader's and the estimator's errors are bad input: their text is the message.
impl From<Box<dyn std::error::Error>> for AppError {
    fn from(e: Box<dyn std::error::Error>) -> Self {
        match e.downcast::<AppError>() {
            Ok(app) => *app,
            Err(e) => AppError::bad(e),
        }
    }
}

macro_rules! bad_input_from {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for AppError {
            fn from(e: $t) -> Self {
                AppError::bad(e)
            }
        })*
    };
}

bad_input_from!(
    vramscope_core::CoreError,
    vramscope_formats::FormatError,
    vramscope_measure::MeasureError,
    crate::commands::jobargs::JobError,
    String,
    &str,
);
