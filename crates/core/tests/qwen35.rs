//! Qwen3.5 and Qwen3.5-MoE from their published configs
//! (`crates/formats/tests/fixtures/qwen35/`): KV only in the gated-attention layers, a constant
//! recurrent state in the gated DeltaNet layers (transformers 5.24's `DynamicCache` of
//! `Qwen3_5TextModel`: `cache_utils.py` `LinearAttentionLayer`, the conv state in the model
//! dtype, the recurrent state as `torch_chunk_gated_delta_rule` returns it, fp32). Expected
//! numbers are derived by hand below from the shapes.

mod measured;

use serde_json::Value;

fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("qwen35/{name}.json"))
}

/// Qwen3.5-27B. Per token, each of the 16 attention layers caches K and V of 4 heads × 256:
/// 2,048 values · 2 B (bf16) = 4,096 B, 65,536 B over the 16; at 4,096 tokens 268,435,456.
/// Per sequence, each of the 48 DeltaNet layers holds its conv state `[conv_dim 2·16·128 +
/// 48·128 = 10,240, kernel 4]` = 40,960 bf16 values (81,920 B) and its recurrent state `[48
/// heads, 128, 128]` = 786,432 fp32 values (3,145,728 B): 3,227,648 B per layer, 154,927,104 B
/// (147.75 MiB) over the 48, whatever the context.
#[test]
fn dense_27b_kv_and_state() {
    let config = config("qwen3.5-27b");
    measured::assert_cache_split(&config, 2, 268_435_456, 154_927_104);
    let note = measured::constant_state_note(&config, 262_144);
    assert!(
        note.contains("48 gated DeltaNet (linear-attention) layers"),
        "{note}"
    );
    assert!(note.contains("147.8 MiB"), "{note}"); // 147.75 to four figures
    assert!(note.contains("16 attention layers"), "{note}");
}

/// Qwen3.5-35B-A3B. Per token, 10 attention layers × K and V of 2 heads × 256 × 2 B = 20,480
/// B; at 4,096 tokens 83,886,080. Per sequence, 30 DeltaNet layers × (conv `[8,192, 4]` bf16
/// 65,536 B + recurrent `[32, 128, 128]` fp32 2,097,152 B) = 64,880,640 B (61.875 MiB).
#[test]
fn moe_35b_a3b_kv_and_state() {
    let config = config("qwen3.5-35b-a3b");
    measured::assert_cache_split(&config, 1, 83_886_080, 64_880_640);
    let note = measured::constant_state_note(&config, 262_144);
    assert!(
        note.contains("30 gated DeltaNet (linear-attention) layers"),
        "{note}"
    );
    assert!(note.contains("61.88 MiB"), "{note}"); // 61.875 to four figures
    assert!(note.contains("10 attention layers"), "{note}");
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
