//! Gemma 4's text model (`gemma4_text`) estimated, not only counted: tiny training steps
//! measured on the CPU (`validation/cpu-measured-gemma4.json`). E2B's KV cache, fit and
//! training step are checked with Gemma 3n's in `gemma_e2b.rs`.

mod common;
mod measured;

use serde_json::{json, Value};

/// The `hf_config` of a measured run's spec (`validation/specs/<name>`).
fn spec_config(name: &str) -> Value {
    let spec: Value = common::validation(&format!("specs/{name}"));
    spec["hf_config"].clone()
}

/// Two tiny Gemma 4 text models' AdamW steps at 2 × 256, measured on the CPU tensor by tensor
/// (`validation/cpu-measured-gemma4.json`, `validation/results/cpu-tiny-gemma4*`;
/// validation/README.md): one with per-layer inputs, two kv-sharing layers and the double-wide
/// MLP (SDPA fp32 and bf16-mixed, eager bf16-mixed, SDPA fp32 and bf16-mixed under full
/// checkpointing), one with keys-as-values full layers and the experts beside the MLP (SDPA
/// fp32 and bf16-mixed, SDPA bf16-mixed under full checkpointing). Every case within 3 %
/// (peaks net of the two cuBLAS workspaces a CPU run lacks). Without checkpointing they
/// measured within 0.21 %, so they are held to 0.5 %: leaving the per-layer inputs unkept
/// (−0.83 %), giving the kv-sharing layers their own keys and values (+3.38 %) or the
/// keys-as-values layers a value projection (+0.78 %) each breaks that. Under checkpointing
/// every case is within 1 % (peaks +0.19 % to +0.82 %, per-layer −0.97 % to −0.21 %); without
/// the storing layers' keys and values (`shared_kv_states`) the per-layer figures read −11.0 %
/// (`gemma4ple` bf16-mixed) and −9.6 % (`gemma4moe`).
#[test]
fn measured_training_steps_within_3_percent() {
    let all = measured::compare("cpu-measured-gemma4.json");
    assert_eq!(all.len(), 22);
    for c in &all {
        let bound = if c.id.contains("-ckpt") { 0.03 } else { 0.005 };
        assert!(c.error.abs() <= bound, "{} {:+.3}", c.id, c.error);
    }
}

/// Under full checkpointing a storing layer (`Gemma4TextConfig.kv_sharing_modes`: the last
/// layer of each type before the kv-sharing ones, even with none) keeps its keys and values in
/// `shared_kv_states` beside its block input, by hand: two layers, sliding then full (the last
/// layer is always full), both storing; fp32, 2 × 256, hidden 256, 2 KV heads, 64-wide heads
/// sliding and 128-wide full. Each keeps its block input, 2·256·256 · 4 B = 524,288 B (fp32:
/// no autocast weight copies), and its rotary keys and `v_norm` values: layer 0
/// 2 · 2·256·(2·64) · 4 B = 524,288 B (1,048,576 B in all), layer 1 2 · 2·256·(2·128) · 4 B =
/// 1,048,576 B (1,572,864 B), which the estimator's per-layer figure (the upper median of two
/// layers) reads; without the stored pair it would read 524,288 B. Measured: the tiny fp32
/// run `cpu-tiny-gemma4ple-fp32-adamw-sdpa-ckpt` left 1,577,984 B on its storing full layer 2,
/// 1,053,696 B on its storing sliding layer 3 and 529,408 B on the others (5,120 B of small
/// tensors each beyond these figures).
#[test]
fn checkpointed_storing_layer_keeps_its_keys_and_values() {
    let mut cfg = spec_config("cpu-tiny-gemma4ple-fp32-adamw-sdpa-ckpt.json");
    cfg["num_hidden_layers"] = json!(2);
    cfg["layer_types"] = json!(["sliding_attention", "full_attention"]);
    cfg["num_kv_shared_layers"] = json!(0);
    cfg["hidden_size_per_layer_input"] = json!(0);
    let r = measured::run(
        json!({"model": {"hf_config": cfg}, "task": "train", "batch": 2,
        "seq": 256, "precision": "fp32", "optimizer": "adamw", "attention": "sdpa",
        "checkpointing": "full"}),
    );
    assert_eq!(r.per_gpu.peaks.activation_bytes_per_layer, Some(1_572_864));
}

/// The experts beside the dense MLP are the model's routed experts where the estimator asks
/// (`Layer::routed_experts`: the summary, the step-time model, expert parallelism, GGUF's
/// expert count): the tiny MoE config of the measured steps (`enable_moe_block`,
/// `num_experts` 8, `top_k_experts` 2) reads 8 experts, 2 per token.
#[test]
fn experts_beside_the_mlp_are_routed_experts() {
    let config = spec_config("cpu-tiny-gemma4moe-fp32-adamw-sdpa.json");
    let r = measured::run(
        json!({"model": {"hf_config": config}, "task": "train", "batch": 2,
        "seq": 256, "precision": "fp32", "optimizer": "adamw", "attention": "sdpa"}),
    );
    assert_eq!(r.model.experts, Some(8));
    assert_eq!(r.model.experts_per_token, Some(2));
    assert_eq!(r.model.model_type.as_deref(), Some("gemma4_text"));
}
