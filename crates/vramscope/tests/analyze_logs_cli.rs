//! `vramscope analyze` on engine logs and OOM messages (files and stdin), end to end on the
//! real fixtures in crates/measure/tests/fixtures/logs (sources in the READMEs there).

mod common;
use common::*;

use common::log_fixture as fixture;

#[test]
fn oom_message_from_stdin() {
    let msg = std::fs::read_to_string(fixture("torch-oom/torch1.x-reserved-maddog11.txt")).unwrap();
    let out = vramscope()
        .args(["analyze", "-", "--json"])
        .write_stdin(msg.clone())
        .output()
        .unwrap();
    let v = json_ok(&out);
    assert_eq!(v["source"], "torch-oom");
    // "14.76 GiB total capacity" = 1476 × 2^30 / 100 = 15,848,429,322.24 bytes
    assert_eq!(v["fit"]["capacity"], 15_848_429_322u64);
    // "13.71 GiB reserved in total by PyTorch" = 1371 × 2^30 / 100 = 14,721,000,407.04
    assert_eq!(v["per_gpu"]["peak_reserved"], 14_721_000_407u64);
    assert!(v["diagnosis"]
        .as_str()
        .unwrap()
        .contains("expandable_segments"));
    assert!(v["timeline"].as_array().unwrap().is_empty());

    // Human output: a short table in adaptive units and the diagnosis.
    let out = vramscope()
        .args(["analyze", "-"])
        .write_stdin(msg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2.87 GiB") && text.contains("Diagnosis:"),
        "{text}"
    );
}

#[test]
fn engine_logs_by_content_not_name() {
    for (rel, source) in [
        ("vllm/v0-2024-12-profiling-table-pr10511.log", "vllm-log"),
        ("llamacpp/llm_load_tensors-2gpu-pr6122.log", "llamacpp-log"),
        ("ollama/offload-4gpu-flash-issue9181.log", "ollama-log"),
    ] {
        // Copied under a neutral name: recognition is by the content.
        let dir = std::env::temp_dir().join(format!("vramscope-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("pasted.txt");
        std::fs::copy(fixture(rel), &p).unwrap();
        let v = json_of_cmd(
            vramscope().args(["analyze", p.to_str().unwrap(), "--json"]),
            &rel,
        );
        assert_eq!(v["source"], source, "{rel}");
    }
}

#[test]
fn malformed_log_exits_2_with_one_line() {
    let malformed = fixture("llamacpp/synthetic-malformed.log");
    let args = ["analyze", &malformed];
    let err = refused_with(&vramscope().args(args).output().unwrap(), &args);
    assert!(err.contains("no memory figure"), "{err}");

    let out = vramscope()
        .args(["analyze", "-"])
        .write_stdin("nothing to see here\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// compare reads a log as it reads a record (rows for what the log states: the figures are
/// tested in compare_log.rs); fit --measured reads it too (the figures are tested in
/// log_fit.rs), and a log it cannot fit on (no KV pool, count or buffers) is one line naming
/// what it got.
#[test]
fn compare_on_a_log_and_fit_measured_says_what_it_needs() {
    let job = temp_file(
        "logs-cmp",
        "job.json",
        r#"{"model": "gpt2", "task": "infer", "gpu": "t4-16gb"}"#,
    );
    let job = job.to_str().unwrap();
    let log = fixture("vllm/v1-2025-04-pr17122.log");
    let log = log.as_str();
    for args in [
        &["compare", "--job", job, log][..],
        &["fit", "--job", job, "--measured", log],
    ] {
        let text = text_of_cmd(vramscope().args(args));
        assert!(text.contains("vllm-log"), "{args:?}: {text}");
    }
    // "Loading model weights took 30.7098 GB" alone: no pool, no count.
    let weights_only = fixture("vllm/v0-2025-02-weights-issue12664.log");
    let args = ["fit", "--job", job, "--measured", &weights_only];
    let err = refused_with(&vramscope().args(args).output().unwrap(), &args);
    assert!(err.contains("KV pool"), "{err}");
}
