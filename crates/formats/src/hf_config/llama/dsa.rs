//! DeepSeek Sparse Attention families: DeepSeek-V3.2 (`deepseek_v32`) and GLM-5
//! (`glm_moe_dsa`). DeepSeek-V3's multi-head latent attention and MoE with a lightning indexer
//! on each attention layer. Class defaults are those of `configuration_deepseek_v32.py` and
//! `configuration_glm_moe_dsa.py`, shapes those of `modeling_deepseek_v32.py` and
//! `modeling_glm_moe_dsa.py` (transformers 5.24.0).

use super::family::{Defaults, Family, DEEPSEEK_V3, LLAMA_DEFAULTS};
use crate::error::Result;
use crate::hf_config::fields::Cfg;
use serde_json::Value;
use vramscope_core::model::{AttentionKind, Indexer, ModelSpec};

/// DeepSeek-V3.2 (`DeepseekV32Config`: vocab 129280, hidden 7168, 18432, 61 layers, 128 heads,
/// 128 KV heads, 163840 positions, untied; `n_routed_experts` 256, `n_shared_experts` 1,
/// `moe_intermediate_size` 2048, `first_k_dense_replace` 3). The blocks are DeepSeek-V3's
/// (`DeepseekV32DecoderLayer` is `Glm4MoeLiteDecoderLayer`), the attention `AXK1Attention`'s MLA
/// plus [`Indexer`].
pub(super) const DEEPSEEK_V32: Family = Family {
    model_type: "deepseek_v32",
    defaults: Defaults {
        arch: "DeepseekV32ForCausalLM",
        max_pos: 163840,
        // The widths, depth and heads are DeepSeek-V3's class defaults again.
        ..DEEPSEEK_V3.defaults
    },
    ..DEEPSEEK_V3
};

/// GLM-5 (`GlmMoeDsaConfig`: vocab 154880, hidden 6144, 12288, 78 layers, 64 heads, 64 KV
/// heads, 202752 positions, untied; experts as DeepSeek-V3.2's).
pub(super) const GLM_MOE_DSA: Family = Family {
    model_type: "glm_moe_dsa",
    defaults: Defaults {
        arch: "GlmMoeDsaForCausalLM",
        vocab: 154880,
        hidden: 6144,
        ffn: 12288,
        layers: 78,
        heads: 64,
        kv_heads: Some(64),
        max_pos: 202752,
        ..LLAMA_DEFAULTS
    },
    // The experts (256 routed, 1 shared, 2048 wide, the first 3 layers dense) are DeepSeek-V3's.
    ..DEEPSEEK_V3
};

/// The latent-attention and indexer defaults a DSA family's config class gives an absent key.
struct DsaDefaults {
    q_lora_rank: u64,
    kv_lora_rank: u64,
    qk_nope_head_dim: u64,
    qk_rope_head_dim: u64,
    v_head_dim: u64,
    index_n_heads: u64,
    index_head_dim: u64,
    index_topk: u64,
}

/// `DeepseekV32Config`: q/kv latents 1536 / 512, nope / rope / v head dims 128 / 64 / 128;
/// indexer 64 heads of 128, top 2048.
const V32: DsaDefaults = DsaDefaults {
    q_lora_rank: 1536,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    index_n_heads: 64,
    index_head_dim: 128,
    index_topk: 2048,
};

/// `GlmMoeDsaConfig`: q/kv latents 2048 / 512, nope / rope / v head dims 192 / 64 / 256;
/// indexer 32 heads of 128, top 2048.
const GLM5: DsaDefaults = DsaDefaults {
    q_lora_rank: 2048,
    qk_nope_head_dim: 192,
    v_head_dim: 256,
    index_n_heads: 32,
    ..V32
};

/// Whether `model_type` is a DSA family.
pub(super) fn is_dsa(model_type: &str) -> bool {
    matches!(model_type, "deepseek_v32" | "glm_moe_dsa")
}

