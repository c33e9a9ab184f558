//! Every what-if row and every piece of advice of a set of serving jobs (vLLM, llama.cpp,
//! ollama, SGLang, and a model too large for its engine) is a change the tool accepts: each
//! is re-run through the CLI as `estimate --job JOB FLAGS --json`, and its device total and
//! verdict are reproduced (issue 31: "the what-if rows must be flags the tool accepts").

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use vramscope::app::job::prepare;
use vramscope::app::Session;
use vramscope_core::job::Job;

fn job_file(i: usize, job: &Value) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-rerun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("job-{i}.json"));
    std::fs::write(&p, job.to_string()).unwrap();
    p
}

/// `estimate --job FILE FLAGS --json` (Hub off): the report, or the refusal's message.
fn estimate(file: &Path, flags: &[String], advise: bool) -> Result<Value, String> {
    let mut args = vec![
        "estimate".to_string(),
        "--job".into(),
        file.display().to_string(),
    ];
    args.extend(flags.iter().cloned());
    if advise {
        args.push("--advise".into());
    }
    args.push("--json".into());
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(&args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// One change to re-run: its name, its flags, and the device total and verdict it showed.
type Case = (String, Vec<String>, Option<u64>, Option<bool>);

fn jobs() -> Vec<Value> {
    vec![
        // Issue 31's vLLM job: the model's 131,072 positions do not fit the pool.
        json!({"model": "qwen2.5-32b", "task": "infer", "framework": "vllm",
               "gpu": "l40s-48gb", "parallel": {"gpus": 2, "tp": 2}}),
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "vllm",
               "gpu": "a100-80gb", "batch": 8, "seq": 4096}),
        // A MoE too large for one 24 GB card: under vLLM and transformers the advice is
        // llama.cpp with a GGUF quant and layers in host RAM; under llama.cpp and ollama too.
        json!({"model": "mixtral-8x7b", "task": "infer", "framework": "vllm",
               "gpu": "rtx4090-24gb"}),
        json!({"model": "mixtral-8x7b", "task": "infer", "framework": "pytorch",
               "gpu": "rtx4090-24gb"}),
        json!({"model": "mixtral-8x7b", "task": "infer", "framework": "llama.cpp",
               "gpu": "rtx4090-24gb"}),
        json!({"model": "mixtral-8x7b", "task": "infer", "framework": "ollama",
               "gpu": "rtx4090-24gb"}),
        json!({"model": "llama-3.1-70b", "task": "infer", "framework": "ollama",
               "gpu": "rtx4090-24gb", "weights": "gguf:Q4_K_M"}),
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "sglang",
               "gpu": "a100-80gb", "seq": 4000, "new_tokens": 96}),
    ]
}

#[test]
fn every_serving_row_and_advice_reruns_with_its_flags() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (i, job) in jobs().iter().enumerate() {
        let file = job_file(i, job);
        let parsed: Job = serde_json::from_value(job.clone()).unwrap();
        let p = prepare(&Session::default(), &parsed).unwrap();
        let rows = p.what_if().unwrap();
        let base = estimate(&file, &[], true).unwrap();
        let advice = base["advice"].as_array().cloned().unwrap_or_default();
        if job["model"] == "mixtral-8x7b" {
            assert!(!advice.is_empty(), "{job}: no advice");
        }
        let mut cases: Vec<Case> = rows
            .iter()
            .map(|r| {
                (
                    format!("what-if {}", r.technique),
                    r.flags.clone(),
                    r.device_total,
                    r.fits,
                )
            })
            .collect();
        for a in &advice {
            let flags: Vec<String> = a["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            cases.push((
                format!("advice {:?}", a["techniques"]),
                flags,
                a["device_total"].as_u64(),
                Some(true),
            ));
        }
        for (name, flags, total, fits) in cases {
            checked += 1;
            match estimate(&file, &flags, false) {
                Err(e) => failures.push(format!("{job} {name}: refused: {e}")),
                Ok(r) => {
                    let got = r["per_gpu"]["device_total"].as_u64();
                    let verdict = r["fit"]["fits"].as_bool();
                    if got != total || verdict != fits {
                        failures.push(format!(
                            "{job} {name} {flags:?}: device {got:?} fits {verdict:?}, \
                             the row said {total:?} {fits:?}"
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} rows");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
