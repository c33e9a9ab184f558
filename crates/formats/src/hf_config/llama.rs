//! Llama and the decoders built like it (Mistral, Mixtral, Qwen, Gemma, Phi-3, StarCoder2,
//! DeepSeek).

use super::fields::Cfg;
use super::{dense, empty_spec};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// Class defaults of the Llama-shaped families that differ from each other
/// (`configuration_<family>.py`, transformers 5.x).
struct Defaults {
    arch: &'static str,
    vocab: u64,
    hidden: u64,
    ffn: u64,
    layers: u64,
    heads: u64,
    kv_heads: Option<u64>,
    head_dim: Option<u64>,
    max_pos: u64,
    tied: bool,
    activation: &'static str,
}

fn llama_defaults(model_type: &str) -> Defaults {
    let d = Defaults {
        arch: "LlamaForCausalLM",
        vocab: 32000,
        hidden: 4096,
        ffn: 11008,
        layers: 32,
        heads: 32,
        kv_heads: None,
        head_dim: None,
        max_pos: 2048,
        tied: false,
        activation: "silu",
    };
    match model_type {
        "mistral" => Defaults {
            arch: "MistralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            ..d
        },
        "mixtral" => Defaults {
            arch: "MixtralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            ..d
        },
        "qwen2" => Defaults {
            arch: "Qwen2ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            max_pos: 32768,
            ..d
        },
        "qwen2_moe" => Defaults {
            arch: "Qwen2MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 5632,
            layers: 24,
            heads: 16,
            kv_heads: Some(16),
            max_pos: 32768,
            ..d
        },
        "qwen3" => Defaults {
            arch: "Qwen3ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            head_dim: Some(128),
            max_pos: 32768,
            ..d
        },
        "qwen3_moe" => Defaults {
            arch: "Qwen3MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 6144,
            layers: 24,
            heads: 32,
            kv_heads: Some(4),
            head_dim: Some(128),
            max_pos: 32768,
            ..d
        },
        "gemma" => Defaults {
            arch: "GemmaForCausalLM",
            vocab: 256000,
            hidden: 3072,
            ffn: 24576,
            layers: 28,
            heads: 16,
            kv_heads: Some(16),
            head_dim: Some(256),
            max_pos: 8192,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "gemma2" => Defaults {
            arch: "Gemma2ForCausalLM",
            vocab: 256000,
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            head_dim: Some(256),
            max_pos: 8192,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "gemma3_text" => Defaults {
            arch: "Gemma3ForCausalLM",
            vocab: 262208,
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            head_dim: Some(256),
            max_pos: 131072,
            tied: true,
            activation: "gelu_pytorch_tanh",
        },
        "phi3" => Defaults {
            arch: "Phi3ForCausalLM",
            vocab: 32064,
            hidden: 3072,
            ffn: 8192,
            max_pos: 4096,
            ..d
        },
        "starcoder2" => Defaults {
            arch: "Starcoder2ForCausalLM",
            vocab: 49152,
            hidden: 3072,
            ffn: 12288,
            layers: 30,
            heads: 24,
            kv_heads: Some(2),
            max_pos: 4096,
            tied: true,
            activation: "gelu_pytorch_tanh",
            ..d
        },
        "deepseek_v2" => Defaults {
            arch: "DeepseekV2ForCausalLM",
            vocab: 102400,
            hidden: 4096,
            ffn: 11008,
            layers: 30,
            heads: 32,
            kv_heads: Some(32),
            max_pos: 2048,
            ..d
        },
        "deepseek_v3" => Defaults {
            arch: "DeepseekV3ForCausalLM",
            vocab: 129280,
            hidden: 7168,
            ffn: 18432,
            layers: 61,
            heads: 128,
            kv_heads: Some(128),
            max_pos: 4096,
            ..d
        },
        _ => d,
    }
}

/// Llama and the decoders built like it: pre-norm RMSNorm blocks, rotary positions, gated MLP
/// (or MoE). Per-family differences: Qwen2's q/k/v biases (`modeling_qwen2.py`), Qwen3's and
/// Gemma-3's q/k norms, Gemma's explicit head_dim and tied head, Gemma-2/3's four norms per block,
/// Phi-3's fused projections, StarCoder2's LayerNorm and plain MLP with biases, Mixtral / Qwen-MoE
/// / DeepSeek experts, DeepSeek's latent attention.
pub(crate) fn llama_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let d = llama_defaults(model_type);
    let naming = match model_type {
        "mixtral" => Naming::Mixtral,
        "qwen2_moe" | "qwen3_moe" => Naming::QwenMoe,
        "deepseek_v2" | "deepseek_v3" => Naming::DeepSeek,
        "phi3" => Naming::Phi3,
        _ => Naming::Llama,
    };
    let arch = if model_type == "generic" {
        "CausalLM"
    } else {
        d.arch
    };
    let mut spec = empty_spec(
        if model_type == "generic" {
            cfg.string("model_type").unwrap_or("unknown")
        } else {
            model_type
        },
        arch,
        naming,
    );
    let hidden = cfg.size(&["hidden_size"], Some(d.hidden))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], d.layers)?;
    let heads = cfg.size(&["num_attention_heads"], Some(d.heads))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, d.kv_heads.unwrap_or(heads))?;
    let head_dim = match (cfg.uint("head_dim")?, d.head_dim) {
        (Some(_), _) | (None, None) => cfg.head_dim(hidden, heads)?,
        (None, Some(def)) => def,
    };
    let vocab = cfg.size(&["vocab_size"], Some(d.vocab))?;
    let ffn = cfg.size(&["intermediate_size"], Some(d.ffn))?;
    let max_pos = cfg.uint("max_position_embeddings")?.unwrap_or(d.max_pos);
    let tied = cfg.boolean("tie_word_embeddings", d.tied)?;
    let activation = cfg
        .string("hidden_act")
        .or(cfg.string("hidden_activation"))
        .unwrap_or(d.activation)
        .to_string();

    // Biases.
    let attention_bias = cfg.boolean("attention_bias", false)?;
    let bias = match model_type {
        // Qwen2 hard-codes bias=True on q/k/v (modeling_qwen2.py `Qwen2Attention`).
        "qwen2" | "qwen2_moe" => {
            let qkv = cfg.boolean("qkv_bias", true)?;
            ProjBias {
                q: qkv,
                k: qkv,
                v: qkv,
                o: false,
            }
        }
        "starcoder2" => ProjBias::all(cfg.boolean("use_bias", true)?),
        _ => ProjBias::all(attention_bias),
    };
    let mlp_bias = match model_type {
        "starcoder2" => cfg.boolean("use_bias", true)?,
        _ => cfg.boolean("mlp_bias", false)?,
    };

    let norm = match model_type {
        "starcoder2" => Norm::layer(hidden, true),
        _ => Norm::rms(hidden),
    };
    let qk_norm = match model_type {
        "qwen3" | "qwen3_moe" | "gemma3_text" => Some(Norm::rms(head_dim)),
        _ => None,
    };
    let four_norms = matches!(model_type, "gemma2" | "gemma3_text");
    let gated = model_type != "starcoder2";

    // Sliding windows: all layers (Mistral, Mixtral, Phi-3, StarCoder2), alternating
    // (Gemma-2: even layers local), a pattern (Gemma-3: every `sliding_window_pattern`-th layer
    // global), Qwen2's `use_sliding_window` above `max_window_layers`, or explicit `layer_types`.
    let window = cfg.uint("sliding_window")?;
    let layer_types = cfg.layer_types(layers)?;
    let is_sliding = |i: u64| -> bool {
        if window.is_none() {
            return false;
        }
        if let Some(types) = &layer_types {
            return types[i as usize];
        }
        match model_type {
            "gemma2" => i.is_multiple_of(2),
            "gemma3_text" => {
                let pattern = cfg
                    .uint("sliding_window_pattern")
                    .ok()
                    .flatten()
                    .unwrap_or(6)
                    .max(1);
                !(i + 1).is_multiple_of(pattern)
            }
            "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => {
                cfg.boolean("use_sliding_window", false).unwrap_or(false)
                    && i >= cfg
                        .uint("max_window_layers")
                        .ok()
                        .flatten()
                        .unwrap_or(layers)
            }
            "mistral" | "mixtral" | "phi3" | "starcoder2" => true,
            _ => false,
        }
    };

    // Attention kind.
    let latent = matches!(model_type, "deepseek_v2" | "deepseek_v3");
    let kind = if latent {
        let kv_lora_rank = cfg.size(&["kv_lora_rank"], Some(512))?;
        // `q_lora_rank: null` (DeepSeek-V2-Lite) projects queries directly.
        let q_lora_rank = match cfg.obj.get("q_lora_rank") {
            Some(Value::Null) => None,
            None => Some(1536),
            Some(_) => Some(cfg.size(&["q_lora_rank"], None)?),
        };
        AttentionKind::Latent {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim: cfg.size(&["qk_nope_head_dim"], Some(128))?,
            qk_rope_head_dim: cfg.size(&["qk_rope_head_dim"], Some(64))?,
            v_head_dim: cfg.size(&["v_head_dim"], Some(128))?,
        }
    } else {
        AttentionKind::Standard {
            heads,
            kv_heads,
            head_dim,
        }
    };

    // MoE layout.
    let moe = moe_layout(cfg, model_type, &activation)?;

    for i in 0..layers {
        let mut norms = vec![(NormSlot::PreAttention, norm)];
        if four_norms {
            norms.push((NormSlot::PostAttention, norm));
        }
        norms.push((NormSlot::PreMlp, norm));
        if four_norms {
            norms.push((NormSlot::PostMlp, norm));
        }
        let mlp = match moe.as_ref().and_then(|m| m.for_layer(i)) {
            Some(m) => Mlp::Moe(m),
            None => Mlp::Dense(dense(ffn, gated, mlp_bias, &activation)),
        };
        spec.decoder.layers.push(Layer {
            attention: Attention {
                kind,
                bias,
                qk_norm,
                sliding_window: if is_sliding(i) { window } else { None },
                relative_bias_buckets: None,
            },
            cross_attention: None,
            mlp,
            norms,
            parallel_residual: false,
        });
    }
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(max_pos);
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    spec.head = Head::LanguageModel { tied, bias: false };
    // StarCoder2 drops out the embeddings (`embedding_dropout`) and each block's attention and
    // MLP outputs (`residual_dropout`, modeling_starcoder2.py); the rest of this family has
    // attention dropout only.
    // Phi-3 likewise drops out each block's outputs (`resid_pdrop`, modeling_phi3.py
    // `resid_attn_dropout` / `resid_mlp_dropout`).
    let (embedding_key, residual_key) = match model_type {
        "starcoder2" => (Some("embedding_dropout"), Some("residual_dropout")),
        "phi3" => (None, Some("resid_pdrop")),
        _ => (None, None),
    };
    let prob = |key: Option<&str>| match key {
        Some(k) => cfg.prob(&[k], 0.0),
        None => Ok(0.0),
    };
    spec.dropout = Dropout {
        embedding: prob(embedding_key)?,
        attention: cfg.prob(&["attention_dropout"], 0.0)?,
        hidden: prob(residual_key)?,
    };
    // Gemma2Config defaults both caps on (50.0 and 30.0); null turns one off. Other families
    // (Gemma-3 included) have none unless the config sets one.
    let gemma2 = model_type == "gemma2";
    let cap = |key: &str, default: f64| match cfg.obj.get(key) {
        None => gemma2.then_some(default),
        Some(v) => v.as_f64().filter(|c| *c > 0.0),
    };
    spec.softcapping = Softcapping {
        attention: cap("attn_logit_softcapping", 50.0),
        final_logits: cap("final_logit_softcapping", 30.0),
    };
    Ok(spec)
}

