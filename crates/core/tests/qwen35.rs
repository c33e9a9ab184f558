//! Qwen3.5 and Qwen3.5-MoE from their published configs
//! (`crates/formats/tests/fixtures/qwen35/`): KV only in the gated-attention layers, a constant
//! recurrent state in the gated DeltaNet layers (transformers 5.24's `DynamicCache` of
//! `Qwen3_5TextModel`: `cache_utils.py` `LinearAttentionLayer`, the conv state in the model
//! dtype, the recurrent state as `torch_chunk_gated_delta_rule` returns it, fp32). Expected
//! numbers (the cache splits and fit's notes) are derived by hand in `recurrent_state.rs`.

mod common;

mod measured;

use serde_json::Value;

fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("qwen35/{name}.json"))
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
        common::assert_warns(
            &r.warnings,
            "gated DeltaNet layers estimated on transformers' torch path",
        );
        common::assert_never_warns(&r.warnings, "mamba_ssm");
    }
}
