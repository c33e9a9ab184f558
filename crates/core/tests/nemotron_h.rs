//! Nemotron-H / Nemotron-3 (`nemotron_h`: one mixer per layer, Mamba2, attention, MLP or MoE):
//! the inference cache of NVIDIA-Nemotron-Nano-9B-v2 and Nemotron-3-Nano-30B-A3B
//! (`crates/formats/tests/fixtures/hybrid/`; the 9B's split and fit's note in `recurrent_state.rs`). Only the `*` layers cache K/V
//! (transformers 5.24 `cache_utils.py` `get_layer_types_and_kwargs` turns `moe`/`mlp` layers
//! into cache-less "dummy" layers); each `M` layer holds a conv state in the compute dtype and
//! an SSM state in fp32 (`mamba_ssm_cache_dtype` "float32"; the torch path's
//! `mamba2_chunk_scan` returns its final state in fp32 and `LinearAttentionLayer` allocates
//! `zeros_like` of it). Every expected number is derived by hand below.

mod common;
mod measured;

use serde_json::Value;

/// The fixture as transformers reads it: the 9B's `time_step_limit` holds Python's `Infinity`.
fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("hybrid/{name}.json"))
}

/// Nemotron-3-Nano-30B-A3B, bf16: 6 `*` layers of 2 KV heads × 128: 512 values · 2 B = 1,024
/// B per layer and token, 6,144 B over the 6; at 4,096 tokens 25,165,824 B. 23 `M` layers:
/// conv `[4096 + 2·8·128 = 6144, 4]` = 24,576 values · 2 B = 49,152 B, SSM `[64, 64, 128]` =
/// 524,288 values · 4 B = 2,097,152 B: 2,146,304 B, × 23 = 49,364,992 B. The 23 MoE layers
/// cache nothing.
#[test]
fn nano_30b_a3b_caches_kv_in_six_layers_and_state_in_23() {
    let c = config("nemotron-3-nano-30b-a3b");
    assert_eq!(measured::kv_cache(&c, 1, 4096), 25_165_824 + 49_364_992);
}

/// `mamba_ssm_cache_dtype: "bfloat16"` halves the SSM state where the engine honours it
/// (vLLM): 27 · (98,304 + 1,310,720 · 2) = 73,433,088 B a sequence. Transformers' cache keeps
/// the scan's fp32 final state whatever the setting: 27 · (98,304 + 1,310,720 · 4) =
/// 144,211,968 B, the same as without it.
#[test]
fn a_half_width_ssm_cache_dtype_halves_the_state_in_vllm_only() {
    use vramscope_core::estimate::kv::state_bytes_per_sequence;
    use vramscope_core::job::Framework;
    let mut c = config("nemotron-nano-9b-v2");
    c["mamba_ssm_cache_dtype"] = "bfloat16".into();
    let m = vramscope_formats::hf_config::parse_config_str(&c.to_string(), "nano.json").unwrap();
    assert_eq!(
        state_bytes_per_sequence(&m.spec, 2, Framework::Vllm),
        73_433_088
    );
    assert_eq!(
        state_bytes_per_sequence(&m.spec, 2, Framework::Pytorch),
        144_211_968
    );
    assert_eq!(measured::kv_cache(&c, 1, 4096), 67_108_864 + 144_211_968);
}

/// The report's model summary reads the first attention layer (layer 14: 40 heads over 8 of
/// 128), the first MLP (15680 wide; layer 0 is a Mamba layer without one) and the 27 Mamba
/// layers, not the mixer-less MLP layers.
#[test]
fn summary_skips_the_mixerless_layers() {
    let figures = measured::hybrid_summary(
        serde_json::json!({"model": {"hf_config": config("nemotron-nano-9b-v2")},
        "task": "infer", "batch": 1, "seq": 128, "precision": "bf16"}),
    );
    let want = [40, 8, 128, 15680, 27, 56];
    assert_eq!(figures, want.map(Some));
}

/// Training names the Mamba2 path: `eager` the torch path, `sdpa` the fused kernel, which
/// keeps less.
#[test]
fn training_names_the_mixer_path() {
    let (eager, fused) =
        measured::mixer_paths(&config("nemotron-nano-9b-v2"), "Nemotron-H's Mamba2 layers");
    assert!(fused.per_gpu.components.activations < eager.per_gpu.components.activations);
}
