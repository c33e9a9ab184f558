//! Qwen3.5 and Qwen3.5-MoE from their published configs
//! (`crates/formats/tests/fixtures/qwen35/`): KV only in the gated-attention layers, a constant
//! recurrent state in the gated DeltaNet layers (transformers 5.24's `DynamicCache` of
//! `Qwen3_5TextModel`: `cache_utils.py` `LinearAttentionLayer`, the conv state in the model
//! dtype, the recurrent state as `torch_chunk_gated_delta_rule` returns it, fp32). Expected
//! numbers (the cache splits and fit's notes) are derived by hand in `recurrent_state.rs`.

mod measured;

use serde_json::Value;

fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("qwen35/{name}.json"))
}

/// Tiny Qwen3.5 and Qwen3.5-MoE text models' AdamW steps with SDPA at 2 × 256, fp32 and
/// bf16-mixed, measured on the CPU tensor by tensor (`validation/cpu-measured-qwen35.json`,
/// `validation/results/`; transformers' torch path of the gated delta rule and the causal
/// conv, as they run without flash-linear-attention and causal-conv1d): the peaks (net of the
/// two cuBLAS workspaces a CPU run lacks) and the gated DeltaNet block's activations each
/// within 3 %.
#[test]
fn measured_training_steps_within_3_percent() {
    let worst = measured::worst("cpu-measured-qwen35.json", 8);
    assert!(worst <= 0.03, "worst {worst}");
}

/// A training estimate says which path the gated DeltaNet layers are modelled on: the torch
/// fallback (`torch_chunk_gated_delta_rule`), not mamba_ssm's kernels, whatever the attention
/// kernel.
#[test]
fn training_names_the_deltanet_path() {
    let config = config("qwen3.5-35b-a3b");
    for attention in ["sdpa", "eager"] {
        let r = measured::run(serde_json::json!({"model": {"hf_config": config},
            "task": "train", "batch": 1, "seq": 1024, "precision": "bf16-mixed",
            "checkpointing": "full", "attention": attention}));
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("gated DeltaNet layers estimated on transformers' torch path")),
            "{:?}",
            r.warnings
        );
        assert!(
            !r.warnings.iter().any(|w| w.contains("mamba_ssm")),
            "{:?}",
            r.warnings
        );
    }
}