/// Sets each layer's attention to the family's MLA with its indexer: the latent dims with the
/// family's defaults (`AXK1Attention` always projects q through `q_lora_rank`), and on GLM-5's
/// `"shared"` layers an indexer that reuses the previous layer's top-k.
pub(super) fn apply_indexer(cfg: &Cfg, model_type: &str, spec: &mut ModelSpec) -> Result<()> {
    let d = if model_type == "glm_moe_dsa" {
        &GLM5
    } else {
        &V32
    };
    if matches!(cfg.obj.get("q_lora_rank"), Some(Value::Null)) {
        return Err(cfg.err(
            "q_lora_rank",
            "is null; DeepSeek-V3.2 and GLM-5's attention always projects queries through the latent",
        ));
    }
    let n = spec.decoder.layers.len() as u64;
    let shared = indexer_types(cfg, model_type, n)?;
    for (i, layer) in spec.decoder.layers.iter_mut().enumerate() {
        let heads = layer.attention.kind.heads();
        layer.attention.kind = AttentionKind::Latent {
            heads,
            q_lora_rank: Some(cfg.size(&["q_lora_rank"], Some(d.q_lora_rank))?),
            kv_lora_rank: cfg.size(&["kv_lora_rank"], Some(d.kv_lora_rank))?,
            qk_nope_head_dim: cfg.size(&["qk_nope_head_dim"], Some(d.qk_nope_head_dim))?,
            qk_rope_head_dim: cfg.size(&["qk_rope_head_dim"], Some(d.qk_rope_head_dim))?,
            v_head_dim: cfg.size(&["v_head_dim"], Some(d.v_head_dim))?,
            indexer: Some(Indexer {
                heads: cfg.size(&["index_n_heads"], Some(d.index_n_heads))?,
                head_dim: cfg.size(&["index_head_dim"], Some(d.index_head_dim))?,
                topk: cfg.size(&["index_topk"], Some(d.index_topk))?,
                shared: shared[i],
            }),
        };
    }
    Ok(())
}

/// Which layers reuse the previous layer's top-k (GLM-5 only; DeepSeek-V3.2 runs its indexer on
/// every layer). `GlmMoeDsaConfig.__post_init__`: `indexer_types` as given, else
/// `index_topk_pattern` (`"F"` full, `"S"` shared), else layer `i` is full when
/// `max(i - offset + 1, 0) % freq == 0` with `index_topk_freq` (default 1) and
/// `index_skip_topk_offset` (default 2): every layer full by default.
fn indexer_types(cfg: &Cfg, model_type: &str, n: u64) -> Result<Vec<bool>> {
    if model_type != "glm_moe_dsa" {
        return Ok(vec![false; n as usize]);
    }
    let words: Option<Vec<bool>> = match (
        cfg.obj.get("indexer_types"),
        cfg.obj.get("index_topk_pattern"),
    ) {
        (Some(Value::Array(items)), _) | (None | Some(Value::Null), Some(Value::Array(items))) => {
            Some(items.iter().map(|v| v.as_str() == Some("shared")).collect())
        }
        (None | Some(Value::Null), Some(Value::String(s))) => {
            Some(s.chars().map(|c| c == 'S').collect())
        }
        (None | Some(Value::Null), None | Some(Value::Null)) => None,
        _ => return Err(cfg.err("indexer_types", "must be a list of \"full\" / \"shared\"")),
    };
    let shared = match words {
        Some(w) => w,
        None => {
            let freq = cfg.uint("index_topk_freq")?.unwrap_or(1).max(1);
            let offset = cfg.uint("index_skip_topk_offset")?.unwrap_or(2);
            (0..n)
                .map(|i| (i + 1).saturating_sub(offset) % freq != 0)
                .collect()
        }
    };
    if shared.len() as u64 != n {
        return Err(cfg.err(
            "indexer_types",
            format!("has {} entries for {n} layers", shared.len()),
        ));
    }
    if shared.first() == Some(&true) {
        return Err(cfg.err(
            "indexer_types",
            "starts with a \"shared\" layer; it has no earlier top-k to reuse",
        ));
    }
    Ok(shared)
}

/// Which layers hold experts: `mlp_layer_types` (`"dense"` / `"sparse"` per layer) when the
/// config gives it, else the first `first_k_dense_replace` dense and the rest sparse
/// (`DeepseekV32Config.__post_init__`; `moe_layer_freq` is not read). `None`: the default.
pub(super) fn mlp_layer_types(cfg: &Cfg, n: u64) -> Result<Option<Vec<bool>>> {
    match cfg.obj.get("mlp_layer_types") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => {
            if items.len() as u64 != n {
                return Err(cfg.err(
                    "mlp_layer_types",
                    format!("has {} entries for {n} layers", items.len()),
                ));
            }
            Ok(Some(
                items.iter().map(|v| v.as_str() == Some("sparse")).collect(),
            ))
        }
        Some(other) => Err(cfg.err(
            "mlp_layer_types",
            format!("must be a list of \"dense\" / \"sparse\" (got {other})"),
        )),
    }
}
