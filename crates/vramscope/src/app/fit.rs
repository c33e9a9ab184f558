//! `fit`: the largest batch / sequence / context that fits the GPU, plain or calibrated by a
//! measured run of the job.

use super::job::{prepare, Prepared};
use super::{AppError, Session};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vramscope_core::job::Job;
use vramscope_core::launch::ServedModel;
use vramscope_measure::calibrate::CalibratedFit;
use vramscope_measure::logs::fit::LogCalibratedFit;
use vramscope_measure::logs::Measured;

/// `fit`'s input: the contract's job.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
}

/// `fit_calibrated`'s input: the job and a measured run of it (a snapshot pickle or profiler
/// timeline, as for `analyze`), whose batch and sequence are the job's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedFitInput {
    #[serde(deserialize_with = "super::job::with_from")]
    pub job: Job,
    pub measured: PathBuf,
}

/// `fit --json`'s answer: the contract's fit, and when even 1 does not fit, the advice.
#[derive(Debug, Clone, Serialize)]
pub struct FitWithAdvice {
    #[serde(flatten)]
    pub answer: vramscope_core::fit::FitAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<Vec<vramscope_core::advice::Advice>>,
}

/// What `fit --json` prints and `/api/fit` answers: the fit search, and the advice (the
/// cheapest changes that fit) when nothing fits at 1.
pub fn fit(session: &Session, input: &FitInput) -> Result<FitWithAdvice, AppError> {
    fit_prepared(&prepare(session, &input.job)?)
}

/// `fit` of a job whose model is already loaded.
pub fn fit_prepared(p: &Prepared) -> Result<FitWithAdvice, AppError> {
    let (model, resolved) = (&p.model, &p.resolved);
    let mut answer = vramscope_core::fit::fit(model, resolved)?;
    if let Some(l) = answer.launch.as_mut() {
        let served = served_model(p.named.as_deref(), &model.name, &l.engine);
        l.serve(&served);
    }
    let advice = if answer.max_batch.is_none() {
        Some(vramscope_core::advice::advise(model, resolved)?)
    } else {
        None
    };
    Ok(FitWithAdvice { answer, advice })
}

/// The model a launch line serves: what the user named, not the preset file it was read
/// from (`Qwen/Qwen2.5-32B-Instruct` is served as itself even when read offline as the base
/// preset). A preset's short id is served by its Hugging Face repo (`vllm serve
/// meta-llama/Llama-3.1-8B`) for vLLM and SGLang, which load Hub repos (llama.cpp loads a GGUF
/// file, which a preset's safetensors repo is not: its name is kept); a Hub reference (`hf://`,
/// its URL, `@REV`, `:QUANT`) by its repo, revision and GGUF tag; a path as it is; anything else
/// (an inline config) by the model's name.
pub fn served_model(named: Option<&str>, model_name: &str, engine: &str) -> ServedModel {
    let Some(arg) = named else {
        return ServedModel::named(model_name);
    };
    if let Some(p) = vramscope_formats::presets::find(arg) {
        let by_repo = matches!(engine, "vllm" | "sglang");
        return ServedModel::named(if by_repo { p.repo } else { arg });
    }
    if std::path::Path::new(arg).exists() {
        return ServedModel::named(arg);
    }
    match vramscope_hub::spec::parse(arg) {
        Some(h) => ServedModel {
            name: match &h.quant {
                Some(q) => format!("{}:{q}", h.repo),
                None => h.repo.clone(),
            },
            revision: h.revision.clone(),
            hub_gguf: h.quant.is_some(),
        },
        None => ServedModel::named(arg),
    }
}

/// A fit on a measurement: a PyTorch record's per-category correction, or an engine log's
/// figures (`vramscope_measure::logs::fit`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum MeasuredFit {
    Record(Box<CalibratedFit>),
    Log(Box<LogCalibratedFit>),
}

/// What `fit --measured FILE --json` prints: the search on the estimator corrected by the
/// measured run's per-category residual (`vramscope_measure::calibrate`), or on what an
/// engine's log states.
pub fn fit_calibrated(
    session: &Session,
    input: &CalibratedFitInput,
) -> Result<MeasuredFit, AppError> {
    fit_calibrated_prepared(&prepare(session, &input.job)?, &input.measured)
}

/// `fit_calibrated` of a job whose model is already loaded.
pub fn fit_calibrated_prepared(
    p: &Prepared,
    measured: &std::path::Path,
) -> Result<MeasuredFit, AppError> {
    let read = super::analyze::read_path(measured)?;
    match super::analyze::completed(read, Some(p)) {
        Measured::Record(record) => Ok(MeasuredFit::Record(Box::new(
            vramscope_measure::calibrate::fit_calibrated(&p.model, &p.resolved, &record.per_gpu)?,
        ))),
        Measured::Log(log) => Ok(MeasuredFit::Log(Box::new(
            vramscope_measure::logs::fit::fit_from_log(&p.model, &p.resolved, &log)?,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each engine is told to load: the name as the user wrote it, a preset by its repo
    /// for the engines that load Hub repos (crates/formats/data/presets/index.json:
    /// llama-3.1-8b → meta-llama/Llama-3.1-8B), a revision as the engine's own flag, a GGUF
    /// tag through llama.cpp's `-hf`.
    #[test]
    fn the_launch_serves_what_the_user_named() {
        let serve = |named: &str, engine: &str| {
            let mut l = vramscope_core::launch::Launch {
                engine: engine.into(),
                argv: vec!["--x".into()],
                command: String::new(),
                why: Default::default(),
                options: Default::default(),
            };
            l.serve(&served_model(Some(named), "from-the-config", engine));
            l.command
        };
        assert_eq!(
            serve("Qwen/Qwen2.5-32B-Instruct", "vllm"),
            "vllm serve Qwen/Qwen2.5-32B-Instruct --x"
        );
        assert_eq!(
            serve("llama-3.1-8b", "vllm"),
            "vllm serve meta-llama/Llama-3.1-8B --x"
        );
        assert_eq!(
            serve("llama-3.1-8b", "llama.cpp"),
            "llama-server -m llama-3.1-8b --x"
        );
        assert_eq!(
            serve("hf://Qwen/Qwen3-8B@v1", "sglang"),
            "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --revision v1 --x"
        );
        assert_eq!(
            serve("unsloth/Qwen3-8B-GGUF:Q4_K_M", "llama.cpp"),
            "llama-server -hf unsloth/Qwen3-8B-GGUF:Q4_K_M --x"
        );
    }
}
