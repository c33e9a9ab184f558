//! A job from the Python package's keyword arguments, `vramscope.estimate("llama-3.1-8b",
//! lora=16, tp=2)`: the README promises that each function mirrors its command, so a keyword
//! takes what the command's flag of that name takes. A keyword naming a job field is that
//! field, as in a job dict (`batch=2`, `peft={...}`, `reserve` in bytes); any other keyword is
//! `vramscope estimate`'s flag spelt with underscores (`lora` = `--lora`, `lora_targets` =
//! `--lora-targets`), its value turned into the flag's text and read by the same parser and
//! the same `JobArgs::apply` as the command line's, so both give the same job.

use super::args::JobArgs;
use super::error::JobError;
use clap::{Arg, ArgAction, Args, Command, FromArgMatches};
use serde_json::{Map, Value};
use vramscope_core::diffusion::job::DiffusionJob;
use vramscope_core::job::Job;

/// Flags a keyword may not name: they read files, which a job dict gives otherwise.
const NOT_KEYWORDS: [&str; 2] = ["job", "from"];

/// `job` (the contract's job object, its `"from"` entries kept as they are) with `keywords`
/// laid over it: job fields first, then the flags, as the command line lays flags over a job
/// file. The error is one line naming the keyword.
pub fn job_with_keywords(job: Value, keywords: &Map<String, Value>) -> Result<Value, JobError> {
    let Value::Object(mut obj) = job else {
        return Err(JobError(format!("job: expected an object, got {job}")));
    };
    let mut flags = Vec::new();
    for (key, value) in keywords {
        if is_job_field(key) {
            obj.insert(key.clone(), value.clone());
        } else {
            flags.push((key.as_str(), value));
        }
    }
    if flags.is_empty() {
        return Ok(Value::Object(obj));
    }
    // On a command line the later of --lora and --qlora counts (advice appends its flags); a
    // call's keywords have no such order a reader sees, so both at once is refused.
    if keywords.contains_key("lora") && keywords.contains_key("qlora") {
        return Err(JobError(
            "lora, qlora: give one of them (--qlora is LoRA over 4-bit weights)".into(),
        ));
    }
    let from = obj.remove("from");
    let mut typed: Job = serde_json::from_value(Value::Object(obj))
        .map_err(|e| JobError(format!("invalid job: {e}")))?;
    parse_flags(&flags)?.apply(&mut typed)?;
    let mut out = serde_json::to_value(&typed).map_err(|e| JobError(e.to_string()))?;
    if let (Some(from), Value::Object(o)) = (from, &mut out) {
        o.insert("from".into(), from);
    }
    Ok(out)
}

/// Whether `key` is a field of the contract's job or of a diffusion pipeline's job
/// (docs/diffusion.md: `width`, `height`, `offload`, ... — which of the two a MODEL needs is
/// known only once it is resolved, so both keep their fields; `offload` is the pipeline's, and
/// an LLM job's is `parallel={"offload": ...}`), by the structs' own serde names, so a field
/// added there is one here too; `from`, the JSON job's list of framework configs, counts as
/// one. Every field is optional, so `{key: null}` reads exactly when `key` is a field.
fn is_job_field(key: &str) -> bool {
    let mut probe = Map::new();
    probe.insert(key.to_string(), Value::Null);
    let probe = Value::Object(probe);
    key == "from"
        || serde_json::from_value::<Job>(probe.clone()).is_ok()
        || serde_json::from_value::<DiffusionJob>(probe).is_ok()
}

/// The keywords read as `vramscope estimate`'s flags would be.
fn parse_flags(flags: &[(&str, &Value)]) -> Result<JobArgs, JobError> {
    let cmd = JobArgs::augment_args(Command::new("estimate").no_binary_name(true));
    let mut argv = Vec::new();
    for (key, value) in flags {
        let long = key.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| !NOT_KEYWORDS.contains(&long.as_str()))
            .ok_or_else(|| unknown(key, &cmd))?;
        argv.extend(flag_words(key, arg, value)?);
    }
    let matches = cmd.try_get_matches_from(argv).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        JobError(first.trim_start_matches("error: ").to_string())
    })?;
    JobArgs::from_arg_matches(&matches).map_err(|e| JobError(e.to_string()))
}

/// `key=value` as the words of the command line: `--key=TEXT`, a switch alone when true and
/// nothing when false or null (the flag not given).
fn flag_words(key: &str, arg: &Arg, value: &Value) -> Result<Vec<String>, JobError> {
    let long = format!("--{}", key.replace('_', "-"));
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let text = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Bool(b) if switch => return Ok(if *b { vec![long] } else { Vec::new() }),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(shape(key, &long)),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        Value::Object(_) => return Err(shape(key, &long)),
    };
    if switch {
        return Err(JobError(format!(
            "{key}: {long} is a switch: pass True or False (got {value})"
        )));
    }
    Ok(vec![format!("{long}={text}")])
}

