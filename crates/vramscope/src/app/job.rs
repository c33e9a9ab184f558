//! A job made ready for the estimator: its model resolved once (local path, preset, Hugging
//! Face cache, vramscope's cache, the Hub — through the shell's `Session`) and its fields
//! resolved (`vramscope_core::job::Job::resolve`). Every command that takes a job starts here,
//! so a command loads its model once however many answers it draws from it.

use super::{AppError, Session};
use std::sync::{Arc, Mutex};
use vramscope_core::estimate::ModelInput;
use vramscope_core::job::{Job, ResolvedJob};
use vramscope_core::report::Report;
use vramscope_formats::model_source::{load_job_model_with, Source};
use vramscope_formats::FormatError;

/// A job's estimator inputs, the model reader's warnings and where the model came from.
pub struct Prepared {
    /// Shared with the preset cache (`PRESETS`) when MODEL is a built-in preset.
    pub model: Arc<ModelInput>,
    pub resolved: ResolvedJob,
    pub warnings: Vec<String>,
    pub source: Source,
    /// MODEL as the user wrote it (the job's `model` when it is a string): what a launch line
    /// serves.
    pub named: Option<String>,
}

/// Loads a job's model (through the one MODEL resolution, with `session`'s fetch flags and held
/// models: local, preset, HF cache, Hub) and resolves its fields. A PEFT adapter repo fills the job's `peft` when the job has none.
pub fn prepare(session: &Session, job: &Job) -> Result<Prepared, AppError> {
    // Check the job's own fields before the model, so `--batch 0` is named even without one.
    job.resolve(None)?;
    let model =
        match &job.model {
            None | Some(serde_json::Value::Null) => return Err(AppError::bad(
                "model: required: give MODEL (a preset id or a path) or a job file with \"model\"",
            )),
            Some(m) => m,
        };
    let assume_llama = job.assume_llama.unwrap_or(false);
    if let Some(p) = model.as_str().and_then(|s| cached_preset(s, assume_llama)) {
        let max_seq = p
            .model
            .spec
            .as_ref()
            .and_then(|s| s.max_position_embeddings);
        let mut warnings = p.warnings.clone();
        warnings.extend(job.notes.iter().cloned());
        return Ok(Prepared {
            model: Arc::clone(&p.model),
            resolved: job.resolve(max_seq)?,
            warnings,
            source: p.source.clone(),
            named: model.as_str().map(str::to_string),
        });
    }
    let opts = session.options(assume_llama);
    let adapter = std::cell::RefCell::new(None);
    let by_name = |s: &str| -> Result<_, FormatError> {
        let r = session.resolve(s, &opts)?;
        *adapter.borrow_mut() = r.peft;
        Ok(r.model)
    };
    let loaded = load_job_model_with(model, opts.read, &by_name)
        .map_err(|e| named_by_a_config(e, model, &job.notes))?;
    let max_seq = loaded.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved: ResolvedJob = match adapter.into_inner() {
        Some(peft) if job.peft.as_ref().is_none_or(serde_json::Value::is_null) => {
            let mut with_peft = job.clone();
            with_peft.peft = Some(peft);
            with_peft.resolve(max_seq)?
        }
        _ => job.resolve(max_seq)?,
    };
    // Model warnings, then what `--from` files said, then the estimator's (see `report`).
    let mut warnings = loaded.warnings.clone();
    warnings.extend(job.notes.iter().cloned());
    let source = loaded.source.clone();
    let preset_warnings = loaded.warnings.clone();
    let input = Arc::new(loaded.into_input());
    if let (Some(s), "preset") = (model.as_str(), source.kind.as_str()) {
        keep_preset(s, assume_llama, &input, preset_warnings, &source);
    }
    Ok(Prepared {
        model: input,
        resolved,
        warnings,
        source,
        named: model.as_str().map(str::to_string),
    })
}

/// A built-in preset's model as loaded, for the process to reuse.
struct PresetModel {
    model: Arc<ModelInput>,
    warnings: Vec<String>,
    source: Source,
}

/// Presets loaded so far, newest last: (the id as written, `assume_llama`, the model). A preset
/// never changes, so a later job naming it reuses the model and what its memo remembers (each
/// distinct job's simulated step is computed once: the web UI and the Python API estimate one
/// model over and over). A pure cache of constant data — no caller's input changes what it
/// answers, only how soon — so it stays process-wide rather than in the `Session`.
static PRESETS: Mutex<Vec<(String, bool, Arc<PresetModel>)>> = Mutex::new(Vec::new());

/// Presets kept at most (the oldest is dropped first): each holds its inventory and its memo.
const PRESET_CACHE: usize = 8;

/// The kept model for `name`, unless a local path of that name exists (MODEL resolution tries
/// local paths before presets, so such a path must be read instead).
fn cached_preset(name: &str, assume_llama: bool) -> Option<Arc<PresetModel>> {
    if std::path::Path::new(name).exists() {
        return None;
    }
    let presets = PRESETS.lock().ok()?;
    presets
        .iter()
        .find(|(n, a, _)| n == name && *a == assume_llama)
        .map(|(_, _, p)| Arc::clone(p))
}

