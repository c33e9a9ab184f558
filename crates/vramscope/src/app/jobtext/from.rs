//! `--from FILE` (repeatable) and the JSON job's `"from": [{"name", "text"}]`: training
//! frameworks' own configs read into job fields by `vramscope_formats::recipes`, laid under the
//! job: later `--from` files, then the job file's (or body's) own fields, then flags override
//! earlier ones. The lines saying what each file set go into the job's `notes`, which the
//! Report's warnings show first.

use super::error::JobError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use vramscope_core::job::Job;
use vramscope_formats::recipes::{self, Input, MAX_CONFIG_BYTES};

/// Objects in a job whose keys merge one by one when a job is laid over the `--from` fields.
const NESTED: [&str; 3] = ["parallel", "engine", "rl"];

/// Reads the `--from` files and lays `job` over what they say (nothing to do without files).
pub fn lay_under(job: &mut Job, files: &[PathBuf]) -> Result<(), JobError> {
    if files.is_empty() {
        return Ok(());
    }
    let inputs = files
        .iter()
        .map(|p| read_config(p))
        .collect::<Result<Vec<_>, _>>()?;
    let resolved =
        recipes::resolve(&inputs, &beside_referrer).map_err(|e| JobError(e.to_string()))?;
    *job = overlay(resolved, job).map_err(JobError)?;
    Ok(())
}

/// A JSON job, with its `"from"` entries (if any) read and laid under its other fields. Used
/// for `--job` files and the server's bodies alike; the entries' names are labels, never paths
/// (a config they reference must be another entry of the same base name).
pub fn parse_json_job(text: &str) -> Result<Job, String> {
    let plain = |t: &str| serde_json::from_str::<Job>(t).map_err(|e| format!("invalid job: {e}"));
    let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(text) else {
        return plain(text);
    };
    let Some(from) = obj.remove("from") else {
        return plain(text);
    };
    let inputs = entries(&from)?;
    let job: Job =
        serde_json::from_value(Value::Object(obj)).map_err(|e| format!("invalid job: {e}"))?;
    if inputs.is_empty() {
        return Ok(job);
    }
    let resolved = recipes::resolve(&inputs, &|_, _| None).map_err(|e| e.to_string())?;
    overlay(resolved, &job)
}

/// `"from"`: a list of `{"name": "...", "text": "..."}`.
fn entries(from: &Value) -> Result<Vec<Input>, String> {
    let shape = "from: expected a list of {\"name\": ..., \"text\": ...} objects";
    let Value::Array(list) = from else {
        return Err(shape.into());
    };
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let o = e.as_object().ok_or(shape)?;
            if let Some(k) = o.keys().find(|k| *k != "name" && *k != "text") {
                return Err(format!(
                    "from[{i}]: unknown key '{k}' (expected name and text)"
                ));
            }
            let field = |k: &str| {
                o.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("from[{i}].{k}: required, as text"))
            };
            Ok(Input {
                name: field("name")?,
                text: field("text")?,
            })
        })
        .collect()
}

/// The `--from` fields with `job`'s own fields laid over them; the notes come first.
fn overlay(resolved: recipes::Resolved, job: &Job) -> Result<Job, String> {
    let mut base = resolved.job;
    let Value::Object(over) = serde_json::to_value(job).map_err(|e| e.to_string())? else {
        return Err("invalid job: not an object".into());
    };
    // The files' checkpoint kind names their full checkpointing: a job that turns
    // checkpointing to something else leaves no checkpoint for it to name.
    let own_kind = over
        .get("checkpoint_reentrant")
        .is_some_and(|v| !v.is_null());
    let not_full = over
        .get("checkpointing")
        .and_then(Value::as_str)
        .is_some_and(|c| c != "full");
    if not_full && !own_kind {
        base.remove("checkpoint_reentrant");
    }
    for (k, v) in over {
        match (base.get_mut(&k), &v) {
            (Some(Value::Object(b)), Value::Object(o)) if NESTED.contains(&k.as_str()) => {
                merge_nested(&k, b, o);
            }
            _ => {
                base.insert(k, v);
            }
        }
    }
    let mut merged: Job =
        serde_json::from_value(Value::Object(base)).map_err(|e| format!("invalid job: {e}"))?;
    merged.notes = resolved.notes;
    merged.notes.extend(job.notes.iter().cloned());
    Ok(merged)
}

