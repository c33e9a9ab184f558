//! Hybrid decoders: ai21labs/AI21-Jamba-1.5-Mini from its published config
//! (`crates/formats/tests/fixtures/hybrid/ai21-jamba-1.5-mini.json`) holds KV only in its 4
//! attention layers and a recurrent state in its 28 Mamba layers (held by hand in
//! `recurrent_state.rs`); a tiny Jamba's training steps measured on the CPU.

mod measured;

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
