//! What a user copies must work (issue 31, items 5–7): every what-if row and every advice entry
//! for a set of training jobs (a full fine-tune, LoRA, QLoRA, eight GPUs, the torchtune and
//! axolotl recipes of `crates/formats/tests/fixtures/recipes/`, the torchtune full fine-tune
//! with the optimizer in backward) is re-run with its flags added to the job's own command
//! line: the CLI accepts it (exit 0), and reports the device total, peak and verdict the row or
//! entry states. No two rows of a table carry the same flags.

mod common;
use common::argv;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// A recipe fixture's path.
fn recipe(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../formats/tests/fixtures/recipes")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// `estimate ARGS --json` (Hub access off): the Report, or the one-line error and exit code.
fn estimate(args: &[String]) -> Result<Value, (i32, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg("estimate")
        .args(args)
        .arg("--json")
        .env("HF_HUB_OFFLINE", "1")
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        return Err((out.status.code().unwrap_or(-1), err));
    }
    Ok(serde_json::from_slice(&out.stdout).expect("stdout is the Report"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

/// The job's arguments with `flags` appended (a flag given twice takes its last value).
fn with(args: &[String], flags: &[String]) -> Vec<String> {
    args.iter().chain(flags).cloned().collect()
}

/// The what-if rows of the job the report echoes, through the application layer (the job
/// round-trips: the report's `job` read back as a job file gives the same job).
fn what_if_rows(report: &Value) -> Vec<Value> {
    let job: vramscope_core::job::Job = serde_json::from_value(report["job"].clone()).unwrap();
    let rows = vramscope::app::job::prepare(&vramscope::app::Session::default(), &job)
        .unwrap()
        .what_if()
        .unwrap();
    serde_json::to_value(rows)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Re-runs every row and entry of the job `args`; returns the report and its advice.
fn check(args: &[String]) -> (Value, Vec<Value>) {
    let mut base = args.to_vec();
    base.push("--advise".into());
    let report = estimate(&base).unwrap_or_else(|e| panic!("{args:?}: {e:?}"));
    let rows = what_if_rows(&report);
    assert!(!rows.is_empty(), "{args:?}: no what-if rows");
    let mut seen: Vec<(Vec<String>, Value)> = Vec::new();
    for row in &rows {
        let flags = strings(&row["flags"]);
        let key = (
            flags.clone(),
            row.get("env").cloned().unwrap_or(Value::Null),
        );
        assert!(!seen.contains(&key), "{args:?}: row {flags:?} twice");
        seen.push(key);
        let again = estimate(&with(args, &flags))
            .unwrap_or_else(|e| panic!("{args:?} + row {flags:?} refused: {e:?}"));
        let p = &again["per_gpu"];
        assert_eq!(
            p["device_total"], row["device_total"],
            "{args:?} + {flags:?}"
        );
        assert_eq!(
            p["peak_allocated"], row["peak_allocated"],
            "{args:?} + {flags:?}"
        );
        assert_eq!(again["fit"]["fits"], row["fits"], "{args:?} + {flags:?}");
    }
    let advice = report["advice"].as_array().cloned().unwrap_or_default();
    for a in &advice {
        let flags = strings(&a["flags"]);
        let again = estimate(&with(args, &flags))
            .unwrap_or_else(|e| panic!("{args:?} + advice {flags:?} refused: {e:?}"));
        assert_eq!(again["fit"]["fits"], true, "{args:?} + {flags:?}");
        assert_eq!(
            again["per_gpu"]["device_total"], a["device_total"],
            "{args:?} + {flags:?}"
        );
        assert_eq!(
            again["fit"]["headroom"], a["headroom"],
            "{args:?} + {flags:?}"
        );
    }
    (report, advice)
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Plain jobs: full fine-tunes (one GPU, eight), LoRA (also with saved modules), QLoRA.
#[test]
fn every_row_and_entry_of_plain_jobs_reruns() {
    for a in [
        args(&["llama-3.1-8b", "--gpu", "rtx4090-24gb"]),
        args(&["llama-3.1-8b", "--gpu", "rtx4090-24gb", "--batch", "4"]),
        args(&argv("llama-3.1-8b --gpu rtx4090-24gb --lora 16 --batch 4")),
        args(&argv("llama-3.1-8b --gpu a10-24gb --qlora 16 --seq 8192")),
        args(&argv("llama-3-8b --gpu rtx4090-24gb --lora 16 --batch 4 --lora-modules-to-save embed_tokens,lm_head")),
        args(&["llama-3.1-70b", "--gpu", "h100-80gb", "--gpus", "8"]),
        args(&["gpt2", "--gpu", "t4-16gb", "--batch", "32", "--seq", "1024"]),
    ] {
        check(&a);
    }
}

/// The recipes: torchtune's (the full fine-tune sets the optimizer in backward, so neither
/// accumulation nor DeepSpeed may be offered) and axolotl's (its 8B model by preset).
#[test]
fn every_row_and_entry_of_the_recipes_reruns() {
    for (rel, model) in [
        ("torchtune/llama3_1_8B_full_single_device.yaml", None),
        ("torchtune/llama3_1_8B_lora_single_device.yaml", None),
        ("torchtune/llama3_1_8B_qlora_single_device.yaml", None),
        ("axolotl/llama3_lora-8b.yml", Some("llama-3-8b")),
        ("axolotl/llama3_qlora.yml", Some("llama-3-8b")),
        ("axolotl/llama3_fft-8b.yaml", Some("llama-3-8b")),
    ] {
        let mut a: Vec<String> = model.into_iter().map(String::from).collect();
        a.extend(args(&["--from", &recipe(rel), "--gpu", "rtx4090-24gb"]));
        let (report, _) = check(&a);
        if report["job"]["optimizer_in_backward"] == true {
            let rows = what_if_rows(&report);
            for row in rows
                .iter()
                .chain(report["advice"].as_array().into_iter().flatten())
            {
                let flags = strings(&row["flags"]);
                assert!(
                    !flags
                        .iter()
                        .any(|f| f == "--grad-accum" || f == "deepspeed"),
                    "{rel}: {flags:?} cannot run with the optimizer in backward"
                );
            }
        }
    }
}

/// A full fine-tune of an 8B on a 24 GB card with 32 GiB of host RAM: ZeRO-Infinity (134.6 GiB
/// of host RAM: the fp32 master, both Adam moments and the fp32 gradients, 16 B × 8.03e9 =
/// 119.7 GiB, plus the bf16 parameters, 2 B × 8.03e9 = 14.96 GiB) is not offered; the combination that keeps every weight trained on the GPU
/// is: pure bf16 weights (2 B × 8.03e9 = 15.0 GiB), paged 8-bit AdamW, each gradient stepped
/// in its hook, full recomputation. Its host RAM is the paged states the GPU has no room for.
#[test]
fn a_full_fine_tune_is_offered_the_combination_that_trains_every_weight() {
    let a = args(&["llama-3.1-8b", "--gpu", "rtx4090-24gb", "--host-ram", "32"]);
    let (_, advice) = check(&a);
    let want = args(&argv("--precision bf16 --optimizer adamw-8bit-paged --optimizer-in-backward --checkpointing full"));
    assert!(
        advice.iter().any(|e| strings(&e["flags"]) == want),
        "{advice:#?}"
    );
    let infinity = args(&argv(
        "--framework deepspeed --zero 3 --offload optimizer+params",
    ));
    for e in &advice {
        let host = e["host_bytes"].as_u64().unwrap_or(0);
        assert!(host <= 32 << 30, "{e:#?}");
        assert_ne!(strings(&e["flags"]), infinity);
    }
    // Without a host RAM limit ZeRO-Infinity over the full model stays offered.
    let (_, open) = check(&args(&["llama-3.1-8b", "--gpu", "rtx4090-24gb"]));
    assert!(open.iter().any(|e| strings(&e["flags"]) == infinity));
}

/// Serving jobs (vLLM, llama.cpp, ollama): their rows and entries are flags the CLI accepts.
#[test]
fn every_row_and_entry_of_serving_jobs_reruns() {
    for a in [
        args(&argv("llama-3.1-8b --task infer --framework vllm --gpu a10-24gb")),
        args(&argv("llama-3.1-8b --task infer --framework llama.cpp --gpu rtx4090-24gb --batch 4 --seq 8192")),
        args(&argv("llama-3.1-8b --task infer --framework ollama --gpu t4-16gb")),
    ] {
        check(&a);
    }
}
