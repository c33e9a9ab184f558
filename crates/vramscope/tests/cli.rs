//! The binary as users and scripts meet it: exit codes, one-line errors, JSON shapes, colours,
//! pipes.

mod common;
use common::argv;
use common::{json_of_cmd, plain_vramscope as vramscope};

use predicates::prelude::*;
use std::io::Read;
use std::process::Stdio;

fn json_of(args: &[&str]) -> serde_json::Value {
    json_of_cmd(vramscope().args(args), &args)
}

use common::shared_fixture as fixture;

/// The contract's inspect shape: {"model": {...}, "tensors": [{name, shape, dtype, bytes, layer,
/// component}]}; GPT-2 has 2 embeddings + 12 layers × 12 tensors + ln_f weight and bias = 148
/// tensors (tied head).
#[test]
fn inspect_json_follows_the_contract() {
    let v = json_of(&["inspect", "gpt2", "--json"]);
    let m = &v["model"];
    assert_eq!(m["name"], "gpt2");
    assert_eq!(m["params_total"], 124_439_808u64);
    assert_eq!(m["params_trainable"], 124_439_808u64);
    assert_eq!(m["layers"], 12);
    assert_eq!(m["hidden"], 768);
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 2 + 12 * 12 + 2);
    for t in tensors {
        for k in ["name", "shape", "dtype", "bytes", "layer", "component"] {
            assert!(t.get(k).is_some(), "tensor lacks {k}: {t}");
        }
    }
    let wte = tensors
        .iter()
        .find(|t| t["name"] == "transformer.wte.weight")
        .unwrap();
    assert_eq!(wte["shape"], serde_json::json!([50257, 768]));
    assert_eq!(wte["bytes"], 50257u64 * 768 * 4);
    assert_eq!(wte["component"], "embedding");
    assert!(wte["layer"].is_null());
}

#[test]
fn repo_names_are_aliases() {
    let v = json_of(&["inspect", "meta-llama/Llama-3.1-8B", "--json"]);
    assert_eq!(v["model"]["params_total"], 8_030_261_248u64);
}

#[test]
fn inspect_reads_files() {
    let v = json_of(&["inspect", &fixture("hf_tiny_llama"), "--json"]);
    assert_eq!(v["model"]["params_total"], 123_712);
    let v = json_of(&["inspect", &fixture("tiny_llama_q8.gguf"), "--json"]);
    assert_eq!(v["model"]["params_total"], 4_672);
    assert_eq!(v["by_dtype"]["Q8_0"]["bytes"], 4_352);
}

