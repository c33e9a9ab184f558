//! Falcon-H1 (every layer attention and a Mamba2 mixer side by side): tiiuae/Falcon-H1-0.5B's
//! config (`crates/formats/tests/fixtures/hybrid/falcon-h1-0.5b-instruct.json`) caches K/V in
//! all 36 layers and a recurrent state in all 36 mixers; the mixer's training path follows the
//! `attention` setting. The measured CPU steps are held to 3 % in `cpu_measured.rs` (the same
//! `validation/cpu-measured-hybrid.json`), the cache split and fit's note in `recurrent_state.rs`.

mod common;

mod measured;

use serde_json::Value;

fn config() -> Value {
    measured::hybrid_config("falcon-h1-0.5b-instruct")
}

/// Training: `attention: eager` runs the mixers' torch path, `sdpa` the fused mamba_ssm kernel;
/// each says so. The fused kernel saves `zxbcdt` (3352 wide), `out_x` (1536) and nothing of the
/// chunked scan, so it keeps less than the torch path, which also saves the conv input and
/// output (1792 wide each), the scan's `[heads, chunk, chunk]` decay and score tensors and the
/// einsum operand copies.
#[test]
fn training_names_the_mixer_path() {
    // Any line naming the torch path (the mixers are the only ones here).
    let (eager, fused) = measured::mixer_paths(&config(), "torch path");
    assert!(
        fused.per_gpu.components.activations < eager.per_gpu.components.activations,
        "{} vs {}",
        fused.per_gpu.components.activations,
        eager.per_gpu.components.activations
    );
}
