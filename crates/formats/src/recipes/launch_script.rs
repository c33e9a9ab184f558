//! A launch script's environment: the shell script that starts a training run (`export
//! PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, or the assignment prefixed to the command,
//! `PYTORCH_ALLOC_CONF="expandable_segments:True" torchrun ...` as torchtitan's `run_train.sh`
//! writes it). Only the variables that change what vramscope models are read:
//! `PYTORCH_CUDA_ALLOC_CONF` and its newer name `PYTORCH_ALLOC_CONF` (torch ≥ 2.9 reads both,
//! `c10/core/AllocatorConfig.cpp`) → the job's `allocator`; `CUDA_MODULE_LOADING` →
//! `cuda_module_loading`. Nothing is executed: each line is read as text, the last assignment
//! of a variable wins, as the shell would leave it.

use super::doc::Reading;
use serde_json::Value;

/// The variables read, with the job field each sets.
const VARIABLES: &[(&str, &str)] = &[
    ("PYTORCH_CUDA_ALLOC_CONF", "allocator"),
    ("PYTORCH_ALLOC_CONF", "allocator"),
    ("CUDA_MODULE_LOADING", "cuda_module_loading"),
];

/// Whether the text is a shell script that sets one of the variables: a `#!` line naming a
/// shell, or an assignment of one of them at the start of a line (after `export`).
pub(super) fn detect(text: &str) -> bool {
    let shebang = text
        .lines()
        .next()
        .is_some_and(|l| l.starts_with("#!") && l.contains("sh"));
    shebang || text.lines().any(|l| !assignments(l).is_empty())
}

/// Reads the variables' last assignments into job fields.
pub(super) fn read(text: &str, reading: &mut Reading) -> Result<(), String> {
    let mut last: Vec<(&'static str, &'static str, String)> = Vec::new();
    for line in text.lines() {
        for (var, field, value) in assignments(line) {
            last.retain(|(_, f, _)| *f != field);
            last.push((var, field, value));
        }
    }
    for (var, field, value) in last {
        match field {
            "cuda_module_loading" => module_loading(var, &value, reading),
            _ => {
                reading.set(field, Value::String(value.clone()), var);
                reading.note(format!(
                    "{var}={value}: an environment change, simulated through the caching \
                     allocator"
                ));
            }
        }
    }
    Ok(())
}

/// `CUDA_MODULE_LOADING`: `EAGER` or `LAZY` (`DEFAULT` is lazy since CUDA 12.2, eager before:
/// read as unknown).
fn module_loading(var: &str, value: &str, reading: &mut Reading) {
    match value.to_ascii_uppercase().as_str() {
        "EAGER" => reading.set("cuda_module_loading", Value::String("eager".into()), var),
        "LAZY" => reading.set("cuda_module_loading", Value::String("lazy".into()), var),
        other => reading.note(format!(
            "{var}={other}: not read (the CUDA release decides what DEFAULT means)"
        )),
    }
}

/// The read variables assigned on one line: `export A=x`, `A=x B=y command ...`, values bare,
/// `"double"` or `'single'` quoted. A comment line assigns nothing.
fn assignments(line: &str) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    if rest.starts_with('#') {
        return out;
    }
    if let Some(r) = rest.strip_prefix("export ") {
        rest = r.trim_start();
    }
    while let Some((name, after)) = rest.split_once('=') {
        let Some(&(var, field)) = VARIABLES.iter().find(|(v, _)| *v == name) else {
            if is_name(name) {
                // Another variable assigned before the command: skip its value.
                rest = after.split_once(char::is_whitespace).map_or("", |(_, r)| r);
                rest = rest.trim_start();
                continue;
            }
            break;
        };
        let (value, tail) = shell_word(after);
        out.push((var, field, value));
        rest = tail.trim_start();
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// One shell word: quoted or bare, with what follows it.
fn shell_word(s: &str) -> (String, &str) {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q) {
            return match inner.split_once(q) {
                Some((v, tail)) => (v.to_string(), tail),
                None => (inner.trim_end().to_string(), ""),
            };
        }
    }
    match s.split_once(char::is_whitespace) {
        Some((v, tail)) => (v.to_string(), tail),
        None => (s.trim_end_matches(';').to_string(), ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Vec<(String, String)> {
        let mut r = Reading::default();
        read(text, &mut r).unwrap();
        r.fields
            .iter()
            .map(|f| (f.path.to_string(), super::super::doc::short(&f.value)))
            .collect()
    }

    #[test]
    fn export_and_prefix_forms() {
        let s = "#!/bin/bash\nexport PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n\
                 python train.py --config cfg.yaml\n";
        assert!(detect(s));
        assert_eq!(
            fields(s),
            vec![("allocator".into(), "expandable_segments:True".into())]
        );
        // torchtitan's run_train.sh style: the newer variable name, quoted, before the command.
        let t = "NGPU=${NGPU:-\"8\"}\nPYTORCH_ALLOC_CONF=\"expandable_segments:True\" \\\n\
                 torchrun --nproc_per_node=${NGPU} train.py\n";
        assert!(detect(t));
        assert_eq!(
            fields(t),
            vec![("allocator".into(), "expandable_segments:True".into())]
        );
        let u = "CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:512' \
                 CUDA_MODULE_LOADING=EAGER python x.py";
        assert_eq!(
            fields(u),
            vec![
                ("allocator".into(), "max_split_size_mb:512".into()),
                ("cuda_module_loading".into(), "eager".into())
            ]
        );
    }

    #[test]
    fn the_last_assignment_wins_and_comments_are_not_read() {
        let s = "# export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128\n\
                 export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256\n\
                 export PYTORCH_ALLOC_CONF=expandable_segments:True\n";
        assert_eq!(
            fields(s),
            vec![("allocator".into(), "expandable_segments:True".into())]
        );
    }

    #[test]
    fn yaml_and_json_are_not_scripts() {
        assert!(!detect("model:\n  name: x\nbatch_size: 4\n"));
        assert!(!detect("{\"train_batch_size\": 8}"));
        // A YAML value mentioning the variable is not an assignment at a line's start.
        assert!(!detect(
            "env: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        ));
    }
}