#[test]
fn unknown_model_is_exit_2_with_one_line() {
    let out = vramscope()
        .args(["inspect", "llama-3.1-8"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("did you mean"))
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    common::temp_file("cli", name, bytes)
}

#[test]
fn bad_files_are_exit_2_never_a_panic() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "heads0.json",
            br#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":0,"num_hidden_layers":2,"vocab_size":10}"#.to_vec(),
            "num_attention_heads",
        ),
        (
            "kv.json",
            br#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":3,"num_hidden_layers":2,"vocab_size":10}"#.to_vec(),
            "num_key_value_heads",
        ),
        ("garbage.json", b"{not json".to_vec(), "JSON"),
        ("huge.safetensors", {
            let mut b = (1u64 << 60).to_le_bytes().to_vec();
            b.extend_from_slice(b"{}");
            b
        }, "header"),
        ("count.gguf", {
            let mut b = b"GGUF".to_vec();
            b.extend_from_slice(&3u32.to_le_bytes());
            b.extend_from_slice(&(1u64 << 40).to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
            b
        }, "tensor"),
    ];
    for (name, bytes, needle) in cases {
        let p = temp_file(name, &bytes);
        let out = vramscope()
            .args(["inspect", p.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn usage_errors_are_exit_2() {
    vramscope().args(["inspect"]).assert().code(2);
    vramscope().args(["frobnicate"]).assert().code(2);
}

#[test]
fn catalogs_list_as_json() {
    let models = json_of(&["models", "--json"]);
    assert!(models.as_array().unwrap().len() >= 30);
    let gpus = json_of(&["gpus", "--json"]);
    let a100 = gpus
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "a100-80gb")
        .unwrap();
    // nvidia-smi reports 81920 MiB on an A100 80GB.
    assert_eq!(a100["memory_bytes"], 81920u64 << 20);
}

#[test]
fn help_has_examples_and_completions_generate() {
    vramscope()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Examples"));
    vramscope()
        .args(["completions", "bash"])
        .assert()
        .success()
        .stdout(predicate::str::contains("vramscope"));
}

#[test]
fn colours_follow_the_flag_and_no_color() {
    let esc = predicate::str::contains("\u{1b}[");
    vramscope()
        .args(["inspect", "gpt2", "--color", "always"])
        .assert()
        .stdout(esc.clone());
    // Piped output has no colour by default.
    vramscope()
        .args(["inspect", "gpt2"])
        .assert()
        .stdout(esc.clone().not());
    // CLICOLOR_FORCE turns colour on for a pipe; NO_COLOR wins over it.
    vramscope()
        .args(["inspect", "gpt2"])
        .env("CLICOLOR_FORCE", "1")
        .assert()
        .stdout(esc.clone());
    vramscope()
        .args(["inspect", "gpt2"])
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .assert()
        .stdout(esc.not());
}

/// `vramscope inspect deepseek-v3 --tensors | head -c 100`: the reader goes away early; the
/// program must end quietly with success, not panic on the broken pipe.
#[test]
fn a_closed_pipe_is_a_normal_end() {
    let bin = assert_cmd::cargo::cargo_bin("vramscope");
    let mut child = std::process::Command::new(bin)
        .args(["inspect", "deepseek-v3", "--tensors"])
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // stdout is dropped here: the pipe closes with most of the output unwritten.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// `fit` answers in the contract's shape: train → max_batch and max_seq (GPT-2 stops at its
/// 1024 positions); infer → max_batch and max_context; without a GPU it is a named usage error.
#[test]
fn fit_follows_the_contract() {
    let v = json_of(&["fit", "gpt2", "--gpu", "t4-16gb", "--seq", "1024", "--json"]);
    assert!(v["max_batch"].as_u64().unwrap() >= 1);
    assert_eq!(v["max_seq"], 1024);
    assert_eq!(v["seq_limited_by_model"], true);
    let v = json_of(&argv(
        "fit llama-3.1-8b --task infer --seq 4096 --gpu l40s-48gb --json",
    ));
    assert!(v["max_batch"].as_u64().unwrap() >= 1);
    assert!(v["max_context"].as_u64().unwrap() >= 4096);
    assert!(v.get("max_seq").is_none());
    vramscope()
        .args(["fit", "gpt2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("gpu"));
}

#[test]
fn human_estimate_shows_the_what_if_table() {
    vramscope()
        .args(["estimate", "gpt2", "--seq", "512", "--gpu", "t4-16gb"])
        .assert()
        .success()
        .stdout(predicate::str::contains("what if"))
        .stdout(predicate::str::contains("--checkpointing full"));
}

/// `plan` lists layouts that fit (JSON), and needs a GPU.
#[test]
fn plan_lists_fitting_layouts() {
    let v = json_of(&argv(
        "plan llama-3.1-70b --gpu h100-80gb --gpus 16 --seq 4096 --max-micro-batch 4 --json",
    ));
    assert!(v["evaluated"].as_u64().unwrap() > 1000);
    assert!(v["fitting"].as_u64().unwrap() >= 1);
    let first = &v["best"][0];
    assert!(first["estimate"]["device_total"].as_u64().unwrap() <= v["capacity"].as_u64().unwrap());
    vramscope()
        .args(["plan", "gpt2", "--gpus", "2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("gpu"));
}

/// An instruction-tuned variant's repo name is read as its base preset (same architecture),
/// with a note; a name that is no variant of a preset is still an error.
#[test]
fn instruct_names_of_presets_are_accepted_with_a_note() {
    for (variant, base) in [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b-v0.1"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ] {
        // Offline (the variant's own config would come from the Hub): the preset architecture.
        let v = json_of_cmd(
            vramscope()
                .env("HF_HUB_OFFLINE", "1")
                .env("HF_HUB_CACHE", "/nonexistent/hf-cache")
                .env("VRAMSCOPE_CACHE", "/nonexistent/vramscope-cache")
                .args(["estimate", variant, "--json"]),
            &variant,
        );
        let b = json_of(&["estimate", base, "--json"]);
        assert_eq!(v["model"]["params_total"], b["model"]["params_total"]);
        let note = v["warnings"][0].as_str().unwrap();
        assert!(note.contains(base) && note.contains(variant), "{note}");
    }
    vramscope()
        .env("HF_HUB_OFFLINE", "1")
        .args(["estimate", "acme/Nonexistent-9B-Instruct"])
        .assert()
        .code(2);
}

/// gpt-oss-20b's published config (crates/formats/tests/fixtures/unsupported): `inspect` names
/// the layer kinds (12 of 24 layers slide over 128 tokens), the sinks, and the bytes of the
/// MXFP4 checkpoint: 13,761,264,768 B (the index's `total_size`) = 12.82 GiB.
#[test]
fn inspect_shows_gpt_oss_layer_kinds_and_mxfp4_bytes() {
    let path = common::formats_fixture("unsupported/gpt-oss-20b.json");
    common::inspect_shows(
        &path,
        &[
            "20,914,757,184 parameters",
            "sliding window 128 on 12/24 layers",
            "attention sinks",
            "published as mxfp4: 12.82 GiB",
        ],
    );
    assert!((13_761_264_768f64 / (1u64 << 30) as f64 - 12.82).abs() < 0.005);
}

/// Qwen2.5-VL-7B's published config (crates/formats/tests/fixtures/vlm): `inspect` shows the
/// components with transformers' counts (crates/formats/tests/vlm.rs: tower 631,975,680,
/// projector 44,574,464, language model 7,615,616,512), and `fit` with images answers how many
/// fit each sequence; a bad `--images` is a one-line error, exit 2.
#[test]
fn vlm_components_images_and_fit() {
    let path = common::formats_fixture("vlm/qwen2.5-vl-7b-instruct.json");
    common::inspect_shows(
        &path,
        &[
            "Model components",
            "7,615,616,512",
            "631,975,680",
            "44,574,464",
            "one token per 28×28 px",
        ],
    );
    let fit = ["fit", &path, "--gpu", "a100-80gb", "--seq", "1024"];
    let images = ["--images", "1x1024x768", "--lora", "16", "--json"];
    let v = json_of_cmd(vramscope().args(fit).args(images), &fit);
    assert!(v["max_images"].as_u64().is_some_and(|n| n >= 1), "{v}");
    vramscope()
        .args(["estimate", &path, "--images", "two"])
        .assert()
        .code(2);
}
