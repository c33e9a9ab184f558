//! The KV cache on one GPU of a tensor- or pipeline-parallel PyTorch inference job: each
//! tensor-parallel rank caches its own key/value heads (transformers' tensor-parallel plan
//! splits `q/k/v_proj` by heads), each pipeline stage its own layers; the weights were already
//! split so, the cache was not (issue 34's Llama 4 fit probe showed the same figure at tp 1 and
//! tp 2).

mod common;
mod measured;

/// Llama-3.1-8B, bf16, one sequence of 8,192 tokens: 32 layers × K and V × 8 KV heads × 128 ×
/// 2 B = 131,072 B per token, 1,073,741,824 B on one GPU. tp 2: 4 heads a rank, half of it;
/// pp 2: 16 layers a stage, half; both: a quarter; tp 16 over 8 heads: one whole head a rank,
/// an eighth.
#[test]
fn kv_heads_split_over_tensor_ranks_and_layers_over_stages() {
    let kv = |tp: u64, pp: u64| {
        measured::run(serde_json::json!({
            "model": "llama-3.1-8b", "task": "infer", "batch": 1, "seq": 8192,
            "precision": "bf16",
            "parallel": {"gpus": tp * pp, "tp": tp, "pp": pp}
        }))
        .per_gpu
        .components
        .kv_cache
    };
    assert_eq!(kv(1, 1), 1_073_741_824);
    assert_eq!(kv(2, 1), 536_870_912);
    assert_eq!(kv(1, 2), 536_870_912);
    assert_eq!(kv(2, 2), 268_435_456);
    assert_eq!(kv(16, 1), 134_217_728);
}
