//! Qwen3-Next: Qwen/Qwen3-Next-80B-A3B-Instruct from its published config
//! (`crates/formats/tests/fixtures/hybrid/qwen3-next-80b-a3b-instruct.json`) holds KV only in
//! its 12 gated-attention layers and a constant recurrent state in its 36 gated DeltaNet
//! layers (held by hand in `recurrent_state.rs`); a tiny Qwen3-Next's training step measured on
//! the CPU.

mod measured;

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
