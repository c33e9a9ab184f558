//! The attention masks a causal LM's forward holds (`estimate/attention_masks.rs`, transformers
//! 5.24 `masking_utils.py`), read off the forward plan, every figure by hand from the rules:
//! SDPA builds a bool `[1, 1, s, s]` mask (s² bytes) per local layer type once the sequence
//! reaches its window (chunk) and none for full layers; eager a float `[b, 1, s, s]` per layer
//! type, full included, filled from a bool s² pattern; flash-attention none. Each is rounded as
//! the allocator rounds a large block (2 MiB multiples past 10 MiB; every figure here is one).

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::activations::forward;
use vramscope_core::estimate::activations::EagerMasks;

/// Tiny causal LM configs: Mistral (every layer sliding), Gemma-2 (sliding and full,
/// alternating), Llama 4 text (chunked and full, `no_rope_layers`).
fn config(family: &str) -> Value {
    let base = json!({"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 1000,
        "max_position_embeddings": 65536, "num_hidden_layers": 4});
    let mut c = base.as_object().unwrap().clone();
    let extra = match family {
        "mistral" => json!({"model_type": "mistral", "architectures": ["MistralForCausalLM"],
            "sliding_window": 4096}),
        "gemma2" => json!({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
            "sliding_window": 4096}),
        "llama4" => json!({"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"],
            "attention_chunk_size": 8192, "intermediate_size_mlp": 512, "num_local_experts": 1,
            "interleave_moe_layer_step": 1, "num_experts_per_tok": 1, "no_rope_layers": [1, 1, 1, 0]}),
        other => panic!("{other}"),
    };
    c.extend(extra.as_object().unwrap().clone());
    Value::Object(c)
}

fn masks(family: &str, task: &str, attention: &str, batch: u64, seq: u64) -> EagerMasks {
    let (model, job) = common::prepared_json(&json!({"model": {"hf_config": config(family)},
        "task": task, "batch": batch, "seq": seq, "new_tokens": 1, "precision": "bf16",
        "attention": attention}));
    forward(model.spec.as_ref().unwrap(), &job, &mut Vec::new())
        .unwrap()
        .masks
}

/// SDPA: Mistral's one sliding mask once the sequence reaches the window: 8,192² = 67,108,864
/// B at 8,192 (batch 2 or 1 alike: the mask is `[1, 1, s, s]` expanded), 4,096² = 16,777,216 at
/// the window itself (`kv_length >= local_size` forbids the skip), none at 4,095. Gemma-2's
/// full layers need none (`is_causal`), its sliding layers one: 67,108,864 at 8,192. Llama 4's
/// chunked layers one mask once the sequence reaches the chunk: 8,192² = 67,108,864; none at
/// 8,191.
#[test]
fn sdpa_masks_of_local_layers() {
    for task in ["infer", "train"] {
        assert_eq!(masks("mistral", task, "sdpa", 2, 8192).bytes, 67_108_864);
        assert_eq!(masks("mistral", task, "sdpa", 1, 8192).bytes, 67_108_864);
        assert_eq!(masks("mistral", task, "sdpa", 2, 4096).bytes, 16_777_216);
        assert_eq!(masks("mistral", task, "sdpa", 2, 4095).bytes, 0);
        assert_eq!(masks("gemma2", task, "sdpa", 2, 8192).bytes, 67_108_864);
        assert_eq!(masks("llama4", task, "sdpa", 1, 8192).bytes, 67_108_864);
        assert_eq!(masks("llama4", task, "sdpa", 1, 8191).bytes, 0);
        assert_eq!(masks("mistral", task, "sdpa", 2, 8192).pattern, 0);
    }
}

/// Eager: one float mask per layer type in bf16, `[b, 1, s, s]`: Mistral at batch 2 × 4,096
/// 2 · 4,096² · 2 = 67,108,864 B, and below the window 2 · 1,024² · 2 = 4,194,304 (eager never
/// skips); Gemma-2 two
/// (full and sliding) 134,217,728; Llama 4 two (chunked and full) at batch 1 × 8,192: 2 ·
/// 8,192² · 2 = 268,435,456. The bool pattern each is filled from: s², 16,777,216 at 4,096.
#[test]
fn eager_masks_per_layer_type() {
    for task in ["infer", "train"] {
        let m = masks("mistral", task, "eager", 2, 4096);
        assert_eq!((m.bytes, m.pattern), (67_108_864, 16_777_216));
        assert_eq!(masks("mistral", task, "eager", 2, 1024).bytes, 4_194_304);
        assert_eq!(masks("gemma2", task, "eager", 2, 4096).bytes, 134_217_728);
        assert_eq!(masks("llama4", task, "eager", 1, 8192).bytes, 268_435_456);
    }
}

/// Flash-attention gets the 2-D padding mask or `None`: nothing held.
#[test]
fn flash_holds_no_mask() {
    for family in ["mistral", "gemma2", "llama4"] {
        assert_eq!(
            masks(family, "infer", "flash", 2, 8192),
            EagerMasks::default()
        );
    }
}