/// Which layers are MoE and what their experts look like.
struct MoeLayout {
    template: MoeMlp,
    /// Layer indices that stay dense.
    dense_layers: Vec<u64>,
    first_dense: u64,
    step: u64,
    /// DeepSeek counts MoE layers as `i % moe_layer_freq == 0` (`modeling_deepseek_v3.py`);
    /// Qwen-MoE as `(i + 1) % decoder_sparse_step == 0` (`modeling_qwen2_moe.py`).
    zero_based_step: bool,
}

impl MoeLayout {
    fn for_layer(&self, i: u64) -> Option<MoeMlp> {
        if i < self.first_dense || self.dense_layers.contains(&i) {
            return None;
        }
        let moe_here = if self.zero_based_step {
            i.is_multiple_of(self.step)
        } else {
            (i + 1).is_multiple_of(self.step)
        };
        moe_here.then(|| self.template.clone())
    }
}

fn moe_layout(cfg: &Cfg, model_type: &str, activation: &str) -> Result<Option<MoeLayout>> {
    let layout = match model_type {
        "mixtral" => MoeLayout {
            template: MoeMlp {
                experts: cfg.size(&["num_local_experts", "num_experts"], Some(8))?,
                top_k: cfg.size(&["num_experts_per_tok"], Some(2))?,
                expert: dense(
                    cfg.size(&["intermediate_size"], Some(14336))?,
                    true,
                    false,
                    activation,
                ),
                shared: None,
                shared_gate: false,
            },
            dense_layers: Vec::new(),
            first_dense: 0,
            step: 1,
            zero_based_step: false,
        },
        "qwen2_moe" | "qwen3_moe" => {
            let experts = cfg.size(
                &["num_experts"],
                Some(if model_type == "qwen2_moe" { 60 } else { 128 }),
            )?;
            let shared_ffn = if model_type == "qwen2_moe" {
                cfg.uint("shared_expert_intermediate_size")?.unwrap_or(5632)
            } else {
                0
            };
            MoeLayout {
                template: MoeMlp {
                    experts,
                    top_k: cfg.size(
                        &["num_experts_per_tok"],
                        Some(if model_type == "qwen2_moe" { 4 } else { 8 }),
                    )?,
                    expert: dense(
                        cfg.size(
                            &["moe_intermediate_size"],
                            Some(if model_type == "qwen2_moe" { 1408 } else { 768 }),
                        )?,
                        true,
                        false,
                        activation,
                    ),
                    shared: (shared_ffn > 0).then(|| dense(shared_ffn, true, false, activation)),
                    shared_gate: shared_ffn > 0,
                },
                dense_layers: cfg.uint_list("mlp_only_layers")?,
                first_dense: 0,
                step: cfg.size(&["decoder_sparse_step"], Some(1))?,
                zero_based_step: false,
            }
        }
        "deepseek_v2" | "deepseek_v3" => {
            let Some(experts) = cfg.uint_any(&["n_routed_experts", "num_local_experts"])? else {
                return Ok(None);
            };
            if experts == 0 {
                return Ok(None);
            }
            let expert_ffn = cfg.size(
                &["moe_intermediate_size"],
                Some(if model_type == "deepseek_v3" {
                    2048
                } else {
                    1407
                }),
            )?;
            let shared = cfg
                .uint("n_shared_experts")?
                .unwrap_or(if model_type == "deepseek_v3" { 1 } else { 0 });
            MoeLayout {
                template: MoeMlp {
                    experts,
                    top_k: cfg.size(&["num_experts_per_tok"], Some(8))?,
                    expert: dense(expert_ffn, true, false, activation),
                    // DeepseekV3MoE: one MLP of width moe_intermediate_size × n_shared_experts.
                    shared: (shared > 0)
                        .then(|| dense(expert_ffn.saturating_mul(shared), true, false, activation)),
                    shared_gate: false,
                },
                dense_layers: Vec::new(),
                first_dense: cfg.uint("first_k_dense_replace")?.unwrap_or(0),
                step: cfg.size(&["moe_layer_freq"], Some(1))?,
                zero_based_step: true,
            }
        }
        _ => return Ok(None),
    };
    if layout.template.top_k > layout.template.experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!(
                "{} is more than the {} experts",
                layout.template.top_k, layout.template.experts
            ),
        ));
    }
    Ok(Some(layout))
}
