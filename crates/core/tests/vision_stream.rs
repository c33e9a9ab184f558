//! A vision-language training step through the allocator stream (issue 30): Gemma 3's SigLIP
//! tower, projector and merge written as events (`estimate/vision_events.rs`,
//! `alloc_events/tower.rs`), against the walk and against hand derivations from transformers
//! 5.24's `modeling_gemma3.py` / `modeling_siglip.py`.

mod common;

use common::stream_steps::{stream_and_walk, stream_of};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Stream};

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

/// The most bytes the stream's tensors hold at once, each request rounded up to 512 B as the
/// caching allocator's `allocated_bytes` counts a small block (the walk's rounding), without
/// the allocator model's whole-block accounting: a large cached block reused for a smaller
/// request is counted whole when the remainder is under 1 MiB (`should_split`), which the walk,
/// a sum of tensors, does not have.
fn tensor_peak(s: &Stream) -> u64 {
    let (mut live, mut peak) = (0u64, 0u64);
    let mut sizes = std::collections::HashMap::new();
    for e in &s.events {
        match *e {
            Event::Alloc { id, bytes } => {
                let b = bytes.div_ceil(512) * 512;
                sizes.insert(id, b);
                live += b;
                peak = peak.max(live);
            }
            Event::Free { id } => live -= sizes[&id],
            _ => {}
        }
    }
    peak
}

/// Gemma-3-4B b1 × 2048 with one 896 × 896 image (256 image tokens, so 2,304 positions),
/// bf16-mixed and bf16; trained, with the tower frozen, and under full checkpointing: the
/// stream's tensors at their fullest meet the walk's peak allocated within 0.1 %. (Run through
/// the allocator model, the stream's allocated peak stands +0.28 % / +0.39 % over, +0.24 % /
/// +0.35 % without the image: whole cached blocks reused, the same with or without the tower.)
#[test]
fn gemma3_4b_stream_meets_the_walk() {
    assert_tensors_meet_the_walk(real_job);
}

/// PaliGemma 2 3B at 448 px (1,024 image tokens), b2 × 512 with one image per sequence, the
/// same six settings: the stream's tensors at their fullest within 0.1 % of the walk's peak.
#[test]
fn paligemma2_3b_stream_meets_the_walk() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../formats/tests/fixtures/vlm/paligemma2-3b-pt-448.json"
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_tensors_meet_the_walk(|precision, extra| {
        let mut job = json!({
            "model": {"hf_config": config.clone()}, "task": "train", "batch": 2, "seq": 512,
            "precision": precision, "optimizer": "adamw", "gpu": "h100",
            "images": {"count": 1, "width": 448, "height": 448}
        });
        for (k, v) in extra.as_object().unwrap() {
            job[k] = v.clone();
        }
        job
    });
}

/// bf16-mixed and bf16; trained, with the tower frozen, under full checkpointing.
fn assert_tensors_meet_the_walk(job_of: impl Fn(&str, Value) -> Value) {
    for precision in ["bf16-mixed", "bf16"] {
        for extra in [
            json!({}),
            json!({"freeze": ["vision"]}),
            json!({"checkpointing": "full"}),
        ] {
            let job = job_of(precision, extra.clone());
            let (input, resolved) = common::prepared_json(&job);
            let walk = vramscope_core::estimate::estimate(&input, &resolved)
                .unwrap()
                .per_gpu
                .peaks
                .peak_allocated
                .unwrap();
            let d = tensor_peak(&stream_of(&job)) as f64 / walk as f64 - 1.0;
            assert!(d.abs() < 0.001, "{precision} {extra}: {:+.4} %", d * 100.0);
        }
    }
}

/// The tiny Gemma 3 measured on the CPU (`validation/cpu-measured-gemma3vis.json`): the
/// stream's peak and the walk's (net of the two cuBLAS workspaces a CPU lacks) within 1 % of
/// each measured peak — under full checkpointing the peak sits in the tower's backward, which
/// both write (`tower.rs`, `vision_events::backward_top`).
#[test]
fn the_stream_meets_the_cpu_measurement() {
    let cases: Vec<Value> = common::validation("cpu-measured-gemma3vis.json");
    assert_eq!(cases.len(), 4);
    for c in &cases {
        let (stream, walk) = stream_and_walk(&c["job"]);
        let measured = c["expected_bytes"].as_u64().unwrap() as f64;
        for (what, got) in [("stream", stream), ("walk", walk)] {
            let d = (got - common::CPU_MISSING_WORKSPACES) as f64 / measured - 1.0;
            assert!(d.abs() < 0.01, "{} {what}: {:+.3} %", c["id"], d * 100.0);
        }
    }
}

