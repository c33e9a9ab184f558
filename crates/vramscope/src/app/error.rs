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
    super::jobtext::JobError,
    String,
    &str,
);

/// `s` with every character a terminal would act on written as Rust escapes it (`\u{1b}`):
/// the C0 and C1 controls and DEL (ECMA-48: ESC starts a sequence that may retitle or clear
/// the terminal), and the bidirectional overrides and isolates (Unicode UAX #9; "Trojan
/// Source", CVE-2021-42574) that reorder what is shown. Errors and warnings quote the input's
/// own bytes (a GGUF key, a job value), so they pass through here before they are printed.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    let acts =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(acts) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if acts(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::AppError;

    /// A boxed AppError keeps its exit code; any other error becomes bad input on one line.
    #[test]
    fn boxed_errors_keep_their_code_and_one_line() {
        let inner = AppError {
            message: "x".into(),
            exit_code: 3,
        };
        let boxed: Box<dyn std::error::Error> = Box::new(inner.clone());
        assert_eq!(AppError::from(boxed), inner);
        let boxed: Box<dyn std::error::Error> = "two\nlines".into();
        assert_eq!(
            AppError::from(boxed),
            AppError {
                message: "two lines".into(),
                exit_code: 2
            }
        );
    }
}

#[cfg(test)]
mod escape_tests {
    use super::escape_controls;

    /// The issue's own sequence (OSC 0 retitle ended by BEL, then CSI 2J clear) and a
    /// right-to-left override come out as text; printable input, accents included, is kept.
    #[test]
    fn controls_and_bidi_overrides_are_escaped() {
        let hostile = "key \u{1b}]0;owned\u{7}\u{1b}[2J tail\u{202e}x\u{9b}";
        assert_eq!(
            escape_controls(hostile),
            "key \\u{1b}]0;owned\\u{7}\\u{1b}[2J tail\\u{202e}x\\u{9b}"
        );
        assert!(matches!(
            escape_controls("café: 'q_proj' [1, 2]"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(escape_controls("a\tb\r\n"), "a\\u{9}b\\u{d}\\u{a}");
    }
}
