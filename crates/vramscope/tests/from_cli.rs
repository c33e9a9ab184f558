//! `--from FILE` through the binary, and `"from"` in a JSON job (`--job` and `POST
//! /api/estimate` on a server this test starts on loopback): real configs from
//! `crates/formats/tests/fixtures/recipes/` (sources in its README). Expected values are read off
//! those files by a person; precedence is later `--from`, then `--job`, then flags.

mod common;

use assert_cmd::Command;
use serde_json::{json, Value};
use std::path::PathBuf;

fn fixture(rel: &str) -> String {
    common::in_crate("formats/tests/fixtures/recipes", rel)
}

fn vramscope() -> Command {
    let mut c = common::vramscope();
    c.env_remove("RUST_BACKTRACE").env("HF_HUB_OFFLINE", "1");
    c
}

fn report(args: &[&str]) -> Value {
    common::json_of_cmd(vramscope().args(args), &args)
}

/// Exit 2 with one line on stderr; returns it.
fn refused(args: &[&str]) -> String {
    common::refused_with(&vramscope().args(args).output().unwrap(), &args)
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    common::temp_file("from", name, text)
}

/// `estimate llama-3.1-8b` with each of `files` as a `--from`, then `extra`, then `--json`.
fn from_args<'a>(files: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["estimate", "llama-3.1-8b"];
    for f in files {
        args.extend(["--from", f]);
    }
    args.extend(extra);
    args.push("--json");
    args
}

/// transformers' ZeRO-2 config (all "auto") under LLaMA-Factory's LoRA recipe: the recipe's
/// values fill the autos.
#[test]
fn deepspeed_and_a_recipe_resolve_together() {
    let ds = fixture("deepspeed/transformers_ds_config_zero2.json");
    let lf = fixture("llama_factory/llama3_lora_sft.yaml");
    let r = report(&from_args(&[&ds, &lf], &[]));
    let j = &r["job"];
    assert_eq!(j["framework"], "deepspeed"); // a DeepSpeed config
    assert_eq!(j["parallel"]["zero"], 2); // zero_optimization.stage 2
    assert_eq!(j["parallel"]["offload"], "optimizer"); // offload_optimizer.device cpu
    assert_eq!(j["optimizer"], "adamw-fused"); // optimizer.type AdamW (DeepSpeed's FusedAdam)
    assert_eq!(j["batch"], 1); // per_device_train_batch_size 1 → micro-batch "auto"
    assert_eq!(j["grad_accum"], 8); // gradient_accumulation_steps 8 → "auto"
    assert_eq!(j["precision"], "bf16-mixed"); // bf16: true → bf16.enabled "auto"
    assert_eq!(j["seq"], 2048); // cutoff_len
    assert_eq!(j["checkpointing"], "full"); // LLaMA-Factory checkpoints by default
                                            // finetuning_type lora, lora_rank 8, lora_target all; alpha: the contract's 2 × rank
    assert_eq!(j["peft"]["method"], "lora");
    assert_eq!(j["peft"]["rank"], 8);
    assert_eq!(j["peft"]["alpha"], 16.0);
    assert_eq!(j["peft"]["targets"].as_array().unwrap().len(), 7);
    let w = common::strs(&r["warnings"]);
    common::assert_warns(&w, "transformers_ds_config_zero2.json (DeepSpeed config): ");
    common::assert_warns(&w, "llama3_lora_sft.yaml (LLaMA-Factory recipe): ");
}

