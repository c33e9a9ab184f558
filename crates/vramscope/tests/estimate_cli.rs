//! `estimate` and `validate` as scripts meet them: the same job from flags, JSON and TOML;
//! flags over files; one-line errors naming the field (exit 2); `--require-fit` (exit 1);
//! the validation summary.

mod common;
use common::argv;
use common::{json_of_cmd, plain_vramscope as vramscope, refused_with, shared};
use common::{strs, text_of_cmd, text_with_code};

use serde_json::{json, Value};
use std::path::PathBuf;

/// Writes `text` to a file unique to this test process and returns its path.
fn temp_file(name: &str, text: &str) -> PathBuf {
    common::temp_file("estimate-cli", name, text)
}

fn report(args: &[&str]) -> Value {
    json_of_cmd(vramscope().arg("estimate").args(args).arg("--json"), &args)
}

/// Runs `estimate` expecting exit 2 and returns the one stderr line.
fn bad(args: &[&str]) -> String {
    refused_with(
        &vramscope().arg("estimate").args(args).output().unwrap(),
        &args,
    )
}

fn validation(rel: &str) -> String {
    shared(format!(
        "{}/../../../shared/validation/{rel}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

#[test]
fn flags_json_and_toml_give_the_same_job() {
    let flags = report(&argv("llama-3.1-8b --task train --batch 2 --grad-accum 3 --seq 512 --precision fp16-mixed --optimizer adamw-fused --checkpointing selective --attention flash --framework deepspeed --gpus 4 --tp 2 --zero 2 --offload optimizer --gpu a100-80gb --lora 8 --lora-alpha 16 --lora-targets q_proj,v_proj"));
    let json_job = temp_file(
        "same.json",
        &json!({
            "model": "llama-3.1-8b", "task": "train", "batch": 2, "grad_accum": 3.0,
            "seq": 512, "precision": "fp16-mixed", "optimizer": "adamw-fused",
            "checkpointing": "selective", "attention": "flash", "framework": "deepspeed",
            "parallel": {"gpus": 4, "tp": 2, "zero": 2, "offload": "optimizer"},
            "gpu": "a100-80gb",
            "peft": {"method": "lora", "rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"]}
        })
        .to_string(),
    );
    let toml_job = temp_file(
        "same.toml",
        r#"
model = "llama-3.1-8b"
task = "train"
batch = 2
grad_accum = 3
seq = 512
precision = "fp16-mixed"
optimizer = "adamw-fused"
checkpointing = "selective"
attention = "flash"
framework = "deepspeed"
gpu = "a100-80gb"

[parallel]
gpus = 4
tp = 2
zero = 2
offload = "optimizer"

[peft]
method = "lora"
rank = 8
alpha = 16
targets = ["q_proj", "v_proj"]
"#,
    );
    // A TOML file whose name says nothing is still read (JSON first, then TOML).
    let toml_unnamed = temp_file("same.job", &std::fs::read_to_string(&toml_job).unwrap());
    let j = flags["job"].clone();
    for file in [&json_job, &toml_job, &toml_unnamed] {
        let from_file = report(&["--job", file.to_str().unwrap()]);
        assert_eq!(from_file["job"], j, "{}", file.display());
    }
    // The layout resolved by the contract's rule: dp = gpus / (tp × pp × cp) = 4 / 2.
    assert_eq!(j["parallel"]["dp"], 2);
    assert_eq!(j["grad_accum"], 3);
    assert_eq!(j["peft"]["targets"], json!(["q_proj", "v_proj"]));
}

#[test]
fn infer_and_engine_flags_match_the_file() {
    let flags = report(&argv("qwen2.5-7b --task infer --batch 8 --seq 1000 --new-tokens 24 --kv-dtype fp8 --framework vllm --gpu-memory-utilization 0.85 --block-size 16 --max-model-len 4096"));
    let file = temp_file(
        "infer.json",
        &json!({
            "model": "qwen2.5-7b", "task": "infer", "batch": 8, "seq": 1000, "new_tokens": 24,
            "kv_dtype": "fp8", "framework": "vllm",
            "engine": {"gpu_memory_utilization": 0.85, "block_size": 16, "max_model_len": 4096}
        })
        .to_string(),
    );
    let from_file = report(&["--job", file.to_str().unwrap()]);
    assert_eq!(from_file["job"], flags["job"]);
    // Infer defaults: bf16, no optimizer (the documented defaults).
    assert_eq!(flags["job"]["precision"], "bf16");
    assert_eq!(flags["job"]["optimizer"], "none");
    assert_eq!(flags["job"]["engine"]["gpu_memory_utilization"], 0.85);
}

#[test]
fn flags_override_the_file_and_model_overrides_its_model() {
    let file = temp_file(
        "base.json",
        &json!({"model": "llama-3.1-8b", "batch": 2, "seq": 512, "gpu": "a100-80gb",
                "parallel": {"gpus": 4, "dp": 4, "zero": 1}})
        .to_string(),
    );
    let f = file.to_str().unwrap();
    let r = report(&[
        "gpt2", "--job", f, "--batch", "4", "--gpu", "none", "--gpus", "8",
    ]);
    let j = &r["job"];
    assert_eq!(j["model"], "gpt2");
    assert_eq!(r["model"]["name"], "gpt2");
    assert_eq!(j["batch"], 4);
    assert_eq!(j["seq"], 512);
    assert!(j["gpu"].is_null());
    // --gpus replaces the file's layout: dp is derived again (8 / 1), zero is kept.
    assert_eq!(
        (j["parallel"]["gpus"].clone(), j["parallel"]["dp"].clone()),
        (json!(8), json!(8))
    );
    assert_eq!(j["parallel"]["zero"], 1);
    assert!(r["fit"].is_null());
}

#[test]
fn bad_input_names_the_field() {
    for (args, field) in [
        (vec!["gpt2", "--batch", "0"], "batch"),
        (vec!["gpt2", "--batch", "-3"], "batch"),
        (vec!["gpt2", "--seq", "0"], "seq"),
        (vec!["gpt2", "--grad-accum", "0"], "grad_accum"),
        (vec!["gpt2", "--optimizer", "adamx"], "optimizer"),
        (vec!["gpt2", "--gpu", "nope"], "gpu"),
        (vec!["gpt2", "--precision", "bf17"], "precision"),
        (vec!["gpt2", "--zero", "4"], "parallel.zero"),
        (vec!["gpt2", "--gpus", "8", "--dp", "3"], "parallel.gpus"),
        (vec!["gpt2", "--lora", "0"], "peft.rank"),
        (vec!["gpt2", "--lora-alpha", "8"], "peft"),
        (vec!["gpt2", "--lora-dtype", "bf16"], "peft"),
        (
            vec!["gpt2", "--lora", "8", "--lora-dtype", "int4"],
            "peft.adapter_dtype",
        ),
        (
            vec!["gpt2", "--lora", "8", "--lora-dropout", "1"],
            "peft.dropout",
        ),
        (
            vec!["gpt2", "--lora", "8", "--lora-dropout", "x"],
            "peft.dropout",
        ),
        (vec!["--batch", "2"], "model"),
    ] {
        let e = bad(&args);
        assert!(e.starts_with(&format!("error: {field}:")), "{args:?}: {e}");
    }
    let e = bad(&["no-such-model-anywhere"]);
    assert!(e.contains("no-such-model-anywhere"), "{e}");
}

#[test]
fn bad_job_files_are_named() {
    let batch0 = temp_file("batch0.json", r#"{"model": "gpt2", "batch": 0}"#);
    let e = bad(&["--job", batch0.to_str().unwrap()]);
    assert!(e.starts_with("error: batch:"), "{e}");

    let unknown = temp_file("unknown.json", r#"{"model": "gpt2", "batchsize": 2}"#);
    let e = bad(&["--job", unknown.to_str().unwrap()]);
    assert!(e.contains("unknown.json") && e.contains("batchsize"), "{e}");

    let unknown = temp_file("unknown.toml", "model = \"gpt2\"\nbatchsize = 2\n");
    let e = bad(&["--job", unknown.to_str().unwrap()]);
    assert!(e.contains("unknown.toml") && e.contains("batchsize"), "{e}");

    let broken = temp_file("broken.json", r#"{"model": "gpt2", "#);
    let e = bad(&["--job", broken.to_str().unwrap()]);
    assert!(e.contains("broken.json"), "{e}");

    let typed = temp_file(
        "typed.json",
        r#"{"model": "gpt2", "parallel": {"sp": "yes"}}"#,
    );
    let e = bad(&["--job", typed.to_str().unwrap()]);
    assert!(e.starts_with("error: parallel.sp:"), "{e}");

    let missing = std::env::temp_dir().join("vramscope-no-such-job-file.json");
    let e = bad(&["--job", missing.to_str().unwrap()]);
    assert!(e.contains("vramscope-no-such-job-file.json"), "{e}");
}

#[test]
fn require_fit_exits_1_when_the_job_does_not_fit() {
    // Llama-3.1-70B holds 70.55e9 parameters: its bf16 weights alone (2 bytes each, 141 GB)
    // are nine times a T4's 16 GB, so training cannot fit whatever else is counted.
    vramscope()
        .args(argv("estimate llama-3.1-70b --task train --gpu t4-16gb"))
        .arg("--require-fit")
        .assert()
        .code(1);
    // GPT-2 inference at batch 1 × 128 tokens: 124.4e6 parameters × 4 bytes is 0.5 GB of
    // weights and a 128-token KV cache is 12 layers × 2 × 128 × 768 × 2 bytes = 4.7 MB, far
    // under an H100's 80 GB.
    vramscope()
        .args([
            "estimate", "gpt2", "--task", "infer", "--batch", "1", "--seq", "128",
        ])
        .args(["--gpu", "h100-80gb", "--require-fit"])
        .assert()
        .success();
    // The verdict with --json too: the report on stdout, the exit code for the script.
    let v: Value = serde_json::from_str(&text_with_code(
        vramscope().args(argv(
            "estimate llama-3.1-70b --gpu t4-16gb --require-fit --json",
        )),
        1,
    ))
    .unwrap();
    assert_eq!(v["job"]["gpu"], "t4-16gb");
    // Without a GPU there is nothing to fit: a usage error naming the flag.
    let e = bad(&["gpt2", "--require-fit"]);
    assert!(e.contains("--require-fit"), "{e}");
}

#[test]
fn human_output_is_a_table_and_one_picture() {
    let text = text_of_cmd(
        vramscope()
            .args(argv("estimate gpt2 --task infer --seq 128 --gpu h100-80gb"))
            .args(["--color", "never"]),
    );
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.starts_with("gpt2"), "{text}");
    assert!(text.contains("parameters"), "{text}");
    assert!(text.contains("fits h100-80gb"), "{text}");
    assert!(text.contains("·· free"), "{text}");
    for l in text.lines() {
        assert!(l.chars().count() <= 80, "{l}");
    }
    let bar = text.lines().find(|l| l.starts_with("  │")).expect("a bar");
    assert_eq!(bar.chars().count(), 2 + 1 + 72 + 1);
}

#[test]
fn help_documents_the_defaults() {
    let help = text_of_cmd(vramscope().args(["estimate", "--help"]));
    for s in [
        "task train",
        "batch 1",
        "grad_accum 1",
        "min(2048",
        "bf16-mixed",
        "adamw",
        "checkpointing none",
        "attention sdpa",
        "framework pytorch",
        "--require-fit",
        "--lora-targets",
        "--n-gpu-layers",
        "cuda_module_loading lazy",
        "--cuda-module-loading",
        "zero_grad none",
        "--zero-grad",
        "optimizer_impl foreach",
        "--optimizer-impl",
        "optimizer_in_backward false",
        "activation_offload none",
        "--optimizer-in-backward",
        "--activation-offload",
        "--compile",
        "adamw-8bit-paged",
    ] {
        assert!(help.contains(s), "help lacks {s}");
    }
}

#[test]
fn validate_scores_the_dev_cases() {
    let file = validation("dev-cases.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let text =
        text_of_cmd(vramscope().args(["validate", &file, "--color", "never", "--report-only"]));
    let summary = text
        .lines()
        .find(|l| l.contains(" passed, ") && l.contains(" failed"))
        .unwrap_or_else(|| panic!("no summary line in\n{text}"));
    let numbers: Vec<usize> = summary
        .split(", ")
        .map(|p| p.split(' ').next().unwrap().parse().expect(summary))
        .collect();
    assert!(
        (2..=3).contains(&numbers.len()) && summary.starts_with(char::is_numeric),
        "{summary}"
    );
    assert_eq!(numbers.iter().sum::<usize>(), cases.len(), "{summary}");
    assert!(text.contains("median |error|"), "{text}");
    // Every case has a row.
    for c in &cases {
        assert!(
            text.contains(c["id"].as_str().unwrap()),
            "{} missing",
            c["id"]
        );
    }

    // Without --report-only the exit code says whether every case passed (1 when one failed
    // or did not run), for CI.
    let out = vramscope()
        .args(["validate", &file, "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cases"].as_array().unwrap().len(), cases.len());
    let s = &v["summary"];
    let bad = s["failed"].as_u64().unwrap() + s["errored"].as_u64().unwrap();
    assert_eq!(out.status.code(), Some(i32::from(bad > 0)), "{s}");
    assert_eq!(
        s["passed"].as_u64().unwrap()
            + s["failed"].as_u64().unwrap()
            + s["errored"].as_u64().unwrap(),
        cases.len() as u64
    );
}

#[test]
fn validate_reads_its_own_cases_and_rejects_bad_files() {
    // A GPT-2 parameter count is exact: 124,439,808 (transformers' GPT2LMHeadModel, tied head).
    // The second case reads a path that no report has: it fails to run but is still reported.
    let file = temp_file(
        "cases.json",
        &json!([
            {"id": "gpt2-params", "job": {"model": "gpt2"}, "metric": "model.params_total",
             "expected_bytes": 124_439_808u64, "tolerance": 0},
            {"id": "no-such-metric", "job": {"model": "gpt2"}, "metric": "per_gpu.nothing",
             "expected_bytes": 1, "tolerance": 0.05},
            {"id": "bad-job", "job": {"model": "gpt2", "batch": 0}, "metric": "model.params_total",
             "expected_bytes": 1, "tolerance": 0.05}
        ])
        .to_string(),
    );
    // Two cases did not run: exit 1 (the report still printed); --report-only exits 0.
    let text = text_with_code(
        vramscope().args(["validate", file.to_str().unwrap(), "--color", "never"]),
        1,
    );
    assert!(
        text.lines().any(|l| l == "1 passed, 0 failed, 2 errored"),
        "{text}"
    );
    vramscope()
        .args(["validate", file.to_str().unwrap(), "--report-only"])
        .assert()
        .success();
    assert!(text.contains("missing per_gpu.nothing"), "{text}");
    assert!(text.contains("batch: must be at least 1"), "{text}");

    for (name, body, why) in [
        ("notalist.json", r#"{"id": "x"}"#, "list"),
        (
            "nometric.json",
            r#"[{"id": "x", "job": {}, "expected_bytes": 1, "tolerance": 0}]"#,
            "metric",
        ),
        ("notjson.json", "[{", "invalid JSON"),
    ] {
        let f = temp_file(name, body);
        let out = vramscope()
            .args(["validate", f.to_str().unwrap()])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(name) && err.contains(why), "{err}");
    }
}

/// A case measured on the CPU (`"measured_on": "cpu"`) has its peak compared net of the BLAS
/// workspaces the estimate counts and a CPU run lacks; the netting decides pass/fail. The case
/// is the tiny Qwen2-VL's of `validation/cpu-measured-vlm.json`: measured peak 8,680,960 B
/// (`measure.py`, read off the run), tolerance 3 %. With no GPU named the estimate counts two
/// cuBLAS workspaces (forward and backward handles), each cuBLAS's default `:4096:2:16:8` =
/// 2 × 4 MiB + 8 × 16 KiB = 8,519,680 B: 17,039,360 B (16.25 MiB), about twice the whole measured step, so
/// the same case unmarked (or marked `cuda`) reads ~+196 % and fails, and marked `cpu` passes.
/// The marker names the figure; an activation case is not netted; a `measured_on` that is not
/// a string is refused (exit 2).
#[test]
fn validate_nets_blas_workspaces_of_cpu_cases() {
    let path = format!(
        "{}/../../validation/cpu-measured-vlm.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let peak = cases
        .iter()
        .find(|c| c["id"] == "cpu-tiny-qwen2vl-fp32-adamw-peak")
        .unwrap();
    assert_eq!(peak["expected_bytes"], 8_680_960);
    let variant = |id: &str, on: Value| {
        let mut c = peak.clone();
        c["id"] = json!(id);
        c["measured_on"] = on;
        c
    };
    let file = temp_file(
        "cpu-cases.json",
        &json!([
            variant("cpu", json!("cpu")),
            variant("unmarked", Value::Null),
            variant("cuda", json!("cuda"))
        ])
        .to_string(),
    );
    let v = json_of_cmd(
        vramscope().args([
            "validate",
            file.to_str().unwrap(),
            "--json",
            "--report-only",
        ]),
        &"validate",
    );
    let row = |i: usize| &v["cases"][i];
    assert_eq!(row(0)["status"], "pass", "{v}");
    assert_eq!(row(0)["netted"], 17_039_360, "{v}");
    for i in [1, 2] {
        assert_eq!(row(i)["status"], "fail", "{v}");
        assert!(row(i).get("netted").is_none(), "{v}");
        // The netting is the whole difference between the two readings.
        let raw = row(i)["got"].as_f64().unwrap();
        assert_eq!(raw - row(0)["got"].as_f64().unwrap(), 17_039_360.0);
        assert!(row(i)["error"].as_f64().unwrap() > 1.9, "{v}");
    }
    let text = text_with_code(
        vramscope().args(["validate", file.to_str().unwrap(), "--color", "never"]),
        1,
    );
    let marked: Vec<&str> = text.lines().filter(|l| l.contains("cpu: net of")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(
        marked[0].starts_with("cpu ") && marked[0].contains("16.25 MiB"),
        "{text}"
    );

    let activations = cases
        .iter()
        .find(|c| c["id"] == "cpu-tiny-qwen2vl-fp32-adamw-act-per-layer")
        .unwrap();
    let mut unmarked = activations.clone();
    unmarked["measured_on"] = Value::Null;
    let f = temp_file("cpu-act.json", &json!([activations, unmarked]).to_string());
    let v = json_of_cmd(
        vramscope().args(["validate", f.to_str().unwrap(), "--json", "--report-only"]),
        &"validate",
    );
    assert!(v["cases"][0].get("netted").is_none(), "{v}");
    assert_eq!(v["cases"][0]["got"], v["cases"][1]["got"], "{v}");

    let mut bad = peak.clone();
    bad["measured_on"] = json!(1);
    let f = temp_file("cpu-bad.json", &json!([bad]).to_string());
    let out = vramscope()
        .args(["validate", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("'measured_on' must be a string"), "{err}");
}

/// The advice's flags, added to the command line that made the job, give a job that fits,
/// with the device total the advice states; a job that fits carries no advice unless
/// `--advise` asks; the human output says "does not fit → do this" with the first flags.
#[test]
fn advice_flags_reproduce_the_advice() {
    for args in [
        vec!["llama-3.1-8b", "--gpu", "rtx4090-24gb"],
        vec!["llama-3.1-70b", "--gpu", "h100-80gb", "--gpus", "8"],
        vec![
            "llama-3.1-8b",
            "--task",
            "infer",
            "--framework",
            "vllm",
            "--gpu",
            "a10-24gb",
        ],
    ] {
        let r = report(&args);
        assert_eq!(r["fit"]["fits"], false, "{args:?}");
        let advice = r["advice"].as_array().expect("advice when it does not fit");
        assert!(!advice.is_empty(), "{args:?}");
        for a in advice {
            let flags = strs(&a["flags"]);
            let mut with = args.clone();
            with.extend(flags.iter().copied());
            let again = report(&with);
            assert_eq!(again["fit"]["fits"], true, "{with:?}");
            assert_eq!(
                again["per_gpu"]["device_total"], a["device_total"],
                "{with:?}"
            );
            // Contract: flags, changes, device_total, headroom, gives_up.
            for k in ["changes", "headroom", "gives_up"] {
                assert!(!a[k].is_null(), "{k}");
            }
        }
        let text = text_of_cmd(vramscope().arg("estimate").args(&args));
        let first = strs(&advice[0]["flags"]);
        assert!(text.contains("does not fit → do this"), "{text}");
        assert!(text.contains(&format!("1. {}", first.join(" "))), "{text}");
    }
    let fits = report(&["gpt2", "--gpu", "h100-80gb"]);
    assert!(fits.get("advice").is_none());
    let asked = report(&["gpt2", "--gpu", "h100-80gb", "--advise"]);
    assert!(asked["advice"].is_array());
}
