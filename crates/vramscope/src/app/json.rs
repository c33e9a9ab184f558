//! The JSON façade for bindings (the Python package): a command's name and its input as JSON
//! in, its answer as the JSON the CLI prints out.

use super::{AppError, Session};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::PathBuf;
use vramscope_core::job::Job;

/// The commands `call_json` answers.
pub const COMMANDS: [&str; 10] = [
    "estimate", "fit", "plan", "inspect", "analyze", "compare", "models", "gpus", "validate",
    "picture",
];

/// A value as the CLI prints it with `--json` (`output::print_json`): pretty JSON, then a
/// newline.
pub fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, AppError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(AppError::bad)
}

/// Runs `command` on `input_json` and answers with exactly what the CLI prints for it with
/// `--json` (pretty JSON and a newline). The inputs:
///
/// | command | input |
/// |---|---|
/// | estimate | `{"job": JOB, "advise": bool?}` |
/// | fit | `{"job": JOB, "measured": PATH?}` (with `measured`: the calibrated fit) |
/// | plan | `{"job": JOB, "gpus": N?, "top": N?, "max_micro_batch": N?}` |
/// | inspect | `{"model": STRING, "assume_llama": bool?}` |
/// | analyze | `{"path": PATH}` |
/// | compare | `{"job": JOB, "path": PATH}` |
/// | models, gpus | `{}` |
/// | validate | `{"cases": PATH}` |
/// | picture | `{"report": REPORT}` → the SVG as a JSON string |
///
/// JOB is the contract's job object; its `model` is resolved as the CLI resolves MODEL (a
/// preset, a local path or a Hub id, honouring `HF_HUB_OFFLINE` and the other HF variables).
/// A `model` naming a diffusers pipeline (a directory or Hub repo with `model_index.json`)
/// makes JOB a diffusion job (docs/diffusion.md) for `estimate`, `fit` and `inspect`.
/// Bad input is an `AppError` with the CLI's message and exit code 2.
pub fn call_json(session: &Session, command: &str, input_json: &str) -> Result<String, AppError> {
    if let Some(answer) = pipeline_call(session, command, input_json)? {
        return Ok(answer);
    }
    match command {
        "estimate" => to_json(&super::estimate(session, &input(command, input_json)?)?),
        "fit" => fit(session, input(command, input_json)?),
        "plan" => to_json(&super::plan(session, &input(command, input_json)?)?),
        "inspect" => to_json(&super::inspect(session, &input(command, input_json)?)?),
        "analyze" => to_json(&super::analyze(&input(command, input_json)?)?),
        "compare" => to_json(&super::compare(session, &input(command, input_json)?)?),
        "models" => {
            input::<Empty>(command, input_json)?;
            to_json(&super::models()?)
        }
        "gpus" => {
            input::<Empty>(command, input_json)?;
            to_json(&super::gpus())
        }
        "validate" => to_json(&super::validate(session, &input(command, input_json)?)?),
        "picture" => to_json(&super::picture(session, &input(command, input_json)?)?),
        other => Err(AppError::bad(format!(
            "unknown command {other:?}: one of {}",
            COMMANDS.join(", ")
        ))),
    }
}

