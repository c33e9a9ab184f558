//! LFM2: LiquidAI/LFM2-1.2B from its published config
//! (`crates/formats/tests/fixtures/hybrid/lfm2-1.2b.json`) caches K/V only in its 6 attention
//! layers and a constant conv window in its 10 short-convolution layers; a tiny LFM2's
//! training step measured on the CPU. Expected numbers are derived by hand below from the
//! shapes (`modeling_lfm2.py`, `cache_utils.py`), or measured.

mod measured;

use measured::run;
use serde_json::{json, Value};

fn config() -> Value {
    measured::hybrid_config("lfm2-1.2b")
}

/// Per token, each of the 6 attention layers caches K and V of 8 KV heads × 64: 1,024 values
/// · 2 B (bf16) = 2,048 B, 12,288 B over the 6. Per sequence, each of the 10 conv layers holds
/// `conv_states [hidden 2048, conv_L_cache 3]` of `B · x` (`LinearAttentionLayer.
/// lazy_initialization`: `(*conv_states.shape[:-1], conv_kernel_size)`) = 6,144 bf16 values,
/// 12,288 B; 122,880 B over the 10, whatever the context. At 4,096 tokens: 50,331,648 +
/// 122,880 B per sequence.
#[test]
fn kv_only_in_attention_layers_and_a_conv_window_in_conv_layers() {
    let config = config();
    measured::assert_cache_split(&config, 2, 50_331_648, 122_880);
}

/// fit names the 10 short-convolution layers, their 120 KiB (122,880 B, above) per sequence,
/// and that only the 6 attention layers' KV grows with the context.
#[test]
fn fit_says_only_the_attention_layers_grow() {
    let note = measured::constant_state_note(&config(), 128_000);
    measured::assert_says(
        &note,
        &[
            "10 short-convolution (LFM2) layers",
            "120.0 KiB",
            "6 attention layers",
        ],
    );
}

/// Training says which short-convolution path it estimates (transformers' torch fallback).
#[test]
fn training_names_the_conv_path() {
    let r = run(
        json!({"model": {"hf_config": config()}, "task": "train", "batch": 1, "seq": 2048,
               "precision": "bf16-mixed", "optimizer": "adamw", "attention": "sdpa"}),
    );
    assert!(
        r.warnings.iter().any(|w| w.contains("short-convolution")),
        "{:?}",
        r.warnings
    );
    assert!(!r.warnings.iter().any(|w| w.contains("mamba_ssm")));
}

/// A tiny LFM2's AdamW steps with SDPA, fp32 and bf16-mixed, measured on the CPU tensor by
/// tensor (`validation/cpu-measured-lfm2.json`, `validation/results/`; the short convolution
/// on transformers' torch fallback, as it runs without a hub `causal_conv1d` kernel): the
/// peaks (net of the two cuBLAS workspaces a CPU run lacks) and the short-conv block's
/// activations each within 3 %.
#[test]
fn measured_training_steps_within_3_percent() {
    let worst = measured::worst("cpu-measured-lfm2.json", 4);
    assert!(worst <= 0.03, "worst {worst}");
}

/// A tiny LFM2-MoE's AdamW steps with SDPA, fp32 and bf16-mixed, measured on the CPU
/// (`validation/cpu-measured-lfm2moe.json`, `validation/results/`; transformers' default
/// `grouped_mm` experts and the sigmoid router of `Lfm2MoeTopKRouter`): within 3 %.
#[test]
fn measured_moe_training_steps_within_3_percent() {
    let worst = measured::worst("cpu-measured-lfm2moe.json", 4);
    assert!(worst <= 0.03, "worst {worst}");
}

/// LiquidAI/LFM2-8B-A1B (`fixtures/hybrid/lfm2-8b-a1b.json`): 6 attention layers of 8 KV heads
/// × 64 cache 2 · 512 · 2 B = 2,048 B per token each, 12,288 B over the 6; its 18 conv layers
/// hold `[2048, 3]` bf16 each, 12,288 B, 221,184 B per sequence. At 4,096 tokens: 50,331,648 +
/// 221,184 B per sequence; the experts change neither.
#[test]
fn moe_kv_and_conv_state() {
    let config = measured::hybrid_config("lfm2-8b-a1b");
    measured::assert_cache_split(&config, 1, 50_331_648, 221_184);
}