/// Later --from over earlier, --job over --from, flags over --job.
#[test]
fn precedence_later_from_then_job_then_flags() {
    let z2 = fixture("deepspeed/transformers_ds_config_zero2.json");
    let z3 = fixture("deepspeed/transformers_ds_config_zero3.json");
    let run = |files: &[&str], extra: &[&str]| report(&from_args(files, extra))["job"].clone();
    // zero2 then zero3: stage 3 and both offloads (zero3's); the other order: stage 2.
    let j = run(&[&z2, &z3], &[]);
    assert_eq!(j["parallel"]["zero"], 3);
    assert_eq!(j["parallel"]["offload"], "optimizer+params");
    assert_eq!(j["precision"], "fp16-mixed"); // zero3's fp16.enabled true
    let j = run(&[&z3, &z2], &[]);
    assert_eq!(j["parallel"]["zero"], 2);
    // --job over the files: stage 1, batch 4.
    let job = temp_file("job.json", r#"{"batch": 4, "parallel": {"zero": 1}}"#);
    let jf = job.to_str().unwrap();
    let j = run(&[&z3], &["--job", jf]);
    assert_eq!(j["parallel"]["zero"], 1);
    assert_eq!(j["parallel"]["offload"], "optimizer+params"); // kept from the file
    assert_eq!(j["batch"], 4);
    // Flags over --job.
    let j = run(&[&z3], &["--job", jf, "--zero", "2", "--batch", "8"]);
    assert_eq!(j["parallel"]["zero"], 2);
    assert_eq!(j["batch"], 8);
}

#[test]
fn contradicting_files_exit_2_naming_both() {
    let z3 = fixture("deepspeed/transformers_ds_config_zero3.json");
    let lf = fixture("llama_factory/llama3_lora_sft.yaml");
    let e = refused(&from_args(&[&z3, &lf], &[]));
    assert!(e.contains("transformers_ds_config_zero3.json and "), "{e}");
    assert!(e.contains("llama3_lora_sft.yaml"), "{e}");
    assert!(e.contains("precision"), "{e}");
}

#[test]
fn bad_files_exit_2_naming_the_file() {
    let cases = [
        ("bad.json", "{\"zero_optimization\": {\"stage\": "),
        ("list.yaml", "- a\n- b\n"),
        ("what.yaml", "colour: blue\n"),
        ("neg.yaml", "base_model: x\nmicro_batch_size: -2\n"),
    ];
    for (name, body) in cases {
        let p = temp_file(name, body);
        let e = refused(&["estimate", "gpt2", "--from", p.to_str().unwrap()]);
        assert!(e.contains(name), "{name}: {e}");
    }
    let e = refused(&["estimate", "gpt2", "--from", "/no/such/ds.json"]);
    assert!(e.contains("/no/such/ds.json"), "{e}");
    let bin = temp_file("bin.yaml", "");
    std::fs::write(&bin, [0xffu8, 0xfe, 0x00]).unwrap();
    let e = refused(&["estimate", "gpt2", "--from", bin.to_str().unwrap()]);
    assert!(e.contains("not UTF-8"), "{e}");
}

/// A DeepSpeed path inside a recipe is read beside the recipe.
#[test]
fn a_referenced_deepspeed_config_is_read_beside_the_recipe() {
    let dir = std::env::temp_dir().join(format!("vramscope-from-ref-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("examples/deepspeed")).unwrap();
    std::fs::copy(
        fixture("deepspeed/ds_z3_config.json"),
        dir.join("examples/deepspeed/ds_z3_config.json"),
    )
    .unwrap();
    let recipe = dir.join("llama3_full_sft.yaml");
    std::fs::copy(fixture("llama_factory/llama3_full_sft.yaml"), &recipe).unwrap();
    let r = report(&[
        "estimate",
        "llama-3.1-8b",
        "--from",
        recipe.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r["job"]["parallel"]["zero"], 3); // ds_z3_config.json's stage
    assert_eq!(r["job"]["grad_accum"], 2); // the recipe's gradient_accumulation_steps
    let _ = std::fs::remove_dir_all(&dir);
}

fn from_job(model: &str) -> Value {
    let text = |rel: &str| std::fs::read_to_string(fixture(rel)).unwrap();
    json!({
        "model": model,
        "gpu": "h100-80gb",
        "from": [
            {"name": "ds_z3_config.json", "text": text("deepspeed/ds_z3_config.json")},
            {"name": "llama3_full_sft.yaml", "text": text("llama_factory/llama3_full_sft.yaml")},
        ],
    })
}

/// `"from"` in a job file reads as `--from` does, and the server answers the same bytes.
#[test]
fn from_in_a_json_job_and_the_api() {
    let body = from_job("llama-3.1-8b").to_string();
    let file = temp_file("from_job.json", &body);
    let cli = common::text_of_cmd(vramscope().args([
        "estimate",
        "--job",
        file.to_str().unwrap(),
        "--json",
    ]));
    let r: Value = serde_json::from_str(&cli).unwrap();
    assert_eq!(r["job"]["parallel"]["zero"], 3); // ds_z3_config.json stage 3
    assert_eq!(r["job"]["precision"], "bf16-mixed"); // the recipe's bf16: true
    assert_eq!(r["job"]["model"], "llama-3.1-8b"); // the job's own model over the recipe's

    let (mut child, addr) = common::http::spawn_serve(
        std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).env_remove("RUST_BACKTRACE"),
        &[],
    );
    let post = |body: &str| common::http::post_json(&addr, "/api/estimate", body);
    let r = post(&body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), cli);
    // A bad entry: a 400 naming it.
    let bad = json!({"model": "gpt2", "from": [{"name": "x.yaml", "text": "- 1"}]}).to_string();
    let r = post(&bad);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("x.yaml"), "{}", r.text());
    let _ = child.kill();
    let _ = child.wait();
}

/// Offline, a recipe's model that is in no cache (issue 31): one line naming the recipe that
/// names it and the preset to give as MODEL instead; with that MODEL the same recipe runs.
#[test]
fn offline_recipe_model_names_the_file_and_a_preset() {
    let recipe = temp_file(
        "hermes.yml",
        "base_model: NoSuchOrg/Hermes-3-Llama-3.1-8B\nadapter: lora\nlora_r: 16\n\
         micro_batch_size: 2\nsequence_len: 2048\n",
    );
    let dir = recipe.parent().unwrap();
    let r = recipe.to_str().unwrap();
    let out = vramscope()
        .env("HF_HOME", dir)
        .env("HF_HUB_CACHE", dir.join("hub"))
        .env("XDG_CACHE_HOME", dir)
        .args(["estimate", "--from", r])
        .output()
        .unwrap();
    let err = common::refused_with(&out, &r);
    assert!(
        err.contains(&format!(
            "{r} (axolotl recipe) names the model: NoSuchOrg/Hermes-3-Llama-3.1-8B"
        )) && err.contains(&format!("`vramscope estimate llama-3.1-8b --from {r}`")),
        "{err}"
    );
    let rep = report(&["estimate", "llama-3.1-8b", "--from", r, "--json"]);
    assert_eq!(rep["job"]["peft"]["rank"], json!(16)); // lora_r: 16
}
