//! Gemma 4's text model (`gemma4_text`) estimated: tiny training steps measured on the CPU.

mod measured;

#[test]
fn measured_training_steps_within_3_percent() {
    let all = measured::compare("cpu-measured-gemma4.json");
    assert!(all.len() >= 4);
}
