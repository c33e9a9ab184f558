//! A job file (`--job FILE`, JSON or TOML) and a job's text (the server's body), read into the
//! contract's job; a JSON job's `"from"` entries laid under it (`from::parse_json_job`).

use super::error::JobError;
use std::path::Path;
use vramscope_core::job::Job;

/// Job files are a few hundred bytes; anything beyond this is not a job (and is not read).
pub(crate) const MAX_JOB_FILE_BYTES: u64 = 16 << 20;

/// Reads a job file: JSON or TOML by extension, otherwise JSON then TOML.
pub fn read_job_file(path: &Path) -> Result<Job, JobError> {
    let shown = path.display().to_string();
    let err = |m: String| JobError(format!("{shown}: {m}"));
    let text = vramscope_formats::files::read_regular_text(path, MAX_JOB_FILE_BYTES, "a job file")
        .map_err(|e| err(e.to_string()))?;
    parse_job_text(&text, path.extension().and_then(|e| e.to_str()))
        .map_err(|m| err(m.replace('\n', " ")))
}

/// Parses a job from text; `ext` picks the format (`json`, `toml`), else JSON is tried first.
pub fn parse_job_text(text: &str, ext: Option<&str>) -> Result<Job, String> {
    let json = super::from::parse_json_job;
    let toml = |t: &str| {
        toml::from_str::<Job>(t).map_err(|e| format!("invalid job: {}", one_line(&e.to_string())))
    };
    match ext.map(str::to_ascii_lowercase).as_deref() {
        Some("json") => json(text),
        Some("toml") => toml(text),
        _ => {
            // A JSON job starts with `{`; anything else is read as TOML (and its error shown).
            if text.trim_start().starts_with('{') {
                json(text)
            } else {
                json(text).or_else(|_| toml(text))
            }
        }
    }
}

/// toml's messages span several lines (a source excerpt); keep the first and the last.
fn one_line(msg: &str) -> String {
    let lines: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with('|') && !l.chars().all(|c| c == '^' || c == ' ')
        })
        .collect();
    match lines.as_slice() {
        [] => msg.trim().to_string(),
        [one] => one.to_string(),
        [first, .., last] => format!("{first}: {last}"),
    }
}
