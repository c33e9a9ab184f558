//! Writing to the terminal: colour choice, styles, and a broken pipe treated as a normal end
//! (`vramscope models | head` must not panic).

use anstyle::{AnsiColor, Style};
use clap::ValueEnum;
use std::io::Write;

/// `--color`: when the terminal output is painted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

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

/// `error: <message>` on stderr, one line, its control characters escaped.
pub fn eprint_error(message: &str) -> std::io::Result<()> {
    let message = crate::app::escape_controls(message);
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
    let message = crate::app::escape_controls(message);
    format!("{}: {message}\n", paint(WARN, "warning"))
}

/// A borderless table with this header row (every terminal table of the commands).
pub fn table(header: impl Into<comfy_table::Row>) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING);
    t.set_header(header);
    t
}
