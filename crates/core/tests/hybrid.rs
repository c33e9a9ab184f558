//! Hybrid decoders: ai21labs/AI21-Jamba-1.5-Mini from its published config
//! (`crates/formats/tests/fixtures/hybrid/ai21-jamba-1.5-mini.json`) holds KV only in its 4
//! attention layers and a recurrent state in its 28 Mamba layers; a tiny Jamba's training steps
//! measured on the CPU. Every expected number is derived by hand below from the model's shapes.

mod measured;

use serde_json::Value;

fn config() -> Value {
    measured::hybrid_config("ai21-jamba-1.5-mini")
}

/// Per token, each of the 4 attention layers caches K and V of 8 heads × 128: 2,048 values ·
/// 2 B (bf16) = 4,096 B, 16,384 B over the 4. Per sequence, each of the 28 Mamba layers holds
/// its conv state `[d_inner 8192, d_conv 4]` = 32,768 values and its SSM state `[8192,
/// d_state 16]` = 131,072 values: 163,840 · 2 B = 327,680 B, × 28 = 9,175,040 B whatever the
/// context. At 4,096 tokens: 67,108,864 + 9,175,040 = 76,283,904 B per sequence.
#[test]
fn kv_only_in_attention_layers_and_state_in_mamba_layers() {
    let config = config();
    // Doubling the context doubles only the attention layers' part.
    measured::assert_cache_split(&config, 3, 67_108_864, 9_175_040);
}

/// fit names the 28 state-space layers, their 8.75 MiB (9,175,040 B) per sequence, and that
/// only the 4 attention layers' KV grows with the context.
#[test]
fn fit_says_only_the_attention_layers_grow() {
    let note = measured::constant_state_note(&config(), 262_144);
    measured::assert_says(
        &note,
        &["28 state-space layers", "8.75 MiB", "4 attention layers"],
    );
}

/// Training steps of a tiny Jamba (4 layers: Mamba + SwiGLU, attention + 4 experts, twice)
/// measured on the CPU tensor by tensor (`validation/cpu-measured-hybrid.json`, made with
/// `../shared/measure/measure.py` and `scripts/cases_from_measure.py`; validation/README.md):
/// peak, activations and the Mamba layer's activations each within 3 %; and a tiny Falcon-H1's
/// (4 layers of attention beside a Mamba2 mixer on its torch path; validation/README.md). The peak is compared
/// net of the two cuBLAS workspaces the estimate counts on a GPU and a CPU run lacks, as in
/// `gpt_oss.rs`.
#[test]
fn measured_training_steps_within_3_percent() {
    let worst = measured::worst("cpu-measured-hybrid.json", 3);
    assert!(worst <= 0.03, "worst {worst}");
}
