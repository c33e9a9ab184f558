//! Qwen3.5 and Qwen3.5-MoE language models (`qwen3_5_text`, `qwen3_5_moe_text`, the
//! `text_config` of the `qwen3_5` / `qwen3_5_moe` vision-language models), read as
//! transformers 5.24's `configuration_qwen3_5.py` / `configuration_qwen3_5_moe.py` define them
//! and `modeling_qwen3_5.py` / `modeling_qwen3_5_moe.py` build them.
//!
//! Both are Qwen3-Next's hybrid (`qwen3_next.rs`): gated DeltaNet layers and gated full
//! attention every `full_attention_interval`-th layer unless `layer_types` says otherwise. What
//! differs: the DeltaNet's input projections are four (`Qwen3_5GatedDeltaNet.__init__`:
//! `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, same total width as Qwen3-Next's
//! `in_proj_qkvz` + `in_proj_ba`), the dense model has a SwiGLU MLP of `intermediate_size` on
//! every layer (`Qwen3_5DecoderLayer`), the MoE model the sparse block with a gated shared
//! expert on every layer (`Qwen3_5MoeDecoderLayer`: `Qwen3NextSparseMoeBlock` always; the
//! config deletes `decoder_sparse_step` and `mlp_only_layers`), with the experts stored fused
//! (`Qwen3NextExperts`: `gate_up_proj [E, 2·ffn, h]`, `down_proj [E, h, ffn]`).

use super::decoder_tail::{finish, pre_norm_layer};
use super::fields::Cfg;
use super::qwen3_next::{full_attention_layers, mixers};
use super::{dense, empty_spec};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// The text class defaults that differ between the two families (transformers 5.24.0).
struct Defaults {
    model_type: &'static str,
    arch: &'static str,
    hidden: u64,
    layers: u64,
    kv_heads: u64,
}

/// `Qwen3_5TextConfig`: hidden 4096, 32 layers, 4 KV heads (`configuration_qwen3_5.py`).
const DENSE: Defaults = Defaults {
    model_type: "qwen3_5_text",
    arch: "Qwen3_5ForCausalLM",
    hidden: 4096,
    layers: 32,
    kv_heads: 4,
};

/// `Qwen3_5MoeTextConfig`: hidden 2048, 40 layers, 2 KV heads (Qwen3-Next's)
/// (`configuration_qwen3_5_moe.py`).
const MOE: Defaults = Defaults {
    model_type: "qwen3_5_moe_text",
    arch: "Qwen3_5MoeForCausalLM",
    hidden: 2048,
    layers: 40,
    kv_heads: 2,
};

/// A `qwen3_5_text` config → spec: every layer a dense SwiGLU MLP of `intermediate_size`
/// (default 12288).
pub(crate) fn qwen3_5(cfg: &Cfg) -> Result<ModelSpec> {
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let mlp = Mlp::Dense(dense(
        cfg.size(&["intermediate_size"], Some(12288))?,
        true,
        false,
        &act,
    ));
    build(cfg, &DENSE, mlp)
}

/// A `qwen3_5_moe_text` config → spec: every layer the sparse MoE block (`num_experts` 256,
/// `num_experts_per_tok` 8, `moe_intermediate_size` and `shared_expert_intermediate_size` 512).
pub(crate) fn qwen3_5_moe(cfg: &Cfg) -> Result<ModelSpec> {
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let experts = cfg.size(&["num_experts"], Some(256))?;
    let top_k = cfg.top_k("num_experts_per_tok", Some(8), experts)?;
    let expert = |key: &str| -> Result<DenseMlp> {
        Ok(dense(cfg.size(&[key], Some(512))?, true, false, &act))
    };
    let moe = MoeMlp {
        latent: None,
        experts,
        top_k,
        expert: expert("moe_intermediate_size")?,
        shared: Some(expert("shared_expert_intermediate_size")?),
        shared_gate: true,
        router_bias: false,
        input_jitter: 0,
    };
    build(cfg, &MOE, Mlp::Moe(moe))
}

/// The shared body: `Qwen3_5Attention` (= `Qwen3NextAttention`: `q_proj` doubled for the
/// output gate, per-head RMS q/k norms, biases only with `attention_bias`) on full-attention
/// layers, `Qwen3_5GatedDeltaNet` on the others, two RMSNorms per layer, a final norm, and an
/// untied head unless `tie_word_embeddings`. Rotary positions (multimodal, on
/// `partial_rotary_factor` of each head) hold no parameters.
fn build(cfg: &Cfg, d: &Defaults, mlp: Mlp) -> Result<ModelSpec> {
    let mut spec = empty_spec(d.model_type, d.arch, Naming::Qwen35);
    let hidden = cfg.size(&["hidden_size"], Some(d.hidden))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], d.layers)?;
    let heads = cfg.size(&["num_attention_heads"], Some(16))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, d.kv_heads)?;
    let head_dim = match cfg.obj.get("head_dim") {
        None | Some(Value::Null) => 256,
        Some(_) => cfg.size(&["head_dim"], None)?,
    };
    let full = full_attention_layers(cfg, layers)?;
    let (attention, mixer) = mixers(cfg, heads, kv_heads, head_dim)?;
    let norm = Norm::rms(hidden);
    for is_full in full {
        spec.decoder.layers.push(pre_norm_layer(
            if is_full {
                attention.clone()
            } else {
                mixer.clone()
            },
            mlp.clone(),
            norm,
        ));
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (248320, 32768), norm)?;
    Ok(spec)
}

/// Inside a `qwen3_5` / `qwen3_5_moe` config, the model is the vision-language class
/// (`Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration`, unless
/// `architectures` names another), and its head is tied by the top-level
/// `tie_word_embeddings` (`Qwen3_5Config`, default `False`), not the text config's:
/// transformers 5.24 on the meta device, a 4-layer Qwen3.5-27B with the top-level key `True`
/// and the text key `False` counts 3,254,208,400, with the two swapped 4,525,606,800 (the
/// difference one 248,320 × 5,120 head).
pub(crate) fn as_vlm(spec: &mut ModelSpec, top_type: &str, top: &Cfg) -> Result<()> {
    spec.model_type = top_type.to_string();
    spec.architecture = if top_type == "qwen3_5" {
        "Qwen3_5ForConditionalGeneration"
    } else {
        "Qwen3_5MoeForConditionalGeneration"
    }
    .to_string();
    if let Head::LanguageModel { tied, .. } = &mut spec.head {
        *tied = top.boolean("tie_word_embeddings", false)?;
    }
    Ok(())
}
