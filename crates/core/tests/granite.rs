//! Bamba and Granite 4.0-H (Mamba2 mixers interleaved with attention): inference caches (the
//! hybrids' split and fit's note in `recurrent_state.rs`) and training steps. Every expected number is derived by hand below from the model's shapes.

mod common;

mod measured;

use serde_json::{json, Value};

fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("granite/{name}.json"))
}

/// The estimate of a tiny model's measured fp32 AdamW step (batch 2 × seq 256) with
/// `attention`, from the config in `validation/specs/<spec>`.
fn tiny_fp32_step(spec: &str, attention: &str) -> vramscope_core::report::Report {
    let spec: Value = common::validation(&format!("specs/{spec}"));
    measured::run(
        json!({"model": {"hf_config": spec["hf_config"]}, "task": "train", "batch": 2,
               "seq": 256, "precision": "fp32", "optimizer": "adamw", "attention": attention}),
    )
}

/// The tiny Bamba counts as transformers built it (7,153,448 parameters, printed by
/// `measure.py`): 3 mixers (c = 512 + 32 = 544; in_proj 1064·256 = 272,384, conv 2,720, 24,
/// norm 512, out_proj 131,072 = 406,712), 1 attention (2·256² + 2·64·256 = 163,840), 4 SwiGLU
/// (3·256·512 = 393,216) and 8 norms of 256, embeddings and head 2·8192·256 = 4,194,304, final
/// norm 256: 1,220,136 + 163,840 + 1,572,864 + 2,048 + 4,194,304 + 256 = 7,153,448.
#[test]
fn the_measured_bamba_counts_as_transformers() {
    let r = tiny_fp32_step("cpu-tiny-bamba-fp32-adamw-eager.json", "eager");
    assert_eq!(r.model.params_total, 7_153_448);
    common::assert_warns(&r.warnings, "torch path");
}

/// The tiny Granite 4.0-H counts as transformers built it (5,846,824 parameters, printed by
/// `measure.py`): 3 mixers of 406,712 (as the tiny Bamba's), 1 attention of 163,840, 4 MoE
/// blocks (router 4·256 = 1,024, input_linear 4·256·256 = 262,144, output_linear 4·256·128 =
/// 131,072, shared 512·256 + 256·256 = 196,608: 590,848) and 8 norms of 256, tied embeddings
/// 8192·256 = 2,097,152, final norm 256: 1,220,136 + 163,840 + 2,363,392 + 2,048 + 2,097,152 +
/// 256 = 5,846,824.
#[test]
fn the_measured_granite_counts_as_transformers() {
    let r = tiny_fp32_step("cpu-tiny-granitemoehybrid-fp32-adamw-eager.json", "eager");
    assert_eq!(r.model.params_total, 5_846_824);
}

/// The tiny Granite-MoE counts as transformers built it (4,331,776 parameters, printed by
/// `measure.py`): per layer attention 2·256² + 2·64·256 = 163,840, router 4·256 = 1,024,
/// input_linear 4·256·256 = 262,144, output_linear 4·256·128 = 131,072, norms 512: 558,592 × 4
/// = 2,234,368; tied embeddings 8192·256 = 2,097,152; final norm 256: 4,331,776.
#[test]
fn the_measured_granitemoe_counts_as_transformers() {
    let r = tiny_fp32_step("cpu-tiny-granitemoe-fp32-adamw-sdpa.json", "sdpa");
    assert_eq!(r.model.params_total, 4_331_776);
}

/// ibm-granite/granite-3.1-3b-a800m-instruct: every one of the 32 layers caches K and V of 8
/// KV heads × 64 per token: 1,024 values · 2 B (bf16) = 2,048 B, 65,536 B over the 32; no
/// recurrent state. At 4,096 tokens: 268,435,456 B per sequence.
#[test]
fn granitemoe_kv_in_every_layer() {
    let config = config("granite-3.1-3b-a800m-instruct");
    assert_eq!(measured::kv_cache(&config, 1, 4096), 268_435_456);
    assert_eq!(measured::kv_cache(&config, 3, 4096), 3 * 268_435_456);
}
