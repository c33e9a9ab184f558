//! Zamba2 (`zamba2`: Mamba2 layers, shared transformer blocks applied at the hybrid layers):
//! the inference cache of Zamba2-7B and 2.7B (`crates/formats/tests/fixtures/hybrid/`), fit's
//! note, and tiny training steps measured on the CPU. Every hybrid layer caches the K/V of the
//! block it applies, one cache per application (transformers 5.24 `cache_utils.py`: a "hybrid"
//! layer type is a `LinearAttentionAndFullAttentionLayer`, Mamba states and full-attention K/V
//! side by side); every layer holds a conv state in the compute dtype and an SSM state in fp32
//! (the torch path's `mamba2_chunk_scan` returns its final state in fp32 and
//! `LinearAttentionLayer` allocates `zeros_like` of it). Every expected number is derived by
//! hand below.

mod common;
mod measured;

/// Zamba2-7B, bf16: each of the 13 hybrid layers caches K and V of 32 heads × 224 (head_dim =
/// 2 · 3584 / 32): 14,336 values · 2 B = 28,672 B per token, 372,736 B over the 13; at 4,096
/// tokens 1,526,726,656 B. Each of the 81 layers holds its conv state `[7168 + 2·2·64 = 7424,
/// 4]` = 29,696 values · 2 B = 59,392 B and its SSM state `[112 heads, 64, 64]` = 458,752
/// values · 4 B = 1,835,008 B: 1,894,400 B, × 81 = 153,446,400 B whatever the context.
#[test]
fn zamba2_7b_caches_kv_per_application_and_state_in_every_layer() {
    let c = measured::hybrid_config("zamba2-7b");
    let kv = |batch, seq| measured::kv_cache(&c, batch, seq);
    assert_eq!(kv(1, 4096), 1_526_726_656 + 153_446_400);
    assert_eq!(kv(3, 4096), 3 * (1_526_726_656 + 153_446_400));
    // 2,048 tokens fewer: 2,048 · 372,736 B fewer.
    assert_eq!(kv(1, 4096) - kv(1, 2048), 2048 * 372_736);
}

/// Zamba2-2.7B, bf16: 9 hybrid layers of 32 heads × 160 (2 · 2560 / 32): 2 · 5,120 · 2 B =
/// 20,480 B per token and layer, 184,320 B over the 9, × 4,096 = 754,974,720 B; 54 layers of
/// conv `[5120 + 128 = 5248, 4]` · 2 B = 41,984 B and SSM `[80, 64, 64]` = 327,680 values · 4 B
/// = 1,310,720 B: 1,352,704 B × 54 = 73,046,016 B.
#[test]
fn zamba2_2_7b_cache() {
    let c = measured::hybrid_config("zamba2-2.7b");
    assert_eq!(measured::kv_cache(&c, 1, 4096), 754_974_720 + 73_046_016);
}

#[test]
fn training_names_the_mixer_path() {
    let (eager, fused) =
        measured::mixer_paths(&measured::hybrid_config("zamba2-7b"), "Mamba2 mixers");
    assert!(fused.per_gpu.components.activations < eager.per_gpu.components.activations);
}

/// The step-time model multiplies each token through every application of a shared block, not
/// through its stored copy once. The tiny measured model (h 256, 3 applications of 2 blocks):
/// per application q/k/v 512·512·3 = 786,432, o 512·256 = 131,072, gate_up 256·1024 =
/// 262,144, down 512·256 = 131,072, its adapter slot 256·16 + 16·1024 + 3·(512·16 + 16·512) =
/// 69,632: 1,380,352 × 3 = 4,141,056; the six Mamba mixers' tensors (in_proj 1064·256, conv
/// 544·4 + 544, dt_bias/A_log/D 24, out_proj 512·256) 406,200 × 6 = 2,437,200; the hybrid
/// layers' `linear` 65,536 × 3 = 196,608; the tied head 8192·256 = 2,097,152: 8,872,016. The
/// attention cores: 3 applications of 8 heads × (64 + 64).
#[test]
fn step_time_counts_every_application_of_a_shared_block() {
    let v: serde_json::Value = common::validation("specs/cpu-tiny-zamba2-fp32-adamw-eager.json");
    let parsed =
        vramscope_formats::hf_config::parse_config_str(&v["hf_config"].to_string(), "tiny")
            .unwrap();
    let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
    let shape =
        vramscope_core::throughput::ModelShape::of(Some(&parsed.spec), Some(&inv), inv.params());
    assert_eq!(shape.matmul_params, 8_872_016.0);
    assert_eq!(shape.heads, 24.0);
    assert_eq!(shape.attention, vec![(3.0 * 8.0 * 128.0, None)]);
}

/// The report's model summary reads the shared block for heads and MLP width (Zamba2-7B: 32
/// heads over 32 of 224 = 2 · 3584 / 32, ffn 14336) and counts the 81 Mamba layers.
#[test]
fn summary_reads_the_shared_block() {
    let figures = measured::hybrid_summary(serde_json::json!({
        "model": {"hf_config": measured::hybrid_config("zamba2-7b")},
        "task": "infer", "batch": 1, "seq": 128, "precision": "bf16"}));
    let want = [32, 32, 224, 14336, 81, 81];
    assert_eq!(figures, want.map(Some));
}