/// Keys of a nested object laid one by one; for `parallel`, a `gpus` (or `dp`) given alone
/// means "derive the other", as the flags do, so the files' `dp` (or `gpus`) gives way.
fn merge_nested(key: &str, base: &mut Map<String, Value>, over: &Map<String, Value>) {
    if key == "parallel" {
        if over.contains_key("gpus") && !over.contains_key("dp") {
            base.remove("dp");
        }
        if over.contains_key("dp") && !over.contains_key("gpus") {
            base.remove("gpus");
        }
    }
    for (k, v) in over {
        base.insert(k.clone(), v.clone());
    }
}

/// One `--from` file: bounded, UTF-8, named as given.
fn read_config(path: &Path) -> Result<Input, JobError> {
    let shown = path.display().to_string();
    let err = |m: String| JobError(format!("{shown}: {m}"));
    let cap = MAX_CONFIG_BYTES as u64;
    let text = vramscope_formats::files::read_regular_text(path, cap, "a training config")
        .map_err(|e| err(e.to_string()))?;
    Ok(Input { name: shown, text })
}

/// A config named inside another (a DeepSpeed JSON path): looked for beside the file that names
/// it, then where the command runs (LLaMA-Factory's recipes name paths from their repository
/// root).
fn beside_referrer(referrer: &str, path: &str) -> Option<Result<Input, String>> {
    let near = Path::new(referrer)
        .parent()
        .map(|d| d.join(path))
        .filter(|p| p.is_file());
    let here = Some(PathBuf::from(path)).filter(|p| p.is_file());
    let found = near.or(here)?;
    Some(read_config(&found).map_err(|e| e.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DS: &str = r#"{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4,
        "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}"#;

    /// The body's own fields override the `from` entries; nested objects merge key by key.
    #[test]
    fn body_fields_override_from_entries() {
        let body = json!({
            "model": "gpt2",
            "grad_accum": 2,
            "parallel": {"gpus": 4},
            "from": [{"name": "ds.json", "text": DS}],
        });
        let job = parse_json_job(&body.to_string()).unwrap();
        assert_eq!(job.grad_accum, Some(json!(2))); // body's 2 over the file's 4
        assert_eq!(job.precision.as_deref(), Some("bf16-mixed")); // bf16.enabled true
        assert_eq!(job.framework.as_deref(), Some("deepspeed"));
        // zero_optimization.stage 2 with no offload section, and the body's gpus 4
        assert_eq!(
            job.parallel,
            Some(json!({"zero": 2, "offload": "none", "gpus": 4}))
        );
        assert!(
            job.notes[0].starts_with("from ds.json (DeepSpeed config): "),
            "{:?}",
            job.notes
        );
    }

    #[test]
    fn malformed_from_is_a_one_line_error() {
        for (body, start) in [
            (json!({"from": "ds.json"}), "from:"),
            (json!({"from": [{"name": "a"}]}), "from[0].text"),
            (
                json!({"from": [{"name": "a", "text": "x", "path": "/etc"}]}),
                "from[0]: unknown key",
            ),
            (
                json!({"from": [{"name": "a.yaml", "text": "- 1"}]}),
                "a.yaml:",
            ),
        ] {
            let e = parse_json_job(&body.to_string()).unwrap_err();
            assert!(e.starts_with(start), "{e}");
            assert!(!e.contains('\n'));
        }
    }

    /// LLaMA-Factory checkpoints by default with `use_reentrant_gc` True (reentrant): the
    /// recipe gives `checkpoint_reentrant: true`. A body that turns checkpointing off takes
    /// the kind away with it (else the job would be refused); one that keeps it full keeps it.
    #[test]
    fn a_body_turning_checkpointing_off_drops_the_files_kind() {
        let recipe = "finetuning_type: lora\ncutoff_len: 512\n";
        let body = |ckpt: &str| {
            json!({"model": "gpt2", "checkpointing": ckpt,
                   "from": [{"name": "lf.yaml", "text": recipe}]})
            .to_string()
        };
        let off = parse_json_job(&body("none")).unwrap();
        assert_eq!(off.checkpoint_reentrant, None);
        assert!(off.resolve(None).is_ok());
        let full = parse_json_job(&body("full")).unwrap();
        assert_eq!(full.checkpoint_reentrant, Some(json!(true)));
    }

    /// A job without `from` reads exactly as before (the same error text, too).
    #[test]
    fn jobs_without_from_are_unchanged() {
        let j = parse_json_job(r#"{"model": "gpt2", "batch": 4}"#).unwrap();
        assert_eq!(j.batch, Some(json!(4)));
        assert!(j.notes.is_empty());
        let e = parse_json_job(r#"{"batchh": 4}"#).unwrap_err();
        assert!(e.starts_with("invalid job: unknown field `batchh`"), "{e}");
    }
}
