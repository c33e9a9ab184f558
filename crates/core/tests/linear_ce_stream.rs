//! torchtune's `LinearCrossEntropyLoss` in the allocator stream (`alloc_events/linear_ce.rs`):
//! its events, derived by hand from torchtune's source and the CPU measurement's order
//! (`scripts/measure_linear_ce.patch`), and the stream's peak against the walk's.

mod common;

use common::stream_steps::{
    assert_stream_meets_walk, big_allocs, events_in, signed_sizes, stream_and_walk, stream_of,
    tiny_llama,
};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Phase};

fn llama(model: &str, peft: Option<Value>) -> Value {
    let mut job = json!({
        "model": model, "precision": "bf16", "optimizer": "adamw-fused",
        "batch": 2, "seq": 2048, "gpu": "h200", "loss": "linear-ce", "checkpointing": "full"
    });
    if let Some(p) = peft {
        job["peft"] = p;
    }
    job
}

/// The stream's peak against the walk's (printed): Llama-3.1-8B LoRA r16 and full fine-tune,
/// bf16, b2 × 2048, full checkpointing; the CPU-measured tiny Llama's step.
#[test]
fn stream_meets_walk() {
    let lora = json!({"method": "lora", "rank": 16, "alpha": 32,
        "targets": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj"],
        "adapter_dtype": "bf16", "dropout": 0.0});
    let tiny = common::spec_job(
        "cpu-tiny-llama-bf16-adamw-sdpa-linearce-b2s256",
        json!({"task": "train", "loss": "linear-ce"}),
        &common::SPEC_KEYS,
    );
    for job in [
        llama("llama-3.1-8b", Some(lora)),
        llama("llama-3.1-8b", None),
        tiny,
    ] {
        let (s, w) = stream_and_walk(&job);
        let name = job["model"].as_str().unwrap_or("the measured tiny Llama");
        let d = (s as f64 / w as f64 - 1.0) * 100.0;
        eprintln!(
            "{name} peft {}: stream {s} walk {w} {d:+.4} %",
            job["peft"].is_object()
        );
        assert_stream_meets_walk(&job);
    }
}

/// The one-layer Llama (hidden 256, vocabulary 8192, untied, bf16) at batch 1 × 17.
fn one_layer(peft: Option<Value>) -> Value {
    let mut job = json!({
        "model": {"hf_config": tiny_llama(1)}, "precision": "bf16", "optimizer": "adamw",
        "batch": 1, "seq": 17, "gpu": "h200", "loss": "linear-ce"
    });
    if let Some(p) = peft {
        job["peft"] = p;
    }
    job
}

/// The forward from the model's output on, at 1 × 17: the output (17·256·2 = 8,704 B); the
/// valid count — a boolean mask (17 B) and `nonzero`'s indices (N = 16 rows: 16·8 = 128 B,
/// which the stream requests as the 512 B block it takes), both freed; `mask_inputs` — the
/// mask again, the indices (kept), the mask freed, the masked hidden (16·256·2 = 8,192) and
/// targets (128 B → 512); then 8 chunks of 2 rows (`tensor_split`), each: the bf16 logits
/// 2·8192·2 = 32,768, the fp32 copy 65,536, the log-softmax 65,536, the loss scalar and
/// `total_weight` (4 B each), the scalar, the copy and the logits freed; then the
/// recipe's `del outputs`. A frozen head (LoRA) frees the masked hidden before the output.
#[test]
fn forward_events_chunk_by_chunk() {
    let lora = json!({"method": "lora", "rank": 8, "alpha": 16, "targets": ["q_proj"]});
    for (job, trains) in [(one_layer(None), true), (one_layer(Some(lora)), false)] {
        let s = stream_of(&job);
        let ev = events_in(&s, Phase::Forward(1));
        let at = ev
            .iter()
            .position(|e| matches!(*e, Event::Alloc { bytes: 17, .. }))
            .expect("the valid count's mask")
            - 1;
        let mut want: Vec<i64> = vec![8_704, 17, 512, -1, -1, 17, 512, -1, 8_192, 512];
        for _ in 0..8 {
            want.extend([32_768, 65_536, 65_536, 4, 4, -1, -1, -1]);
        }
        if !trains {
            want.push(-1);
        }
        want.push(-1);
        assert_eq!(
            signed_sizes(&ev[at..at + want.len()]),
            want,
            "trains {trains}"
        );
    }
}

/// The backward of the trained head, second step (the autograd thread's cuBLAS handle exists
/// by then), allocations of at least 8,192 B: per chunk, last first, `nll_loss`'s and
/// `log_softmax`'s fp32 gradients (65,536 each) and the bf16 gradient (32,768); the last
/// chunk's projection makes the head's `.grad` (8192·256·2 = 4,194,304); each other chunk's
/// makes its contribution (4,194,304), re-made by the input buffer's step, and the second of
/// them also the sum (4,194,304); the chunks' input gradients (2·256·2 = 1,024) fall below
/// the floor. Then each `SliceBackward`'s zero [16, 256] (8,192), and `IndexSelectBackward`'s
/// [17, 256] (8,704).
#[test]
fn backward_events_chunk_by_chunk() {
    let s = stream_of(&one_layer(None));
    let b = big_allocs(&s, Phase::Backward(1), 8_192);
    let loss = [65_536u64, 65_536, 32_768];
    let mut want: Vec<u64> = loss.to_vec();
    want.push(4_194_304);
    want.extend(loss);
    want.extend([4_194_304, 4_194_304, 4_194_304]);
    for _ in 0..6 {
        want.extend(loss);
        want.extend([4_194_304, 4_194_304]);
    }
    want.extend([8_192; 8]);
    want.push(8_704);
    assert_eq!(b[..want.len()], want[..]);
    assert_stream_meets_walk(&one_layer(None));
}
