//! Gemma 4's text model (`gemma4_text`) estimated, not only counted: the KV cache of E2B (20
//! of 35 layers reuse another layer's keys and values and cache nothing), fit, and tiny
//! training steps measured on the CPU (`validation/cpu-measured-gemma4.json`).

mod common;
mod measured;

use serde_json::{json, Value};

/// The `hf_config` of a measured run's spec (`validation/specs/<name>`).
fn spec_config(name: &str) -> Value {
    let spec: Value = common::validation(&format!("specs/{name}"));
    spec["hf_config"].clone()
}

fn e2b() -> Value {
    measured::formats_fixture("gemma4/gemma-4-e2b-text.json")
}

/// E2B's bf16 cache at 1 × 4,096 by hand (`modeling_gemma4.py`; `cache_utils.py`
/// `DynamicCache` of a `Gemma4TextConfig`): layers 15–34 are kv-sharing consumers
/// (`DummyLayer`, nothing stored); of layers 0–14, 4, 9 and 14 are full (1 kv head of 512:
/// K and V 2·512·4,096 values · 2 B = 8,388,608 B each, 25,165,824 B), the other 12 sliding
/// (1 kv head of 256 over the 512-token window: 2·256·512 · 2 B = 524,288 B each,
/// 6,291,456 B). Total 31,457,280 B; doubling the context adds only the full layers' part.
/// That is the cache once decoding (a generation reaching 4,096 tokens from a short prompt:
/// transformers' sliding layers keep a view of `sliding_window − 1` = 511 tokens over the
/// storage of the last `torch.cat`, 511 + 1 = 512 tokens). A 4,096-token prompt peaks in its
/// prefill, where the 12 sliding layers hold the whole prompt too: 25,165,824 + 12 ·
/// 2·256·4,096 · 2 B = 25,165,824 + 50,331,648 = 75,497,472 B.
#[test]
fn e2b_kv_cache_by_hand() {
    measured::assert_windowed_cache_at_4096(&e2b(), 31_457_280, 25_165_824, 75_497_472);
}

/// Below the window the estimator's cache equals the formats reader's `DynamicCache` model
/// (`gemma4::cache_layers`, itself checked against a CPU-measured cache), in bf16:
/// at 300 tokens 12 sliding layers · 2·256·300 + 3 full · 2·512·300 = 2,764,800 values,
/// 5,529,600 B.
#[test]
fn e2b_kv_cache_agrees_with_the_dynamic_cache_below_the_window() {
    let cfg = e2b();
    let obj = cfg.as_object().unwrap();
    let elements = vramscope_formats::hf_config::gemma4::cache_layers(obj, "e2b")
        .unwrap()
        .elements(1, 300)
        .unwrap();
    assert_eq!(elements, 2_764_800);
    assert_eq!(measured::kv_cache(&cfg, 1, 300), 2 * elements);
}

/// fit answers for E2B (bf16 inference on an H200): a largest batch at 4,096 tokens, and a
/// smaller one at 65,536 tokens, where the three full layers' cache has grown sixteenfold.
#[test]
fn e2b_fit_answers() {
    let fit = |seq: u64| measured::max_batch_bf16_h200(&e2b(), seq, 131_072);
    let (short, long) = (fit(4096), fit(65_536));
    assert!(long >= 1 && short > long, "{short} {long}");
}

/// Training E2B is estimated (no refusal): bf16-mixed AdamW at 1 × 2,048 with SDPA.
#[test]
fn e2b_training_is_estimated() {
    let r = measured::train_step(&e2b(), "sdpa");
    assert!(r.per_gpu.components.activations > 0);
    assert_eq!(r.model.params_total, 4_628_569_344);
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