fn shape(key: &str, long: &str) -> JobError {
    JobError(format!(
        "{key}: takes what {long} takes (a number, text or a list of them)"
    ))
}

/// A keyword that is neither a job field nor a flag, with the nearest name when one is close.
fn unknown(key: &str, cmd: &Command) -> JobError {
    let names: Vec<String> = cmd
        .get_arguments()
        .filter_map(Arg::get_long)
        .filter(|l| !NOT_KEYWORDS.contains(l))
        .map(|l| l.replace('-', "_"))
        .collect();
    let hint = vramscope_core::gpu::suggestion(key, names.iter().map(String::as_str));
    JobError(format!(
        "{key}: not a job field nor a flag of `vramscope estimate` (keywords take the flags' \
         names with underscores){hint}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kw(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// The call: `lora=16, tp=2` gives the job `--lora 16 --tp 2` gives (a LoRA of
    /// rank 16; tensor parallel 2), and job-field keywords stay fields.
    #[test]
    fn flags_and_fields() {
        let job = job_with_keywords(
            json!({"model": "llama-3.1-8b"}),
            &kw(json!({"lora": 16, "tp": 2, "batch": 4})),
        )
        .unwrap();
        assert_eq!(
            job,
            json!({"model": "llama-3.1-8b", "batch": 4, "peft": {"method": "lora", "rank": 16},
                   "parallel": {"tp": 2}})
        );
    }

    /// Lists join as the flag's commas; a switch is given alone when true, left out when
    /// false; `None` is a flag not given.
    #[test]
    fn values_become_the_flags_text() {
        let job = job_with_keywords(
            json!({"model": "gpt2"}),
            &kw(
                json!({"qlora": 8, "lora_targets": ["q_proj", "v_proj"], "gpus": 8,
                        "gpu_memory_utilization": 0.85, "alloc_conf": null}),
            ),
        )
        .unwrap();
        assert_eq!(
            job["peft"],
            json!({"method": "qlora", "rank": 8, "targets": ["q_proj", "v_proj"]})
        );
        assert_eq!(job["parallel"], json!({"gpus": 8}));
        assert_eq!(job["engine"], json!({"gpu_memory_utilization": 0.85}));
        assert!(job.get("allocator").is_none());
    }

    /// `alloc_conf` (a flag; the field is `allocator`) and `dpo_reference` (the field is
    /// `reference_model`) land in their fields as the command line puts them.
    #[test]
    fn flag_names_that_differ_from_fields() {
        let job = job_with_keywords(
            json!({"model": "gpt2"}),
            &kw(json!({"alloc_conf": "expandable_segments:True", "dpo_reference": "frozen"})),
        )
        .unwrap();
        assert_eq!(job["allocator"], json!("expandable_segments:True"));
        assert_eq!(job["reference_model"], json!("frozen"));
    }

    /// A diffusion pipeline's fields stay fields (the pipeline's job reads them).
    #[test]
    fn diffusion_fields_stay_fields() {
        let job = job_with_keywords(
            json!({"model": "sdxl-dir"}),
            &kw(json!({"width": 1024, "height": 768, "offload": "model", "vae_tiling": true})),
        )
        .unwrap();
        assert_eq!(
            job,
            json!({"model": "sdxl-dir", "width": 1024, "height": 768, "offload": "model",
                   "vae_tiling": true})
        );
    }

    /// Unknown names and values a flag cannot take are one-line errors naming the keyword.
    #[test]
    fn errors_name_the_keyword() {
        let e = job_with_keywords(json!({}), &kw(json!({"lorra": 8}))).unwrap_err();
        assert!(e.0.starts_with("lorra:") && e.0.contains("lora"), "{e}");
        // `from` is the JSON job's own list of configs: kept as given, for the command to read.
        let j = job_with_keywords(json!({}), &kw(json!({"from": []}))).unwrap();
        assert_eq!(j, json!({"from": []}));
        let e = job_with_keywords(json!({}), &kw(json!({"job": "j.json"}))).unwrap_err();
        assert!(e.0.starts_with("job:"), "{e}");
        let e = job_with_keywords(json!({}), &kw(json!({"tp": {"a": 1}}))).unwrap_err();
        assert!(e.0.starts_with("tp:") && !e.0.contains('\n'), "{e}");
        let e = job_with_keywords(json!({}), &kw(json!({"lora": 8, "qlora": 4}))).unwrap_err();
        assert!(e.0.contains("--qlora") && !e.0.contains('\n'), "{e}");
    }

    /// A job dict's `"from"` entries stay for the command to read (under everything else).
    #[test]
    fn from_entries_are_kept() {
        let from = json!([{"name": "ds.json", "text": "{}"}]);
        let job = job_with_keywords(
            json!({"model": "gpt2", "from": from.clone()}),
            &kw(json!({"zero": 3})),
        )
        .unwrap();
        assert_eq!(job["from"], from);
        assert_eq!(job["parallel"], json!({"zero": 3}));
    }
}