fn keep_preset(
    name: &str,
    assume_llama: bool,
    model: &Arc<ModelInput>,
    warnings: Vec<String>,
    source: &Source,
) {
    let Ok(mut presets) = PRESETS.lock() else {
        return;
    };
    // Concurrent first requests for one preset each load it; the first kept stays, with what
    // its memo has learnt since (replacing it would start every later request's memo empty).
    if presets
        .iter()
        .any(|(n, a, _)| n == name && *a == assume_llama)
    {
        return;
    }
    if presets.len() >= PRESET_CACHE {
        presets.remove(0);
    }
    presets.push((
        name.to_string(),
        assume_llama,
        Arc::new(PresetModel {
            model: Arc::clone(model),
            warnings,
            source: source.clone(),
        }),
    ));
}

impl Prepared {
    /// The estimate of this job, without advice: what `validate` scores. The model reader's
    /// warnings come first in the report's warnings.
    pub fn report(&self) -> Result<Report, AppError> {
        let mut report = vramscope_core::estimate::estimate(&self.model, &self.resolved)?;
        report.model.read_from = self.source.read_from();
        if !self.warnings.is_empty() {
            let rest = std::mem::take(&mut report.warnings);
            report.warnings = self.warnings.clone();
            for w in rest {
                if !report.warnings.contains(&w) {
                    report.warnings.push(w);
                }
            }
        }
        Ok(report)
    }

    /// The estimate plus the advice (`vramscope_core::advice`): searched when the job does not
    /// fit its GPU, or always with `advise`. What `estimate --json` prints.
    pub fn report_with_advice(&self, advise: bool) -> Result<Report, AppError> {
        let mut report = self.report()?;
        if advise || vramscope_core::advice::fits(&report) == Some(false) {
            report.advice = Some(vramscope_core::advice::advise(&self.model, &self.resolved)?);
        }
        Ok(report)
    }

    /// The what-if rows (the table under `estimate`, the picture's chart).
    pub fn what_if(&self) -> Result<Vec<vramscope_core::fit::WhatIf>, AppError> {
        Ok(vramscope_core::fit::what_if(&self.model, &self.resolved)?)
    }
}

/// A job's estimate without advice (one model load): what `validate` scores and `compare`
/// puts beside the measurement.
pub fn estimate_job(session: &Session, job: &Job) -> Result<Report, AppError> {
    prepare(session, job)?.report()
}

/// A MODEL that could not be loaded, when a `--from` config named it (the job's notes say
/// `from FILE (kind): model NAME, ...`): the error names that file, and how to run the job on a
/// preset instead — the preset whose id the name contains when there is one
/// (`NousResearch/Hermes-3-Llama-3.1-8B` → `llama-3.1-8b`), since a fine-tune or an Instruct
/// variant has its base's shapes. Other errors are returned as they are.
fn named_by_a_config(e: FormatError, model: &serde_json::Value, notes: &[String]) -> AppError {
    let err = AppError::from(e);
    let Some(name) = model.as_str() else {
        return err;
    };
    let said = format!("model {name}");
    let Some(origin) = notes
        .iter()
        .find(|n| n.starts_with("from ") && n.contains(&format!(": {said}")))
        .and_then(|n| n.split(": ").next())
    else {
        return err;
    };
    let file = origin.trim_start_matches("from ");
    let preset = preset_within(name);
    let example = preset.unwrap_or("llama-3.1-8b");
    AppError {
        message: format!(
            "{file} names the model: {}; to run the job on a preset instead, give it as \
             MODEL: `vramscope estimate {example} --from {}`{} (`vramscope models` lists them)",
            err.message,
            file.split(" (").next().unwrap_or(file),
            if preset.is_some() {
                ", a preset its name contains"
            } else {
                ""
            },
        ),
        ..err
    }
}

/// The longest preset id that the repository name (without the organisation) contains,
/// ignoring case.
fn preset_within(name: &str) -> Option<&'static str> {
    let repo = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    vramscope_formats::presets::all()
        .iter()
        .map(|p| p.id)
        .filter(|id| repo.contains(id))
        .max_by_key(|id| id.len())
}

/// Lays a GPU count over a job as `--gpus N` does: `parallel.gpus` set, and a `dp` the job
/// gave dropped so it is derived again rather than reported as a conflict.
pub fn with_gpus(job: &mut Job, gpus: u64) -> Result<(), AppError> {
    use serde_json::{Map, Value};
    let parallel = job.parallel.get_or_insert(Value::Null);
    if parallel.is_null() {
        *parallel = Value::Object(Map::new());
    }
    let Value::Object(o) = parallel else {
        return Err(AppError::bad(format!(
            "parallel: must be an object to take --gpus (got {parallel})"
        )));
    };
    o.remove("dp");
    o.insert("gpus".into(), Value::from(gpus));
    Ok(())
}

