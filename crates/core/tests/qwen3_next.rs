//! Qwen3-Next: Qwen/Qwen3-Next-80B-A3B-Instruct from its published config
//! (`crates/formats/tests/fixtures/hybrid/qwen3-next-80b-a3b-instruct.json`) holds KV only in
//! its 12 gated-attention layers and a constant recurrent state in its 36 gated DeltaNet
//! layers; a tiny Qwen3-Next's training step measured on the CPU. Expected numbers are derived
//! by hand below from the shapes, or measured.

mod measured;

use serde_json::Value;

fn config() -> Value {
    measured::hybrid_config("qwen3-next-80b-a3b-instruct")
}

/// Per token, each of the 12 attention layers caches K and V of 2 heads × 256: 1,024 values ·
/// 2 B (bf16) = 2,048 B, 24,576 B over the 12. Per sequence, each of the 36 DeltaNet layers
/// holds its conv state `[conv_dim 2·16·128 + 32·128 = 8,192, kernel 4]` = 32,768 bf16 values
/// (65,536 B) and its recurrent state `[32 heads, 128, 128]` = 524,288 values in fp32
/// (`torch_chunk_gated_delta_rule` returns it in fp32): 2,097,152 B; 2,162,688 B per layer,
/// 77,856,768 B over the 36, whatever the context. At 4,096 tokens: 100,663,296 + 77,856,768.
#[test]
fn kv_only_in_attention_layers_and_fp32_state_in_deltanet_layers() {
    let config = config();
    measured::assert_cache_split(&config, 2, 100_663_296, 77_856_768);
}

/// fit names the 36 gated DeltaNet layers, their 74.25 MiB (77,856,768 B, above) per sequence,
/// and that only the 12 attention layers' KV grows with the context.
#[test]
fn fit_says_only_the_attention_layers_grow() {
    let note = measured::constant_state_note(&config(), 262_144);
    measured::assert_says(
        &note,
        &[
            "36 gated DeltaNet (linear-attention) layers",
            "74.25 MiB",
            "12 attention layers",
        ],
    );
}

/// A tiny Qwen3-Next's AdamW steps with SDPA, fp32 at seq 256 (whole 64-token chunks) and 200
/// (padded) and bf16-mixed at 256, measured on the CPU tensor by tensor (`validation/cpu-measured-qwen3next.json`,
/// `validation/results/`; transformers' torch path of the gated delta rule, as it runs without
/// flash-linear-attention): the peaks (net of the two cuBLAS workspaces a CPU run lacks) and
/// the gated DeltaNet block's activations each within 3 %.
#[test]
fn measured_training_steps_within_3_percent() {
    let worst = measured::worst("cpu-measured-qwen3next.json", 4);
    assert!(worst <= 0.03, "worst {worst}");
}