/// PaliGemma 2's measured steps (`validation/cpu-measured-vlm-season.json`: a tiny
/// PaliGemma, SigLIP 2 layers × 64 and Gemma 2 3 × 64, eager attention, bf16-mixed with two
/// 112 × 112 images and fp32 with one): the stream's peak within 1 % of each measured one.
#[test]
fn paligemma_stream_meets_the_cpu_measurement() {
    let cases: Vec<Value> = common::validation("cpu-measured-vlm-season.json");
    let peaks: Vec<&Value> = cases
        .iter()
        .filter(|c| {
            c["id"].as_str().unwrap().contains("paligemma")
                && c["metric"] == "per_gpu.peak_allocated"
        })
        .collect();
    assert_eq!(peaks.len(), 2);
    for c in peaks {
        let (stream, _) = stream_and_walk(&c["job"]);
        let measured = c["expected_bytes"].as_u64().unwrap() as f64;
        let d = (stream - common::CPU_MISSING_WORKSPACES) as f64 / measured - 1.0;
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
    let s = stream_of(&cases[0]["job"]);
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

/// The tiny Gemma 3's fp32 tower forward (2 images of 16 × 16 = 256 patches, width 128,
/// 4 heads of 32, MLP 512; one tower tensor `[2, 256, 128]` fp32 = 262,144 B, "D"), each
/// SigLIP encoder layer by hand from `SiglipEncoderLayer.forward` / `SiglipAttention.forward`
/// (transformers 5.24) with SDPA on CUDA: `layer_norm1` (D, its fp32 mean and rstd, 2 · 256 ·
/// 4 B = 2,048 each); `q_proj`, `k_proj`, `v_proj` (D each); the memory-efficient kernel (fp32
/// has no flash kernel): its output (D, laid out `[b, s, h, d]`, so the module's
/// `transpose(1, 2).contiguous()` copies nothing) and its fp32 log-sum-exp (2 · 4 heads · 256 ·
/// 4 B = 8,192); `out_proj` (D); the residual add (D), then `out_proj`'s output freed (nothing
/// saved it); `layer_norm2` (D, 2,048, 2,048); `fc1` (2 · 256 · 512 · 4 B = 1,048,576);
/// `gelu_pytorch_tanh` (1,048,576); `fc2` (D); the residual add (D), `fc2`'s output freed.
/// Three such layers follow the embeddings' output (D), then the projector's kept tensors:
/// the RMSNorm's input and the matmul's, 2 · (2 · 64 tokens · 128 · 4 B = 65,536),
/// `post_layernorm`'s mean and rstd (2 · 2,048) and the `reshape` copy `avg_pool` saves (D):
/// 397,312.
#[test]
fn siglip_layers_forward_in_order() {
    use common::stream_steps::{events_in, signed_sizes};
    use vramscope_core::estimate::alloc_events::Phase;
    let cases: Vec<Value> = common::validation("cpu-measured-gemma3vis.json");
    let s = stream_of(&cases[0]["job"]);
    let d = 262_144;
    let layer = [
        d, 2048, 2048, d, d, d, d, 8192, d, d, -1, d, 2048, 2048, 1_048_576, 1_048_576, d, d, -1,
    ];
    for step in 0..2 {
        let signed = signed_sizes(&events_in(&s, Phase::Forward(step)));
        let at = signed.iter().position(|&b| b == d).expect("the embeddings");
        let mut want = vec![d];
        for _ in 0..3 {
            want.extend(layer);
        }
        want.push(397_312);
        assert_eq!(&signed[at..at + want.len()], &want[..]);
    }
}

/// The tower's weight gradients, by hand: the patch convolution's weight, 128 · 3 · 14 · 14 ·
/// 4 B = 301,056 (fp32 under bf16-mixed), made once per backward after the tower's layers when
/// the tower trains, never when it is frozen (`freeze: ["vision"]`: `requires_grad` off, no
/// `.grad`), in the tiny Gemma 3's bf16-mixed steps.
#[test]
fn a_frozen_tower_makes_no_gradient() {
    use common::stream_steps::allocs_in;
    use vramscope_core::estimate::alloc_events::Phase;
    let cases: Vec<Value> = common::validation("cpu-measured-gemma3vis.json");
    for (case, made) in [(&cases[1], 1), (&cases[2], 0)] {
        assert_eq!(case["job"]["precision"], "bf16-mixed");
        let s = stream_of(&case["job"]);
        for step in 0..2 {
            let conv = allocs_in(&s, Phase::Backward(step), |b| b == 301_056);
            assert_eq!(conv.len(), made, "{}", case["id"]);
        }
    }
}
