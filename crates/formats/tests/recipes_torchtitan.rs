//! `--from train.toml`: torchtitan's job configs (`fixtures/recipes/torchtitan/`, sources in
//! the fixtures' README) read into job fields. Every expected value was read off the file by a
//! person (the key it comes from is named beside it), never copied from the reader's output.

use proptest::prelude::*;
use serde_json::{json, Value};
use vramscope_core::job::Job;
use vramscope_formats::recipes::{resolve, Input, Resolved};

fn fixture(rel: &str) -> Input {
    let path = format!(
        "{}/tests/fixtures/recipes/torchtitan/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    Input {
        name: rel.to_string(),
        text: std::fs::read_to_string(&path).expect(&path),
    }
}

fn from(inputs: Vec<Input>) -> Resolved {
    resolve(&inputs, &|_, _| None).unwrap_or_else(|e| panic!("{e}"))
}

fn text(name: &str, t: &str) -> Input {
    Input {
        name: name.into(),
        text: t.into(),
    }
}

fn has_note(r: &Resolved, needle: &str) -> bool {
    r.notes.iter().any(|n| n.contains(needle))
}

/// The resolved fields must make a job vramscope accepts.
fn resolves(r: &Resolved) {
    let job: Job = serde_json::from_value(Value::Object(r.job.clone())).unwrap();
    job.resolve(None).unwrap();
}

#[test]
fn llama3_8b_preset_for_64_a100s() {
    let r = from(vec![fixture("llama3_8b.toml")]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            // [model] name "llama3", flavor "8B": torchtitan's Llama 3.1 8B shapes
            "model": "llama-3.1-8b",
            // [training] batch_size 1, seq_len 8192
            "batch": 1,
            "seq": 8192,
            // [parallelism] data_parallel_shard_degree -1: FSDP2 over every GPU left
            "framework": "fsdp",
            "parallel": {"zero": 3},
            // [optimizer] name "AdamW"
            "optimizer": "adamw",
            // no mixed_precision_param: torchtitan's default bfloat16 with fp32 master
            "precision": "bf16-mixed",
            // [training] compile = false: the file's word sets the field
            "compile": false,
        })
    );
    resolves(&r);
    // [activation_checkpoint] mode "selective", selective_ac_option "op"
    assert!(
        has_note(&r, "activation_checkpoint.mode selective (op)"),
        "{:?}",
        r.notes
    );
    // shard degree -1: the GPU count is not in the file
    assert!(has_note(&r, "give --gpus"), "{:?}", r.notes);
    // [job], [profiling], [metrics], [checkpoint], [lr_scheduler] are quiet, not "ignored"
    assert!(!has_note(&r, "ignored"), "{:?}", r.notes);
}

#[test]
fn llama3_405b_preset_with_tp8_full_ac_compile_and_float8() {
    let r = from(vec![fixture("llama3_405b.toml")]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "llama-3.1-405b",       // name "llama3", flavor "405B"
            "batch": 2,                      // [training] batch_size 2
            "seq": 8192,                     // [training] seq_len 8192
            "compile": true,                 // [training] compile = true
            "framework": "fsdp",             // data_parallel_shard_degree -1
            // tensor_parallel_degree 8; torchtitan's TP plan is sequence parallel
            "parallel": {"zero": 3, "tp": 8, "sp": true},
            "checkpointing": "full",         // [activation_checkpoint] mode "full"
            "optimizer": "adamw",            // [optimizer] name "AdamW"
            "precision": "bf16-mixed",
        })
    );
    resolves(&r);
    // converters = ["float8"], enable_fsdp_float8_all_gather = true
    assert!(has_note(&r, "model.converters float8"), "{:?}", r.notes);
    assert!(
        has_note(&r, "float8.enable_fsdp_float8_all_gather"),
        "{:?}",
        r.notes
    );
}

#[test]
fn newer_keys_local_batch_size_and_mixed_precision_param() {
    let r = from(vec![fixture("llama3_8b_adamw.toml")]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "llama-3.1-8b",
            "batch": 8,                  // [training] local_batch_size 8
            "seq": 2048,                 // [training] seq_len 2048
            "compile": true,             // [training] compile = true
            "precision": "bf16-mixed",   // mixed_precision_param "bfloat16"
            "framework": "fsdp",
            "parallel": {"zero": 3},
            "optimizer": "adamw",        // name "AdamW" (beta1/beta2/weight_decay: no bytes)
        })
    );
    resolves(&r);
    // enable_wandb is a [metrics] key: quiet.
    assert!(!has_note(&r, "ignored"), "{:?}", r.notes);
}

#[test]
fn debug_model_compile_section_and_layer_ac() {
    let r = from(vec![fixture("debug_model.toml")]);
    // flavor "debugmodel" is no published model: MODEL must be given.
    assert!(has_note(&r, "flavor debugmodel"), "{:?}", r.notes);
    assert!(!r.job.contains_key("model"));
    // [compile] enable=false (stated off: the field is set); selective_ac_option '2'
    assert_eq!(r.job["compile"], json!(false));
    assert!(!r.job.contains_key("checkpointing"));
    assert!(has_note(&r, "one block in every 2"), "{:?}", r.notes);
    assert_eq!(r.job["batch"], json!(8)); // local_batch_size 8
    assert_eq!(r.job["seq"], json!(2048)); // seq_len 2048
    resolves(&r);
}

/// Explicit degrees multiply into the GPU count: 2 (replicate) × 4 (shard) × 2 (tp) × 2 (pp)
/// = 32 GPUs; `[compile] enable = true` sets compile.
#[test]
fn explicit_degrees_give_the_gpu_count() {
    let r = from(vec![text(
        "t.toml",
        "[model]\nname = \"llama3\"\nflavor = \"70B\"\n[training]\nlocal_batch_size = 1\n\
         seq_len = 4096\n[parallelism]\ndata_parallel_replicate_degree = 2\n\
         data_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n\
         pipeline_parallel_degree = 2\n[compile]\nenable = true\n",
    )]);
    assert_eq!(r.job["model"], json!("llama-3.1-70b"));
    assert_eq!(
        r.job["parallel"],
        json!({"tp": 2, "sp": true, "pp": 2, "gpus": 32, "zero": 3})
    );
    assert_eq!(r.job["compile"], json!(true));
}

#[test]
fn bad_values_are_refused_with_their_key() {
    let e = resolve(
        &[text(
            "t.toml",
            "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 8\n\
             [activation_checkpoint]\nmode = \"partial\"\n",
        )],
        &|_, _| None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("activation_checkpoint.mode") && e.contains("t.toml"),
        "{e}"
    );
    let e = resolve(
        &[text(
            "t.toml",
            "[model]\nflavor = \"8B\"\n[training]\n[parallelism]\ntensor_parallel_degree = 0\n",
        )],
        &|_, _| None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tensor_parallel_degree"), "{e}");
}

proptest! {
    /// Any text given as a TOML-looking config is read or refused, never a panic.
    #[test]
    fn arbitrary_toml_never_panics(body in "[\\[\\]a-z_=\" 0-9.\\n-]{0,200}") {
        let t = format!("[model]\nflavor = \"8B\"\n[training]\n{body}");
        let _ = resolve(&[text("p.toml", &t)], &|_, _| None);
    }
}
