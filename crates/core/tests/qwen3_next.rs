//! Qwen3-Next: Qwen/Qwen3-Next-80B-A3B-Instruct from its published config
//! (`crates/formats/tests/fixtures/hybrid/qwen3-next-80b-a3b-instruct.json`) holds KV only in
//! its 12 gated-attention layers and a constant recurrent state in its 36 gated DeltaNet
//! layers; a tiny Qwen3-Next's training step measured on the CPU. Expected numbers are derived
//! by hand below from the shapes, or measured.

mod measured;

use measured::run;
use serde_json::{json, Value};

fn config() -> Value {
    let path = format!(
        "{}/../formats/tests/fixtures/hybrid/qwen3-next-80b-a3b-instruct.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Per token, each of the 12 attention layers caches K and V of 2 heads × 256: 1,024 values ·
/// 2 B (bf16) = 2,048 B, 24,576 B over the 12. Per sequence, each of the 36 DeltaNet layers
/// holds its conv state `[conv_dim 2·16·128 + 32·128 = 8,192, kernel 4]` = 32,768 bf16 values
/// (65,536 B) and its recurrent state `[32 heads, 128, 128]` = 524,288 values in fp32
/// (`torch_chunk_gated_delta_rule` returns it in fp32): 2,097,152 B; 2,162,688 B per layer,
/// 77,856,768 B over the 36, whatever the context. At 4,096 tokens: 100,663,296 + 77,856,768.
#[test]
fn kv_only_in_attention_layers_and_fp32_state_in_deltanet_layers() {
    let kv = |batch: u64, seq: u64| {
        run(
            json!({"model": {"hf_config": config()}, "task": "infer", "batch": batch,
                   "seq": seq, "precision": "bf16"}),
        )
        .per_gpu
        .components
        .kv_cache
    };
    assert_eq!(kv(1, 4096), 100_663_296 + 77_856_768);
    assert_eq!(kv(2, 4096), 2 * (100_663_296 + 77_856_768));
    assert_eq!(kv(1, 8192) - kv(1, 4096), 100_663_296);
}

/// A tiny Qwen3-Next's fp32 AdamW step with SDPA, measured on the CPU tensor by tensor
/// (`validation/cpu-measured-qwen3next.json`, `validation/results/`; torch fallback of the
/// gated delta rule, as transformers runs it without flash-linear-attention): the peak (net of
/// the two cuBLAS workspaces a CPU run lacks) within 3 %. The gated DeltaNet block's
/// activations are 4.4 % under the measurement (20,331,520 vs 21,259,776 B): the torch
/// `matmul` of 4-/5-D operands saves contiguous copies of some transposed or sliced operands
/// (the per-chunk key transposes, later chunks' `k_cumdecay` slices) that the model does not
/// yet list (ACCURACY.md); this test holds that gap under 5 % until it is closed.
#[test]
fn measured_training_step() {
    let all = measured::compare("cpu-measured-qwen3next.json");
    assert_eq!(all.len(), 2);
    for c in &all {
        let bound = if c.id.ends_with("-peak") { 0.03 } else { 0.05 };
        assert!(c.error.abs() <= bound, "{} {:+.4}", c.id, c.error);
    }
}
