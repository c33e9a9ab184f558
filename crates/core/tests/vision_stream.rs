//! A vision-language training step through the allocator stream (issue 30): Gemma 3's SigLIP
//! tower, projector and merge written as events (`estimate/vision_events.rs`,
//! `alloc_events/tower.rs`), against the walk and against hand derivations from transformers
//! 5.24's `modeling_gemma3.py` / `modeling_siglip.py`.

mod common;

use common::stream_steps::stream_and_walk;
use serde_json::{json, Value};

/// Gemma-3-4B-it's config.json (the formats crate's fixture).
fn gemma3_4b() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../formats/tests/fixtures/vlm/gemma-3-4b-it.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn real_job(precision: &str, extra: Value) -> Value {
    let mut job = json!({
        "model": {"hf_config": gemma3_4b()}, "task": "train", "batch": 1, "seq": 2048,
        "precision": precision, "optimizer": "adamw", "gpu": "h100",
        "images": {"count": 1, "width": 896, "height": 896}
    });
    for (k, v) in extra.as_object().unwrap() {
        job[k] = v.clone();
    }
    job
}

/// The stream's peak over the walk's, as a fraction of the walk's.
fn gap(job: &Value) -> f64 {
    let (stream, walk) = stream_and_walk(job);
    stream as f64 / walk as f64 - 1.0
}

/// Gemma-3-4B b1 × 2048 with one 896 × 896 image (256 image tokens, so 2,304 positions),
/// bf16-mixed and bf16; trained, with the tower frozen, and under full checkpointing. The text
/// model's own stream already stands over its walk on this model (the same job without the
/// image at 2,304 positions: +0.24 % bf16-mixed, +0.35 % bf16, before this change), so what is
/// asserted is the image branch's part: the gap with the image within 0.1 % of the walk of the
/// gap without it.
#[test]
fn gemma3_4b_stream_meets_the_walk() {
    for precision in ["bf16-mixed", "bf16"] {
        let text = gap(&real_job(precision, json!({"seq": 2304, "images": null})));
        for extra in [
            json!({}),
            json!({"freeze": ["vision"]}),
            json!({"checkpointing": "full"}),
        ] {
            let text = if extra.get("checkpointing").is_some() {
                gap(&real_job(
                    precision,
                    json!({"seq": 2304, "images": null, "checkpointing": "full"}),
                ))
            } else {
                text
            };
            let d = gap(&real_job(precision, extra.clone())) - text;
            eprintln!("{precision} {extra}: {:+.4} %", d * 100.0);
            // Under full checkpointing the step's peak moves into the tower's backward (a
            // block replayed beside the gradients), which the stream writes and the walk does
            // not (its tower has no backward of its own): bf16 +0.128 %.
            let limit = if extra.get("checkpointing").is_some() {
                0.0015
            } else {
                0.001
            };
            assert!(d.abs() < limit, "{precision} {extra}: {:+.4} %", d * 100.0);
        }
    }
}

/// The tiny Gemma 3 measured on the CPU (`validation/cpu-measured-gemma3vis.json`): the
/// stream's peak (net of the two cuBLAS workspaces a CPU lacks) within 1 % of each measured
/// peak, as the walk's is (`cpu_measured.rs`).
#[test]
fn the_stream_meets_the_cpu_measurement() {
    let cases: Vec<Value> = common::validation("cpu-measured-gemma3vis.json");
    assert_eq!(cases.len(), 3);
    for c in &cases {
        let (stream, _) = stream_and_walk(&c["job"]);
        let stream = stream - common::CPU_MISSING_WORKSPACES;
        let measured = c["expected_bytes"].as_u64().unwrap();
        let d = stream as f64 / measured as f64 - 1.0;
        assert!(d.abs() < 0.01, "{}: {:+.3} %", c["id"], d * 100.0);
    }
}

/// The merge in the tiny Gemma 3's fp32 step (`cpu-measured-gemma3vis.json`'s first case:
/// batch 2, 96 text + 64 image positions = 160, text width 64, tower width 128, one 224 × 224
/// image = 16 × 16 = 256 patches per sequence), by hand from `Gemma3Model.forward`:
/// the projected features (2 · 64 tokens · 64 · 4 B = 32,768), `input_ids == image_token_id`
/// (2 · 160 bool = 320), `masked_scatter`'s clone of the embeddings (2 · 160 · 64 · 4 B =
/// 81,920) and CUDA's int64 prefix sum of the embeddings' shape (2 · 160 · 64 · 8 B =
/// 163,840), freed as the kernel returns, then the features and the text embeddings as
/// `inputs_embeds` is rebound. Before it, the tower's embeddings output, the first block's
/// input (2 · 256 · 128 · 4 B = 262,144), is the forward's first tensor of that size.
#[test]
fn the_merge_in_order() {
    use common::stream_steps::{events_in, signed_sizes};
    use vramscope_core::estimate::alloc_events::Phase;
    let cases: Vec<Value> = common::validation("cpu-measured-gemma3vis.json");
    let s = common::stream_steps::stream_of(&cases[0]["job"]);
    for step in 0..2 {
        let signed = signed_sizes(&events_in(&s, Phase::Forward(step)));
        let merge = [32_768, 320, 81_920, 163_840, -1, -1, -1];
        let at = signed
            .windows(merge.len())
            .position(|w| w == merge)
            .expect("the merge");
        let embeddings = signed.iter().position(|&b| b == 262_144).unwrap();
        assert!(embeddings < at, "the tower runs before the merge");
    }
}
