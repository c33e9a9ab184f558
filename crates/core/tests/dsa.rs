//! DeepSeek Sparse Attention families (DeepSeek-V3.2 `deepseek_v32`, GLM-5 `glm_moe_dsa`):
//! their inference cache as transformers 5.24 allocates it, and a tiny DeepSeek-V3.2's training
//! step measured on the CPU. Expected numbers are derived by hand below from the shapes, or
//! measured.

mod common;
mod measured;

use serde_json::Value;

fn config(name: &str) -> Value {
    measured::formats_fixture(&format!("dsa/{name}.json"))
}

/// DeepSeek-V3.2-Exp in transformers: `AXK1Attention.forward` caches the latent still
/// compressed (`k_pass [b, 1, t, 512]`, `k_rot [b, 1, t, 64]`) and `DeepseekV32Indexer` its keys
/// (`DynamicIndexedLayer.indexer_keys [b, t, 128]`): 704 values per token and layer, 1,408 B in
/// bf16, 85,888 B over the 61 layers; 351,797,248 B at 4,096 tokens. (DeepSeek-V3's eager code
/// caches the decompressed K and V: 128 · (192 + 128) = 40,960 values.)
#[test]
fn deepseek_v32_caches_the_latent_and_the_indexer_keys() {
    let c = config("deepseek-v3.2-exp");
    assert_eq!(measured::kv_cache(&c, 1, 4096), 351_797_248);
    assert_eq!(measured::kv_cache(&c, 2, 4096), 2 * 351_797_248);
}

/// GLM-5: the same 512 + 64 + 128 = 704 values per token and layer, over 78 layers:
/// 704 · 2 · 78 = 109,824 B per token, 449,839,104 B at 4,096 tokens.
#[test]
fn glm5_cache_per_token() {
    let c = config("glm-5");
    assert_eq!(measured::kv_cache(&c, 1, 4096), 449_839_104);
}

/// GLM-5's `"shared"` layers run no indexer, so cache no indexer keys: the tiny config's
/// layers 0 and 2 hold 16 + 8 + 16 = 40 values per token, layers 1 and 3 hold 16 + 8 = 24:
/// 128 values, 256 B per token in bf16; 262,144 B at 1,024 tokens.
#[test]
fn glm5_shared_layers_cache_no_indexer_keys() {
    let c = config("tiny-glm-moe-dsa-shared");
    assert_eq!(measured::kv_cache(&c, 1, 1024), 262_144);
}
