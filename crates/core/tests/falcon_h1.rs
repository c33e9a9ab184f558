//! Falcon-H1 (every layer attention and a Mamba2 mixer side by side): tiiuae/Falcon-H1-0.5B's
//! config (`crates/formats/tests/fixtures/hybrid/falcon-h1-0.5b-instruct.json`) caches K/V in
//! all 36 layers and a recurrent state in all 36 mixers; the mixer's training path follows the
//! `attention` setting. The measured CPU steps are held to 3 % in `hybrid.rs` (the same
//! `validation/cpu-measured-hybrid.json`). Every expected number is derived by hand below.

mod common;

mod measured;

use measured::run;
use serde_json::{json, Value};

fn config() -> Value {
    measured::hybrid_config("falcon-h1-0.5b-instruct")
}

/// Per token, each of the 36 layers caches K and V of 2 KV heads × 64: 256 values · 2 B (bf16)
/// = 512 B, 18,432 B over the 36. Per sequence, each layer's mixer holds its conv state
/// `[conv_dim 1536 + 2·128 = 1792, d_conv 4]` = 7,168 values and its SSM state `[24 heads, 64,
/// d_state 128]` = 196,608 values: 203,776 · 2 B = 407,552 B, × 36 = 14,671,872 B whatever the
/// context. At 4,096 tokens: 75,497,472 + 14,671,872 = 90,169,344 B per sequence.
#[test]
fn kv_in_every_layer_and_state_in_every_mixer() {
    let config = config();
    // Doubling the context doubles only the attention part.
    measured::assert_cache_split(&config, 2, 75_497_472, 14_671_872);
}

/// fit says the 36 mixers' state (14,671,872 B = 13.99 MiB per sequence) is constant in
/// context and that the 36 layers' attention KV grows with it.
#[test]
fn fit_says_the_mixers_state_is_constant() {
    let note = measured::constant_state_note(&config(), 16_384);
    measured::assert_says(
        &note,
        &[
            "36 layers' state-space mixers",
            "13.99 MiB",
            "36 layers' attention KV cache",
        ],
    );
}

/// Training: `attention: eager` runs the mixers' torch path, `sdpa` the fused mamba_ssm kernel;
/// each says so. The fused kernel saves `zxbcdt` (3352 wide), `out_x` (1536) and nothing of the
/// chunked scan, so it keeps less than the torch path, which also saves the conv input and
/// output (1792 wide each), the scan's `[heads, chunk, chunk]` decay and score tensors and the
/// einsum operand copies.
#[test]
fn training_names_the_mixer_path() {
    let est = |attention: &str| {
        run(
            json!({"model": {"hf_config": config()}, "task": "train", "batch": 1,
                   "seq": 2048, "precision": "bf16-mixed", "optimizer": "adamw",
                   "attention": attention}),
        )
    };
    let eager = est("eager");
    let fused = est("sdpa");
    assert!(eager.warnings.iter().any(|w| w.contains("torch path")));
    assert!(common::warns_of(
        &fused.warnings,
        "mamba_split_conv1d_scan_combined"
    ));
    assert!(
        fused.per_gpu.components.activations < eager.per_gpu.components.activations,
        "{} vs {}",
        fused.per_gpu.components.activations,
        eager.per_gpu.components.activations
    );
}