/// A job as the contract's JSON gives it, with its `"from"` entries (a training framework's
/// own configs, issue 20) read and laid under its other fields — the same reading as a `--job`
/// file's and a server body's (`jobtext::from::parse_json_job`).
pub fn with_from<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Job, D::Error> {
    let value = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
    let text = value.to_string();
    super::jobtext::from::parse_json_job(&text).map_err(|e| {
        let e = e.strip_prefix("invalid job: ").unwrap_or(&e).to_string();
        serde::de::Error::custom(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `gpus` as `--gpus` lays it: a file's dp is dropped (derived again from gpus / (tp × pp ×
    /// cp)), other parallel fields kept; no parallel object → one with gpus alone.
    #[test]
    fn gpus_replace_dp_and_keep_the_rest() {
        let mut job: Job =
            serde_json::from_value(json!({"parallel": {"gpus": 4, "dp": 4, "tp": 2}})).unwrap();
        with_gpus(&mut job, 16).unwrap();
        assert_eq!(job.parallel, Some(json!({"gpus": 16, "tp": 2})));
        // 16 GPUs over tp 2: dp = 16 / 2 = 8.
        assert_eq!(job.resolve(None).unwrap().parallel.dp, 8);
        let mut job = Job::default();
        with_gpus(&mut job, 8).unwrap();
        assert_eq!(job.parallel, Some(json!({"gpus": 8})));
        let mut job: Job = serde_json::from_value(json!({"parallel": 3})).unwrap();
        let e = with_gpus(&mut job, 8).unwrap_err();
        assert!(
            e.message.starts_with("parallel:") && e.exit_code == 2,
            "{e}"
        );
    }

    /// A model a `--from` config named that cannot be loaded (offline, not cached): the error
    /// names the file and suggests the preset the name contains.
    #[test]
    fn a_configs_model_that_cannot_load_names_the_file_and_a_preset() {
        let job = Job {
            model: Some(json!("NoSuchOrg/Hermes-3-Llama-3.1-8B")),
            notes: vec![
                "from ax.yml (axolotl recipe): model NoSuchOrg/Hermes-3-Llama-3.1-8B, \
                         seq 2048"
                    .into(),
            ],
            ..Job::default()
        };
        let e = named_by_a_config(
            FormatError::Unreachable("NoSuchOrg/Hermes-3-Llama-3.1-8B: not found".into()),
            job.model.as_ref().unwrap(),
            &job.notes,
        );
        assert_eq!(e.exit_code, 2);
        assert!(e.message.starts_with(
                "ax.yml (axolotl recipe) names the model: NoSuchOrg/Hermes-3-Llama-3.1-8B: not found;"
            ), "{}", e.message);
        assert!(
            e.message
                .contains("`vramscope estimate llama-3.1-8b --from ax.yml`, a preset"),
            "{}",
            e.message
        );
        // Not named by a config: the error as it was.
        let plain = named_by_a_config(
            FormatError::Unreachable("x: not found".into()),
            &json!("x"),
            &[],
        );
        assert_eq!(plain.message, "x: not found");
        assert_eq!(
            preset_within("meta-llama/Llama-3.1-70B-Instruct"),
            Some("llama-3.1-70b")
        );
        assert_eq!(preset_within("org/unrelated"), None);
    }

    /// A job without a model is refused before anything is read, naming the field.
    #[test]
    fn a_model_is_required() {
        let e = prepare(&Session::default(), &Job::default()).err().unwrap();
        assert!(e.message.starts_with("model: required"), "{e}");
        assert_eq!(e.exit_code, 2);
    }
}

#[cfg(test)]
mod preset_cache_tests {
    use super::*;

    fn job(model: &str, batch: u64) -> Job {
        serde_json::from_value(serde_json::json!({"model": model, "batch": batch})).unwrap()
    }

    /// Two jobs naming one preset share its loaded model (and so its memo); a job naming a
    /// local file of that name reads the file, as MODEL resolution says (local paths first).
    #[test]
    fn a_preset_is_loaded_once_and_a_local_path_still_wins() {
        let a = prepare(&Session::default(), &job("gpt2", 1)).unwrap();
        let b = prepare(&Session::default(), &job("gpt2", 4)).unwrap();
        assert!(Arc::ptr_eq(&a.model, &b.model));
        assert_eq!((a.resolved.batch, b.resolved.batch), (1, 4));
        assert_eq!(b.source.kind, "preset");
        let dir = std::env::temp_dir().join(format!("vramscope-preset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let local = dir.join("gpt2");
        std::fs::write(&local, "{\"params\": 7}").unwrap();
        let name = local.to_str().unwrap();
        // Kept under that name (as if a preset had been loaded by it), it is still not served
        // while the path exists.
        keep_preset(name, false, &a.model, Vec::new(), &a.source);
        assert!(cached_preset("gpt2", false).is_some());
        assert!(cached_preset(name, false).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
