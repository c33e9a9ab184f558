//! `analyze`: a PyTorch memory record (snapshot pickle, profiler timeline, Chrome trace) or an
//! engine log / OOM message in, the measured breakdown out (`vramscope_measure`).

use super::AppError;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use vramscope_measure::logs::Measured;
use vramscope_measure::Analysis;

/// `analyze`'s input: the record's or log's path.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalyzeInput {
    pub path: PathBuf,
}

/// What `analyze FILE --json` prints: a record's `{"per_gpu", "timeline", ...}` or a log's
/// figures (`"source"` says which). Errors name the file.
pub fn analyze(input: &AnalyzeInput) -> Result<Measured, AppError> {
    analyze_path(&input.path)
}

/// `analyze` of the file at `path`; pickles are streamed, never held whole.
pub fn analyze_path(path: &Path) -> Result<Measured, AppError> {
    read_path(path).map(|m| completed(m, None))
}

/// A record or a log as read, before a vLLM log's KV count is sized (`log_kv`).
pub(super) fn read_path(path: &Path) -> Result<Measured, AppError> {
    vramscope_measure::logs::analyze_any_file(path)
        .map_err(|e| AppError::bad(format!("{}: {e}", path.display())))
}

/// A log with what the job (or its own model line) lets vramscope size: a vLLM KV pool stated
/// only as a count, in bytes (`log_kv`).
pub(super) fn completed(m: Measured, job: Option<&super::job::Prepared>) -> Measured {
    match m {
        Measured::Log(mut l) => {
            super::log_kv::complete(&mut l, job);
            Measured::Log(l)
        }
        other => other,
    }
}

/// `analyze` of a record or log already in memory (an upload, stdin, a Python `bytes`). `name`
/// is what errors call it (a file name; `measurement` when none is given).
pub fn analyze_bytes(bytes: &[u8], name: Option<&str>) -> Result<Measured, AppError> {
    read_bytes(bytes, name).map(|m| completed(m, None))
}

/// `analyze` of a stream (stdin), held in memory only as far as it must be
/// (`vramscope_measure::logs::analyze_any_stream`); `name` as for `analyze_bytes`.
pub fn analyze_stream<R: std::io::Read>(r: R, name: &str) -> Result<Measured, AppError> {
    vramscope_measure::logs::analyze_any_stream(r)
        .map(|m| completed(m, None))
        .map_err(|e| AppError::bad(format!("{name}: {e}")))
}

/// `read_path` of bytes in memory.
pub(super) fn read_bytes(bytes: &[u8], name: Option<&str>) -> Result<Measured, AppError> {
    vramscope_measure::logs::analyze_any_bytes(bytes)
        .map_err(|e| AppError::bad(format!("{}: {e}", name.unwrap_or(UNNAMED))))
}

/// What errors call a measurement that came without a name.
const UNNAMED: &str = "measurement";

/// The per-category record `compare` and `fit --measured` need (a log states only totals).
pub fn record(path: &Path) -> Result<Analysis, AppError> {
    only_record(analyze_path(path)?, &path.display().to_string())
}

/// `record` of bytes in memory; `name` as for `analyze_bytes`.
pub fn record_bytes(bytes: &[u8], name: Option<&str>) -> Result<Analysis, AppError> {
    only_record(analyze_bytes(bytes, name)?, name.unwrap_or(UNNAMED))
}

fn only_record(m: Measured, name: &str) -> Result<Analysis, AppError> {
    match m {
        Measured::Record(a) => Ok(*a),
        Measured::Log(l) => Err(AppError::bad(format!(
            "{name}: a {} states totals, not the per-category record this needs (a snapshot, \
             profiler timeline or trace); `vramscope analyze` reads it",
            l.source.name()
        ))),
    }
}
