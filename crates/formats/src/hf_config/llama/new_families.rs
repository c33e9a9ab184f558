//! The MoE families added for issue 21, as rows of the Llama-shaped table: OLMoE, Phi-3.5-MoE,
//! GLM-4.5/4.6 MoE, Llama 4 (text) and Kimi-K2 (a DeepSeek-V3 under its own `model_type`), with
//! what Llama 4's layers need beyond a row (NoPE layers, chunked attention, the L2 q/k norm, the
//! MoE layer pattern). Class defaults are those of `configuration_<family>.py` (transformers 5.x).

use super::family::{
    Biases, Defaults, Experts, Family, Sliding, DEEPSEEK_V3, LLAMA, LLAMA_DEFAULTS,
};
use crate::error::Result;
use crate::hf_config::fields::Cfg;
use serde_json::Value;
use vramscope_core::model::{ModelSpec, Naming};

/// OLMoE (`modeling_olmoe.py`): every layer MoE (OlmoeConfig: 64 experts, 8 per token, experts
/// `intermediate_size` wide, default 2048), no shared expert, a router without bias, and RMS
/// q/k norms over the whole projections (`q_norm [hidden]`, `k_norm [kv_heads · head_dim]`).
pub(super) const OLMOE: Family = Family {
    model_type: "olmoe",
    defaults: Defaults {
        arch: "OlmoeForCausalLM",
        vocab: 50304,
        hidden: 2048,
        ffn: 2048,
        layers: 16,
        heads: 16,
        max_pos: 4096,
        ..LLAMA_DEFAULTS
    },
    naming: Naming::QwenMoe,
    qk_norm: true,
    qk_norm_whole: true,
    experts: Experts::Mixtral {
        experts: 64,
        top_k: 8,
        jitter: None,
    },
    ..LLAMA
};

/// Phi-3.5-MoE (`modeling_phimoe.py`): LayerNorms with bias (`nn.LayerNorm(...,
/// elementwise_affine=True)` in each block and at the end), q/k/v/o biases by
/// `attention_bias`, every layer MoE with Mixtral's tensor names (PhimoeConfig: 16 experts, 2 per
/// token, `intermediate_size` 6400), a head bias by `lm_head_bias`, and a sliding window on
/// every layer when the config sets one.
pub(super) const PHIMOE: Family = Family {
    model_type: "phimoe",
    defaults: Defaults {
        arch: "PhimoeForCausalLM",
        vocab: 32064,
        hidden: 4096,
        ffn: 6400,
        kv_heads: Some(8),
        max_pos: 4096 * 32,
        ..LLAMA_DEFAULTS
    },
    naming: Naming::Mixtral,
    layer_norm: true,
    sliding: Sliding::All,
    experts: Experts::Mixtral {
        experts: 16,
        top_k: 2,
        jitter: Some(("input_jitter_noise", 2)),
    },
    lm_head_bias: true,
    ..LLAMA
};

/// GLM-4.5 / 4.6 MoE (`modeling_glm4_moe.py`): grouped-query attention with q/k/v biases by
/// `attention_bias` (o_proj none), RMS q/k norms per head when `use_qk_norm`, partial rotary
/// (no parameters), DeepSeek-V3's MoE: dense MLPs in the first `first_k_dense_replace` layers
/// (default 1), then `n_routed_experts` (128) experts of `moe_intermediate_size` (1408) and
/// `n_shared_experts` (1) shared ones. The router's `e_score_correction_bias` is a buffer, not a
/// parameter; the multi-token-prediction layers (`num_nextn_predict_layers`) are not built by
/// transformers (`Glm4MoePreTrainedModel._keys_to_ignore_on_load_unexpected` drops
/// `model.layers.46.*` / `model.layers.92.*`), so neither is counted.
pub(super) const GLM4_MOE: Family = Family {
    model_type: "glm4_moe",
    defaults: Defaults {
        arch: "Glm4MoeForCausalLM",
        vocab: 151552,
        hidden: 4096,
        ffn: 10944,
        layers: 46,
        heads: 96,
        kv_heads: Some(8),
        max_pos: 131072,
        ..LLAMA_DEFAULTS
    },
    naming: Naming::DeepSeek,
    biases: Biases::QkvKeys,
    qk_norm_key: Some("use_qk_norm"),
    experts: Experts::DeepSeek {
        expert_ffn: 1408,
        shared: 1,
        experts: Some(128),
        first_dense: 1,
    },
    ..LLAMA
};

