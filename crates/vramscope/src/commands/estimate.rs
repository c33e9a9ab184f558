//! `vramscope estimate`: a job in, the memory report out (JSON, or a table and one picture).

use super::jobargs::{JobArgs, JobError};
use super::CmdResult;
use crate::app;
use crate::output::{color_enabled, print, print_json};
use std::path::Path;
use vramscope_core::report::Report;

/// Terminal width used for the picture when `COLUMNS` does not say otherwise.
const DEFAULT_BAR_WIDTH: usize = 72;

/// Writes a picture or page, naming the file when that fails.
fn write_file(path: &Path, text: &str) -> Result<(), JobError> {
    std::fs::write(path, text).map_err(|e| JobError(format!("{}: {e}", path.display())))
}

/// Bar width for this terminal: 72 cells, fewer when `COLUMNS` is narrower.
fn bar_width() -> usize {
    let cols = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .unwrap_or(80);
    DEFAULT_BAR_WIDTH.min(cols.saturating_sub(8)).max(10)
}

/// What `estimate` prints and writes.
pub struct Outputs<'a> {
    pub json: bool,
    pub require_fit: bool,
    pub advise: bool,
    pub svg: Option<&'a Path>,
    pub html: Option<&'a Path>,
}

pub fn run(s: &app::Session, args: &JobArgs, out: Outputs) -> CmdResult {
    let job = args.to_job()?;
    // The model is loaded once: the report, the advice and the what-if rows all come from it.
    let p = app::job::prepare(s, &job)?;
    let report = p.report_with_advice(out.advise)?;
    if out.require_fit && report.job.gpu.is_none() {
        return Err(Box::new(JobError(
            "--require-fit: needs a GPU to fit (give --gpu ID or \"gpu\" in the job file)".into(),
        )));
    }
    let rows = if out.json && out.svg.is_none() && out.html.is_none() {
        Vec::new()
    } else {
        p.what_if()?
    };
    if let Some(path) = out.svg {
        write_file(path, &crate::render::svg::render_svg(&report, &rows))?;
    }
    if let Some(path) = out.html {
        write_file(path, &crate::render::html::render_html(&report, &rows))?;
    }
    if out.json {
        print_json(&report)?;
    } else {
        print(&human(&report, &rows))?;
    }
    let fits = app::verdict(&report).is_some_and(|f| f.fits);
    Ok(if out.require_fit && !fits { 1 } else { 0 })
}

/// The table, the picture, the advice and the what-if table, for the terminal.
fn human(report: &Report, rows: &[vramscope_core::fit::WhatIf]) -> String {
    let mut text = source_line(report);
    text.push_str(&crate::render::terminal::render_estimate(
        report,
        bar_width(),
        color_enabled(),
    ));
    text.push_str(&crate::render::whatif::render_advice(report));
    text.push_str(&crate::render::whatif::render_what_if(report, rows));
    text
}

/// `model: Qwen/Qwen3-8B@<commit> via the Hub` for a model that came from the Hub or the Hugging
/// Face cache (a preset or a path the user named needs no such line).
fn source_line(report: &Report) -> String {
    let Some(src) = report
        .model
        .read_from
        .origin
        .as_ref()
        .and_then(|v| serde_json::from_value::<SourceLine>(v.clone()).ok())
    else {
        return String::new();
    };
    if !matches!(src.kind.as_str(), "hub" | "hf-cache") {
        return String::new();
    }
    let s = vramscope_formats::model_source::Source {
        kind: src.kind,
        repo: src.repo,
        commit: src.commit,
        ..Default::default()
    };
    format!("model: {}\n", s.describe())
}

#[derive(serde::Deserialize)]
struct SourceLine {
    kind: String,
    repo: Option<String>,
    commit: Option<String>,
}
