//! The application layer against the CLI: `vramscope::app::call_json` (what the Python package
//! binds) answers byte for byte what the `vramscope` binary prints with `--json`, and fails
//! with the CLI's one-line message and exit code.

mod common;
use common::shared;

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use vramscope::app::{self, AppError, Session};

/// `app::call_json` as the Python package calls it: each call with its own session.
fn call_json(command: &str, input_json: &str) -> Result<String, AppError> {
    app::call_json(&Session::default(), command, input_json)
}

/// `../shared/<rel>` beside the repository.
fn shared_path(rel: &str) -> PathBuf {
    shared(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared")
            .join(rel),
    )
}

/// The binary's stdout, stderr and exit code (Hub access off: only local models resolve).
fn cli(args: &[&str]) -> (Vec<u8>, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.stdout, err, out.status.code().unwrap_or(-1))
}

/// A job written to a file of its own for `--job`.
fn job_file(name: &str, job: &Value) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-app-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, job.to_string()).unwrap();
    p
}

/// The CLI's `--json` answer for `args` (which must succeed).
fn cli_json(args: &[&str]) -> String {
    let (out, err, code) = cli(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    String::from_utf8(out).unwrap()
}

fn jobs() -> Vec<(&'static str, Value)> {
    let tiny = shared_path("fixtures/hf_tiny_llama");
    let gguf = shared_path("fixtures/tiny_llama_q8.gguf");
    vec![
        (
            "train",
            json!({"model": "llama-3.1-8b", "task": "train", "batch": 2, "seq": 4096,
                   "gpu": "h100-80gb"}),
        ),
        (
            "infer",
            json!({"model": "qwen2.5-7b", "task": "infer", "batch": 8, "seq": 1024,
                   "new_tokens": 512, "gpu": "l40s-48gb", "kv_dtype": "fp8"}),
        ),
        (
            "vllm",
            json!({"model": "llama-3.1-8b", "task": "infer", "framework": "vllm",
                   "batch": 16, "seq": 2048, "gpu": "a100-80gb",
                   "engine": {"gpu_memory_utilization": 0.85}}),
        ),
        (
            "local",
            json!({"model": tiny.to_str().unwrap(), "batch": 4, "seq": 128}),
        ),
        (
            "gguf",
            json!({"model": gguf.to_str().unwrap(), "task": "infer", "framework": "llama.cpp",
                   "seq": 256, "gpu": "rtx4090-24gb"}),
        ),
        (
            "qlora-zero3",
            json!({"model": "mistral-7b-v0.1", "peft": {"method": "qlora", "rank": 8},
                   "framework": "deepspeed", "parallel": {"gpus": 4, "zero": 3},
                   "gpu": "a10-24gb", "checkpointing": "full"}),
        ),
        // A bare parameter count: activation figures are null, with a warning.
        (
            "params",
            json!({"model": {"params": 7.5e9}, "gpu": "h100-80gb"}),
        ),
        // Does not fit: the advice is searched, in both.
        (
            "nofit",
            json!({"model": "llama-3.1-70b", "batch": 1, "seq": 2048, "gpu": "rtx4090-24gb"}),
        ),
    ]
}

#[test]
fn estimate_is_the_clis_json_byte_for_byte() {
    for (name, job) in jobs() {
        let f = job_file(&format!("{name}.json"), &job);
        let want = cli_json(&["estimate", "--json", "--job", f.to_str().unwrap()]);
        let got = call_json("estimate", &json!({ "job": job }).to_string()).unwrap();
        assert_eq!(got, want, "{name}");
        let want = cli_json(&[
            "estimate",
            "--json",
            "--advise",
            "--job",
            f.to_str().unwrap(),
        ]);
        let got = call_json("estimate", &json!({"job": job, "advise": true}).to_string()).unwrap();
        assert_eq!(got, want, "{name} --advise");
    }
}

#[test]
fn fit_plan_inspect_catalogs_are_the_clis_json() {
    let job = json!({"model": "mistral-7b-v0.1", "seq": 2048, "gpu": "a100-80gb",
                     "peft": {"method": "lora", "rank": 16}});
    let f = job_file("fit.json", &job);
    let jf = f.to_str().unwrap();
    assert_eq!(
        call_json("fit", &json!({ "job": job }).to_string()).unwrap(),
        cli_json(&["fit", "--json", "--job", jf])
    );
    assert_eq!(
        call_json(
            "plan",
            &json!({"job": job, "gpus": 4, "top": 3}).to_string()
        )
        .unwrap(),
        cli_json(&["plan", "--json", "--gpus", "4", "--top", "3", "--job", jf])
    );
    let tiny = shared_path("fixtures/hf_tiny_llama");
    for model in ["gpt2", "mixtral-8x7b", tiny.to_str().unwrap()] {
        assert_eq!(
            call_json("inspect", &json!({ "model": model }).to_string()).unwrap(),
            cli_json(&["inspect", "--json", model]),
            "{model}"
        );
    }
    assert_eq!(
        call_json("models", "{}").unwrap(),
        cli_json(&["models", "--json"])
    );
    assert_eq!(
        call_json("gpus", "{}").unwrap(),
        cli_json(&["gpus", "--json"])
    );
}

#[test]
fn measurements_are_the_clis_json() {
    let rec = shared_path("fixtures/cpu_timeline.json");
    let r = rec.to_str().unwrap();
    assert_eq!(
        call_json("analyze", &json!({ "path": r }).to_string()).unwrap(),
        cli_json(&["analyze", "--json", r])
    );
    // From bytes in memory, as the server and Python's `analyze(bytes)` read it.
    let bytes = std::fs::read(&rec).unwrap();
    assert_eq!(
        app::to_json(&app::analyze_bytes(&bytes, Some("x.json")).unwrap()).unwrap(),
        cli_json(&["analyze", "--json", r])
    );
    let job = json!({"model": shared_path("fixtures/hf_tiny_llama").to_str().unwrap(),
                     "batch": 4, "seq": 128});
    let f = job_file("compare.json", &job);
    assert_eq!(
        call_json("compare", &json!({"job": job, "path": r}).to_string()).unwrap(),
        cli_json(&["compare", "--json", "--job", f.to_str().unwrap(), r])
    );
    let cases = shared_path("validation/dev-cases-cpu-measured.json");
    let c = cases.to_str().unwrap();
    assert_eq!(
        call_json("validate", &json!({ "cases": c }).to_string()).unwrap(),
        cli_json(&["validate", "--json", "--report-only", c])
    );
}

#[test]
fn picture_is_the_svg_estimate_writes() {
    for (name, job) in jobs() {
        let f = job_file(&format!("pic-{name}.json"), &job);
        let svg = f.with_extension("svg");
        cli_json(&[
            "estimate",
            "--json",
            "--job",
            f.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ]);
        let report: Value = serde_json::from_str(
            &call_json("estimate", &json!({ "job": job }).to_string()).unwrap(),
        )
        .unwrap();
        let got = call_json("picture", &json!({ "report": report }).to_string()).unwrap();
        // The answer is the SVG as a JSON string.
        let got: String = serde_json::from_str(&got).unwrap();
        assert_eq!(got, std::fs::read_to_string(&svg).unwrap(), "{name}");
    }
}

#[test]
fn errors_carry_the_clis_message_and_exit_code() {
    let job = json!({"model": "gpt2", "batch": 0});
    let f = job_file("bad.json", &job);
    let (_, err, code) = cli(&["estimate", "--json", "--job", f.to_str().unwrap()]);
    let e = call_json("estimate", &json!({ "job": job }).to_string()).unwrap_err();
    assert_eq!(code, 2);
    assert_eq!(e.exit_code, 2);
    assert_eq!(format!("error: {}\n", e.message), err);
    assert!(e.message.starts_with("batch:"), "{e}");

    // A model that is neither a preset nor a path, with the Hub off: the same line.
    let job = json!({"model": "./no/such/model.safetensors"});
    let f = job_file("nomodel.json", &job);
    let (_, err, code) = cli(&[
        "fit",
        "--json",
        "--gpu",
        "h100-80gb",
        "--job",
        f.to_str().unwrap(),
    ]);
    let job = json!({"model": "./no/such/model.safetensors", "gpu": "h100-80gb"});
    let e = call_json("fit", &json!({ "job": job }).to_string()).unwrap_err();
    assert_eq!((code, e.exit_code), (2, 2));
    assert_eq!(format!("error: {}\n", e.message), err);

    for (command, input) in [
        ("estimate", "{\"job\": {\"batchh\": 4}}"),
        ("estimate", "not json"),
        ("inspect", "{}"),
        ("models", "{\"x\": 1}"),
        ("nonsense", "{}"),
    ] {
        let e = call_json(command, input).unwrap_err();
        assert_eq!(e.exit_code, 2, "{command} {input}");
        assert!(!e.message.contains('\n') && !e.message.is_empty());
    }
    let e = call_json("estimate", "{\"job\": {\"batchh\": 4}}").unwrap_err();
    assert!(
        e.message.starts_with("invalid job:") && e.message.contains("batchh"),
        "{e}"
    );
}

#[test]
fn cli_main_returns_the_exit_code() {
    assert_eq!(vramscope::cli_main(["vramscope", "--version"]), 0);
    assert_eq!(
        vramscope::cli_main(["vramscope", "estimate", "gpt2", "--batch", "0", "--json"]),
        2
    );
    assert_eq!(vramscope::cli_main(["vramscope", "no-such-command"]), 2);
    // Exit 1: --require-fit on a job that does not fit (70B parameters in bf16 alone are
    // 140 GB, past a 24 GB card).
    assert_eq!(
        vramscope::cli_main([
            "vramscope",
            "estimate",
            "llama-3.1-70b",
            "--gpu",
            "rtx4090-24gb",
            "--require-fit",
            "--json"
        ]),
        1
    );
}

#[test]
fn bytes_entry_points_answer_as_for_the_file() {
    let rec = shared_path("fixtures/cpu_timeline.json");
    let r = rec.to_str().unwrap();
    let bytes = std::fs::read(&rec).unwrap();
    assert_eq!(
        app::analyze_bytes_json(&bytes, "x").unwrap(),
        cli_json(&["analyze", "--json", r])
    );
    let job = json!({"model": "gpt2", "batch": 2, "seq": 64});
    let f = job_file("cmp-bytes.json", &job);
    assert_eq!(
        app::compare_bytes_json(
            &Session::default(),
            &json!({ "job": job }).to_string(),
            &bytes,
            "x"
        )
        .unwrap(),
        cli_json(&["compare", "--json", "--job", f.to_str().unwrap(), r])
    );
    // An unreadable record names the name given.
    let e = app::analyze_bytes_json(b"\x80\x05garbage", "my.pickle").unwrap_err();
    assert!(e.message.starts_with("my.pickle: "), "{e}");
    assert_eq!(e.exit_code, 2);
}

/// The results this crate defines read back from their own JSON and write it again unchanged.
#[test]
fn results_read_back_from_their_json() {
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(text: &str) {
        let back: T = serde_json::from_str(text).unwrap();
        assert_eq!(app::to_json(&back).unwrap(), text);
    }
    round_trip::<app::InspectReport>(
        &call_json("inspect", r#"{"model": "mixtral-8x7b"}"#).unwrap(),
    );
    round_trip::<Vec<app::catalog::PresetRow>>(&call_json("models", "{}").unwrap());
    round_trip::<Vec<vramscope_core::gpu::Gpu>>(&call_json("gpus", "{}").unwrap());
    // serde_json reads floats to within the last bit, so validate's errors are compared as
    // numbers: the same cases and statuses, each error within 1e-15 of the original.
    let cases = shared_path("validation/dev-cases-cpu-measured.json");
    let text = call_json("validate", &json!({ "cases": cases }).to_string()).unwrap();
    let back: app::Validation = serde_json::from_str(&text).unwrap();
    let again: app::Validation = serde_json::from_str(&app::to_json(&back).unwrap()).unwrap();
    assert_eq!(back.cases.len(), again.cases.len());
    for (a, b) in back.cases.iter().zip(&again.cases) {
        assert_eq!((&a.id, a.status), (&b.id, b.status));
        let (x, y) = (a.error.unwrap(), b.error.unwrap());
        assert!(
            (x - y).abs() <= 1e-15 * x.abs().max(1.0),
            "{} {x} {y}",
            a.id
        );
    }
}

/// A job's `"from"` entries (issue 20) are read by the application layer as by a `--job` file:
/// the DeepSpeed config below says micro-batch 2, ZeRO stage 2 and bf16, so the resolved job is
/// batch 2, `deepspeed`, zero 2, `bf16-mixed` (DeepSpeed keeps an fp32 master copy), and the
/// Report is the CLI's for the same job file.
#[test]
fn a_jobs_from_entries_are_read_as_the_cli_reads_them() {
    let ds = r#"{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
                 "zero_optimization": {"stage": 2}}"#;
    let job = json!({"model": "gpt2", "seq": 512, "gpu": "a100-80gb",
                     "from": [{"name": "ds.json", "text": ds}]});
    let out = call_json("estimate", &json!({ "job": job }).to_string()).unwrap();
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["job"]["batch"], 2);
    assert_eq!(report["job"]["framework"], "deepspeed");
    assert_eq!(report["job"]["precision"], "bf16-mixed");
    assert_eq!(report["job"]["parallel"]["zero"], 2);
    let f = job_file("from.json", &job);
    assert_eq!(
        out,
        cli_json(&["estimate", "--json", "--job", f.to_str().unwrap()])
    );
}