/// `estimate`, `fit` and `inspect` of a diffusers pipeline (the job's or the input's `model` a
/// directory with `model_index.json` or such a Hub repo): its answer, or `None` when the input
/// names no pipeline (then the command reads its input as for a model). The options a pipeline
/// has no use for (`advise`, `measured`, `assume_llama`) are refused, named.
fn pipeline_call(
    session: &Session,
    command: &str,
    input_json: &str,
) -> Result<Option<String>, AppError> {
    use super::diffusion as d;
    if !matches!(command, "estimate" | "fit" | "inspect") {
        return Ok(None);
    }
    let Ok(serde_json::Value::Object(input)) = serde_json::from_str(input_json) else {
        return Ok(None);
    };
    let p = match (command, input.get("job")) {
        ("inspect", _) => match input.get("model").and_then(|m| m.as_str()) {
            Some(m) => d::pipeline_of(session, m, false)?,
            None => None,
        },
        (_, Some(job)) => d::pipeline_of_job(session, job)?,
        _ => None,
    };
    let Some(p) = p else { return Ok(None) };
    let allowed: &[&str] = match command {
        "inspect" => &["model"],
        _ => &["job"],
    };
    if let Some(k) = input.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(AppError::bad(format!(
            "{command}: {k} is not read for a diffusion pipeline (see docs/diffusion.md)"
        )));
    }
    let answer = match command {
        "inspect" => to_json(&d::inspect(&p)?)?,
        "estimate" => to_json(&d::estimate(&p, &d::job_of(&input["job"])?)?)?,
        _ => to_json(&d::fit(&p, &d::job_of(&input["job"])?)?)?,
    };
    Ok(Some(answer))
}

/// `models` and `gpus` take nothing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// `fit`'s input: with `measured`, the calibrated fit.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FitJson {
    #[serde(deserialize_with = "super::job::with_from")]
    job: Job,
    #[serde(default)]
    measured: Option<PathBuf>,
}

fn fit(session: &Session, f: FitJson) -> Result<String, AppError> {
    match f.measured {
        Some(measured) => to_json(&super::fit_calibrated(
            session,
            &super::CalibratedFitInput {
                job: f.job,
                measured,
            },
        )?),
        None => to_json(&super::fit(session, &super::FitInput { job: f.job })?),
    }
}

/// The command's typed input. A job that does not read says so as the CLI says it of a job
/// file (`invalid job: ...`); anything else names the command.
fn input<T: DeserializeOwned>(command: &str, text: &str) -> Result<T, AppError> {
    serde_json::from_str::<T>(text).map_err(|e| {
        let job = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("job").cloned());
        match job.map(serde_json::from_value::<Job>) {
            Some(Err(je)) => AppError::bad(format!("invalid job: {je}")),
            _ => AppError::bad(format!("{command}: invalid input: {e}")),
        }
    })
}

/// `analyze` of a record or log held in memory (a Python `bytes`), answered as `call_json`
/// answers: what `analyze FILE --json` prints for a file of those bytes. `name` is what errors
/// call it.
pub fn analyze_bytes_json(bytes: &[u8], name: &str) -> Result<String, AppError> {
    to_json(&super::analyze_bytes(bytes, Some(name))?)
}

/// `compare` of a job (`{"job": JOB}`, as `call_json("compare", ...)` takes it, without
/// `path`) and a measurement held in memory, answered as `call_json` answers. `name` is what
/// errors call the measurement.
pub fn compare_bytes_json(
    session: &Session,
    input_json: &str,
    bytes: &[u8],
    name: &str,
) -> Result<String, AppError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct JobOnly {
        #[serde(deserialize_with = "super::job::with_from")]
        job: Job,
    }
    let j: JobOnly = input("compare", input_json)?;
    to_json(&super::compare_bytes(session, &j.job, bytes, Some(name))?)
}

/// The Python package's keyword arguments laid over a job (`estimate("llama-3.1-8b", lora=16,
/// tp=2)`): `job_json` the contract's job, `keywords_json` an object of keywords, each a job
/// field or `vramscope estimate`'s flag of that name (`jobtext::keywords`). Answers the job as
/// compact JSON, for `call_json`'s `job`.
pub fn job_with_keywords_json(job_json: &str, keywords_json: &str) -> Result<String, AppError> {
    let job: serde_json::Value =
        serde_json::from_str(job_json).map_err(|e| AppError::bad(format!("invalid job: {e}")))?;
    let keywords: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(keywords_json).map_err(|e| AppError::bad(format!("keywords: {e}")))?;
    let job = super::jobtext::keywords::job_with_keywords(job, &keywords)?;
    Ok(job.to_string())
}
