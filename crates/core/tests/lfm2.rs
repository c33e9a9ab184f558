//! LFM2: LiquidAI/LFM2-1.2B from its published config
//! (`crates/formats/tests/fixtures/hybrid/lfm2-1.2b.json`) caches K/V only in its 6 attention
//! layers and a constant conv window in its 10 short-convolution layers; a tiny LFM2's
//! training step measured on the CPU (the caches of LFM2-1.2B and LFM2-8B-A1B and fit's note in
//! `recurrent_state.rs`). Expected numbers are derived by hand below from the
//! shapes (`modeling_lfm2.py`, `cache_utils.py`), or measured.

mod common;

mod measured;

use measured::run;
use serde_json::{json, Value};

fn config() -> Value {
    measured::hybrid_config("lfm2-1.2b")
}

/// Training says which short-convolution path it estimates (transformers' torch fallback).
#[test]
fn training_names_the_conv_path() {
    let r = run(
        json!({"model": {"hf_config": config()}, "task": "train", "batch": 1, "seq": 2048,
               "precision": "bf16-mixed", "optimizer": "adamw", "attention": "sdpa"}),
    );
    common::assert_warns(&r.warnings, "short-convolution");
    common::assert_never_warns(&r.warnings, "mamba_ssm");
}
