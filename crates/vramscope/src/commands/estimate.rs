//! `vramscope estimate`: a job in, the memory report out (JSON, or a table and one picture).

use super::jobargs::{JobArgs, JobError};
use super::CmdResult;
use crate::output::{color_enabled, print, print_json};
use std::path::Path;
use vramscope_core::estimate::ModelInput;
use vramscope_core::job::{Job, ResolvedJob};
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model_with;
use vramscope_formats::FormatError;

/// Terminal width used for the picture when `COLUMNS` does not say otherwise.
const DEFAULT_BAR_WIDTH: usize = 72;

/// Runs a job end to end: load its model, resolve its fields, estimate. The model reader's
/// warnings come first in the report's warnings. This is what `estimate --json` prints and what
/// `validate` scores, so both read the same numbers.
pub fn estimate_job(job: &Job) -> Result<Report, Box<dyn std::error::Error>> {
    let p = prepare(job)?;
    let (model, resolved, model_warnings) = (p.model, p.resolved, p.warnings);
    let mut report = vramscope_core::estimate::estimate(&model, &resolved)?;
    report.model.source = Some(p.source.kind.clone());
    report.model.origin = serde_json::to_value(&p.source).ok();
    if !model_warnings.is_empty() {
        let rest = std::mem::take(&mut report.warnings);
        report.warnings = model_warnings;
        for w in rest {
            if !report.warnings.contains(&w) {
                report.warnings.push(w);
            }
        }
    }
    Ok(report)
}

/// `estimate_job` plus the advice (`vramscope_core::advice`): searched when the job does not
/// fit its GPU, or always with `advise`. What `estimate --json` prints and `/api/estimate`
/// answers.
pub fn estimate_with_advice(job: &Job, advise: bool) -> Result<Report, Box<dyn std::error::Error>> {
    let mut report = estimate_job(job)?;
    let fits = vramscope_core::advice::fits(&report);
    if advise || fits == Some(false) {
        let (model, resolved, _) = prepare_job(job)?;
        report.advice = Some(vramscope_core::advice::advise(&model, &resolved)?);
    }
    Ok(report)
}

/// Loads a job's model and resolves its fields: the estimator's inputs, plus the model
/// reader's warnings.
pub fn prepare_job(
    job: &Job,
) -> Result<(ModelInput, ResolvedJob, Vec<String>), Box<dyn std::error::Error>> {
    let p = prepare(job)?;
    Ok((p.model, p.resolved, p.warnings))
}

/// A job's estimator inputs, the model reader's warnings and where the model came from.
pub struct Prepared {
    pub model: ModelInput,
    pub resolved: ResolvedJob,
    pub warnings: Vec<String>,
    pub source: vramscope_formats::model_source::Source,
}

/// Loads a job's model (through the one MODEL resolution: local, preset, HF cache, Hub) and
/// resolves its fields. A PEFT adapter repo fills the job's `peft` when the job has none.
pub fn prepare(job: &Job) -> Result<Prepared, Box<dyn std::error::Error>> {
    // Check the job's own fields before the model, so `--batch 0` is named even without one.
    job.resolve(None)?;
    let model =
        match &job.model {
            None | Some(serde_json::Value::Null) => return Err(Box::new(JobError(
                "model: required: give MODEL (a preset id or a path) or a job file with \"model\""
                    .into(),
            ))),
            Some(m) => m,
        };
    let opts = crate::models::options(job.assume_llama.unwrap_or(false));
    let adapter = std::cell::RefCell::new(None);
    let by_name = |s: &str| -> Result<_, FormatError> {
        let r = crate::models::resolve(s, &opts)?;
        *adapter.borrow_mut() = r.peft;
        Ok(r.model)
    };
    let loaded = load_job_model_with(model, opts.read, &by_name)?;
    let max_seq = loaded.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved: ResolvedJob = match adapter.into_inner() {
        Some(peft) if job.peft.as_ref().is_none_or(serde_json::Value::is_null) => {
            let mut with_peft = job.clone();
            with_peft.peft = Some(peft);
            with_peft.resolve(max_seq)?
        }
        _ => job.resolve(max_seq)?,
    };
    let warnings = loaded.warnings.clone();
    let source = loaded.source.clone();
    Ok(Prepared {
        model: loaded.into_input(),
        resolved,
        warnings,
        source,
    })
}

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

pub fn run(args: &JobArgs, out: Outputs) -> CmdResult {
    let Outputs {
        json,
        require_fit,
        advise,
        svg,
        html,
    } = out;
    let job = args.to_job()?;
    let report = estimate_with_advice(&job, advise)?;
    let fit = crate::render::fit_of(&report);
    if require_fit && report.job.gpu.is_none() {
        return Err(Box::new(JobError(
            "--require-fit: needs a GPU to fit (give --gpu ID or \"gpu\" in the job file)".into(),
        )));
    }
    if svg.is_some() || html.is_some() {
        let (model, resolved, _) = prepare_job(&job)?;
        let rows = vramscope_core::fit::what_if(&model, &resolved)?;
        if let Some(path) = svg {
            write_file(path, &crate::render::svg::render_svg(&report, &rows))?;
        }
        if let Some(path) = html {
            write_file(path, &crate::render::html::render_html(&report, &rows))?;
        }
    }
    if json {
        print_json(&report)?;
    } else {
        let mut text = source_line(&report);
        text.push_str(&crate::render::terminal::render_estimate(
            &report,
            bar_width(),
            color_enabled(),
        ));
        let (model, resolved, _) = prepare_job(&job)?;
        let rows = vramscope_core::fit::what_if(&model, &resolved)?;
        text.push_str(&crate::render::whatif::render_advice(&report));
        text.push_str(&crate::render::whatif::render_what_if(&report, &rows));
        print(&text)?;
    }
    if require_fit && !fit.as_ref().is_some_and(|f| f.fits) {
        return Ok(1);
    }
    Ok(0)
}

/// `model: Qwen/Qwen3-8B@<commit> via the Hub` for a model that came from the Hub or the Hugging
/// Face cache (a preset or a path the user named needs no such line).
fn source_line(report: &Report) -> String {
    let Some(src) = report
        .model
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