/// Llama 4's language model (`modeling_llama4.py`, Llama4TextConfig defaults: 48 layers, hidden
/// 5120, 40 heads of 128, 8 KV heads, 202048 tokens, dense MLPs `intermediate_size_mlp` 16384
/// wide). Per-layer attention and MoE come from [`llama4_layers`] and [`super::moe::llama4_moe`].
pub(super) const LLAMA4_TEXT: Family = Family {
    model_type: "llama4_text",
    defaults: Defaults {
        arch: "Llama4ForCausalLM",
        vocab: 202048,
        hidden: 5120,
        ffn: 16384,
        layers: 48,
        heads: 40,
        kv_heads: Some(8),
        head_dim: Some(128),
        max_pos: 4096 * 32,
        ffn_key: "intermediate_size_mlp",
        ..LLAMA_DEFAULTS
    },
    naming: Naming::Llama4,
    experts: Experts::Llama4,
    ..LLAMA
};

/// Kimi-K2 (`moonshotai/Kimi-K2-Instruct`): its config names `model_type` `kimi_k2` and
/// `architectures` `DeepseekV3ForCausalLM`; the remote code is DeepSeek-V3's, so it reads as
/// DeepSeek-V3 (DeepseekV3Config defaults, multi-head latent attention, 1 shared expert).
pub(super) const KIMI_K2: Family = Family {
    model_type: "kimi_k2",
    ..DEEPSEEK_V3
};

/// Llama 4's per-layer attention (Llama4TextConfig `__post_init__`, `Llama4TextAttention`):
/// layer `i` uses RoPE when `no_rope_layers[i]` is 1 (default: every
/// `no_rope_layer_interval`-th layer, 4, is NoPE); RoPE layers attend in chunks of
/// `attention_chunk_size` (8192; `null` turns it off) unless `layer_types` says otherwise, and
/// carry the weightless L2 q/k norm when `use_qk_norm` (default on).
pub(super) fn llama4_layers(cfg: &Cfg, spec: &mut ModelSpec) -> Result<()> {
    let n = spec.decoder.layers.len() as u64;
    let rope: Vec<bool> = match cfg.obj.get("no_rope_layers") {
        Some(Value::Array(a)) if !a.is_empty() => {
            let flags = cfg.uint_list("no_rope_layers")?;
            if flags.len() as u64 != n {
                return Err(cfg.err(
                    "no_rope_layers",
                    format!("has {} entries for {n} layers", flags.len()),
                ));
            }
            flags.iter().map(|f| *f != 0).collect()
        }
        _ => {
            let interval = cfg.size(&["no_rope_layer_interval"], Some(4))?;
            (0..n).map(|i| !(i + 1).is_multiple_of(interval)).collect()
        }
    };
    let chunk = match cfg.obj.get("attention_chunk_size") {
        Some(Value::Null) => None,
        _ => Some(cfg.size(&["attention_chunk_size"], Some(8192))?),
    };
    let chunked = chunked_layers(cfg, &rope, chunk)?;
    let qk_norm = cfg.boolean("use_qk_norm", true)?;
    for (i, layer) in spec.decoder.layers.iter_mut().enumerate() {
        let a = &mut layer.attention;
        a.nope = !rope[i];
        a.qk_l2_norm = qk_norm && rope[i];
        a.attention_chunk = if chunked[i] { chunk } else { None };
    }
    Ok(())
}

/// Which layers attend in chunks: `layer_types` when the config lists them
/// (`"chunked_attention"`), else the RoPE layers when a chunk size is set.
fn chunked_layers(cfg: &Cfg, rope: &[bool], chunk: Option<u64>) -> Result<Vec<bool>> {
    match cfg.obj.get("layer_types") {
        Some(Value::Array(kinds)) => {
            if kinds.len() != rope.len() {
                return Err(cfg.err(
                    "layer_types",
                    format!("has {} entries for {} layers", kinds.len(), rope.len()),
                ));
            }
            Ok(kinds
                .iter()
                .map(|k| chunk.is_some() && k.as_str() == Some("chunked_attention"))
                .collect())
        }
        _ => Ok(rope.iter().map(|r| *r && chunk.is_some()).collect()),
    }
}
