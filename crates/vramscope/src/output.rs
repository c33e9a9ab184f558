//! Writing to the terminal: colour choice, styles, and a broken pipe treated as a normal end
//! (`vramscope models | head` must not panic).

use crate::cli::ColorChoice;
use anstyle::{AnsiColor, Style};
use std::io::Write;

/// Sets this process's colour choice (each `cli_main` call sets its own).
pub fn init_color(choice: ColorChoice) {
    let mode = match choice {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    };
    mode.write_global();
}

/// Whether stdout gets ANSI styles (honours `--color`, `NO_COLOR`, `CLICOLOR` and non-TTYs).
pub fn color_enabled() -> bool {
    !matches!(
        anstream::AutoStream::choice(&std::io::stdout()),
        anstream::ColorChoice::Never
    )
}

pub const BOLD: Style = Style::new().bold();
pub const DIM: Style = Style::new().dimmed();
pub const HEADER: Style = Style::new()
    .bold()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));
pub const WARN: Style = Style::new()
    .bold()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)));
pub const ERROR: Style = Style::new()
    .bold()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)));

/// `text` in `style` when colours are on.
pub fn paint(style: Style, text: &str) -> String {
    if color_enabled() {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// Writes all of `text` to stdout. A closed pipe comes back as a `BrokenPipe` error, which
/// `cli_main` turns into a quiet exit 0 (`vramscope models | head`).
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|_| out.flush())
}

/// Whether a write failed only because the reader of stdout went away.
pub fn closed_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// Prints a value as pretty JSON followed by a newline (`app::to_json`, what every `--json`
/// prints).
pub fn print_json<T: serde::Serialize>(value: &T) -> std::io::Result<()> {
    print(&crate::app::to_json(value).map_err(std::io::Error::other)?)
}

/// `s` with every character a terminal would act on written as Rust escapes it (`\u{1b}`):
/// the C0 and C1 controls and DEL (ECMA-48: ESC starts a sequence that may retitle or clear
/// the terminal), and the bidirectional overrides and isolates (Unicode UAX #9; "Trojan
/// Source", CVE-2021-42574) that reorder what is shown. Errors and warnings quote the input's
/// own bytes (a GGUF key, a job value), so they pass through here before they are printed.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    let acts = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
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

/// `error: <message>` on stderr, one line, its control characters escaped.
pub fn eprint_error(message: &str) -> std::io::Result<()> {
    let message = escape_controls(message);
    let stderr_color = !matches!(
        anstream::AutoStream::choice(&std::io::stderr()),
        anstream::ColorChoice::Never
    );
    let prefix = if stderr_color {
        format!("{ERROR}error{ERROR:#}")
    } else {
        "error".to_string()
    };
    writeln!(std::io::stderr(), "{prefix}: {message}")
}

/// A warning line for human output (its control characters escaped).
pub fn warning_line(message: &str) -> String {
    let message = escape_controls(message);
    format!("{}: {message}\n", paint(WARN, "warning"))
}

#[cfg(test)]
mod tests {
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
