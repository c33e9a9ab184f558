//! Hand-built hostile inputs through the real binary (issue #35): every one ends in exit 2 with
//! one line, or a bounded success, within a generous time stated beside it. The inputs are
//! built here; nothing large is committed. Times are for an unoptimized test build on a
//! shared 2-core machine; the bad behaviour they rule out took minutes or never ended.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory of this test process.
fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramscope-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary with `args` (stdin from `stdin` when given), killed after `limit`; the
/// output and the time it took. A run past `limit` fails the test.
fn run_within(args: &[&str], stdin: Option<Vec<u8>>, limit: Duration) -> (Output, Duration) {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env("HF_HUB_OFFLINE", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        let mut w = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = w.write_all(&bytes);
        });
    }
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    drop(watchdog);
    assert!(
        took < limit,
        "{args:?} took {took:?}, over the {limit:?} allowed"
    );
    (out, took)
}

/// Exit 2 within `limit` with one line on stderr; returns the line.
fn refused_within(args: &[&str], stdin: Option<Vec<u8>>, limit: Duration) -> String {
    let (out, _) = run_within(args, stdin, limit);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// A TinyLlama-shaped sequence classifier (TinyLlama-1.1B's config.json: 22 layers, hidden
/// 2048, 32 heads, 4 KV heads) with `labels` classes: real classification configs carry
/// thousands of `id2label` / `label2id` entries, 30,000 make this about 1.3 MB of JSON.
fn classifier_config(labels: usize) -> Value {
    let id2label: serde_json::Map<String, Value> = (0..labels)
        .map(|i| (i.to_string(), Value::from(format!("LABEL_{i}"))))
        .collect();
    let label2id: serde_json::Map<String, Value> = (0..labels)
        .map(|i| (format!("LABEL_{i}"), Value::from(i)))
        .collect();
    json!({
        "architectures": ["LlamaForSequenceClassification"],
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_hidden_layers": 22,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
        "id2label": id2label,
        "label2id": label2id,
    })
}

/// Issue #35 item 2: `plan --gpus 8` of a job with a 1.3 MB inline config copied the job (and
/// its config) per layout screened: over 200 s in this build before, about 0.3 s after (the
/// resolved job shares the model's JSON). 30 s allowed. The same job through `fit` and
/// `estimate` (advice's search) is bounded the same way.
#[test]
fn a_megabyte_inline_config_does_not_slow_plan_fit_or_advice() {
    let job = json!({
        "model": {"hf_config": classifier_config(30_000)},
        "gpu": "h100-80gb", "batch": 8, "seq": 1024,
    });
    let path = scratch().join("classifier-job.json");
    std::fs::write(&path, job.to_string()).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 1_000_000);
    let p = path.to_str().unwrap();
    for args in [
        vec!["plan", "--job", p, "--gpus", "8", "--json"],
        vec!["fit", "--job", p, "--json"],
        vec!["estimate", "--job", p],
    ] {
        let (out, took) = run_within(&args, None, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{args:?}: {took:?}");
    }
}
