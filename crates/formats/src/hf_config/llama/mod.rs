//! Llama and the decoders built like it (Mistral, Mixtral, Qwen, Gemma, Phi-3, StarCoder2,
//! DeepSeek): one reader, and a table of how each family departs from Llama (`families`).

use super::fields::Cfg;
use super::{dense, empty_spec};
use crate::error::Result;
use family::{Biases, Defaults, Family, NormPlace, Sliding};
use serde_json::Value;
use vramscope_core::model::*;

mod dsa;
mod families;
mod family;
mod moe;
mod new_families;
mod season;

/// Llama and the decoders built like it: pre-norm RMSNorm blocks, rotary positions, gated MLP
/// (or MoE). Per-family differences come from the family's row in [`families::FAMILIES`]:
/// Qwen2's q/k/v biases (`modeling_qwen2.py`), Qwen3's and Gemma-3's q/k norms, Gemma's explicit
/// head_dim and tied head, Gemma-2/3's four norms per block, Phi-3's fused projections,
/// StarCoder2's LayerNorm and plain MLP with biases, Mixtral / Qwen-MoE / DeepSeek experts,
/// DeepSeek's latent attention. `model_type` "generic" reads an unknown family as Llama.
pub(crate) fn llama_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let fam = families::family(model_type);
    let generic = model_type == "generic";
    let mut spec = empty_spec(
        if generic {
            cfg.string("model_type").unwrap_or("unknown")
        } else {
            model_type
        },
        if generic {
            "CausalLM"
        } else {
            fam.defaults.arch
        },
        fam.naming,
    );
    let shape = Shape::read(cfg, &fam.defaults)?;
    let parts = BlockParts::read(cfg, fam, &shape)?;
    // An absent `sliding_window` takes the class default (OLMo-3, EXAONE-4: 4096); null is off.
    let window = match cfg.obj.get("sliding_window") {
        None => fam.defaults.window,
        Some(_) => cfg.uint("sliding_window")?,
    };
    let layer_types = cfg.layer_types(shape.layers)?;
    let is_sliding = |i: u64| match (window, &layer_types) {
        (None, _) => false,
        (Some(_), Some(types)) => types[i as usize],
        (Some(_), None) => slides_by_family(cfg, fam.sliding, i),
    };
    let kind = attention_kind(cfg, fam, &shape)?;
    let moe = moe::moe_layout(cfg, fam.experts, &shape.activation, fam.defaults.ffn)?;
    let sparse = dsa_sparse_layers(cfg, model_type, shape.layers)?;
    for i in 0..shape.layers {
        let expert_layer = match (&sparse, moe.as_ref()) {
            (Some(s), Some(m)) => s[i as usize].then(|| m.template.clone()),
            _ => moe.as_ref().and_then(|m| m.for_layer(i)),
        };
        let mlp = match expert_layer {
            Some(m) => Mlp::Moe(m),
            None => Mlp::Dense(dense(
                shape.ffn,
                !fam.plain_mlp,
                parts.mlp_bias,
                &shape.activation,
            )),
        };
        spec.decoder.layers.push(Layer::new(
            Attention {
                qk_norm: parts.qk_norm,
                sliding_window: if is_sliding(i) { window } else { None },
                sinks: fam.sinks,
                qk_norm_whole: fam.qk_norm_whole,
                ..Attention::new(kind, parts.bias)
            },
            mlp,
            parts.norms.clone(),
        ));
    }
    finish(&mut spec, cfg, fam, &shape, parts.norm)?;
    if matches!(fam.experts, family::Experts::Llama4) {
        new_families::llama4_layers(cfg, &mut spec)?;
    }
    season::apply_positions(cfg, fam, &mut spec)?;
    if dsa::is_dsa(model_type) {
        dsa::apply_indexer(cfg, model_type, &mut spec)?;
    }
    Ok(spec)
}

/// A DSA family's expert layers (`DeepseekV32Config.__post_init__`): `mlp_layer_types` as given,
/// else every layer from `first_k_dense_replace` (default 3) on; `moe_layer_freq` is not read.
/// `None` for the other families, whose layout is [`moe::MoeLayout::for_layer`]'s.
fn dsa_sparse_layers(cfg: &Cfg, model_type: &str, layers: u64) -> Result<Option<Vec<bool>>> {
    if !dsa::is_dsa(model_type) {
        return Ok(None);
    }
    if let Some(given) = dsa::mlp_layer_types(cfg, layers)? {
        return Ok(Some(given));
    }
    let first_dense = cfg.uint("first_k_dense_replace")?.unwrap_or(3);
    Ok(Some((0..layers).map(|i| i >= first_dense).collect()))
}

/// Whether `model_type` is one of the Llama-shaped families of the table.
pub(crate) fn is_llama_family(model_type: &str) -> bool {
    families::FAMILIES
        .iter()
        .any(|f| f.model_type == model_type)
}

/// The model's shape, each field the config's value or the family's class default.
struct Shape {
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    vocab: u64,
    ffn: u64,
    max_pos: u64,
    tied: bool,
    activation: String,
}

impl Shape {
    fn read(cfg: &Cfg, d: &Defaults) -> Result<Shape> {
        let hidden = cfg.size(&["hidden_size"], Some(d.hidden))?;
        let layers = cfg.layer_count(&["num_hidden_layers"], d.layers)?;
        let heads = cfg.size(&["num_attention_heads"], Some(d.heads))?;
        let kv_heads =
            cfg.kv_heads(&["num_key_value_heads"], heads, d.kv_heads.unwrap_or(heads))?;
        // A family with a default head_dim (Gemma, Qwen3) takes it when the key is absent; the
        // rest derive it from hidden / heads.
        let head_dim = match (cfg.uint("head_dim")?, d.head_dim) {
            (Some(_), _) | (None, None) => cfg.head_dim(hidden, heads)?,
            (None, Some(def)) => def,
        };
        Ok(Shape {
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            vocab: cfg.size(&["vocab_size"], Some(d.vocab))?,
            ffn: cfg.size(&[d.ffn_key], Some(d.ffn))?,
            max_pos: cfg.uint("max_position_embeddings")?.unwrap_or(d.max_pos),
            tied: cfg.boolean("tie_word_embeddings", d.tied)?,
            activation: cfg
                .string("hidden_act")
                .or(cfg.string("hidden_activation"))
                .unwrap_or(d.activation)
                .to_string(),
        })
    }
}

/// What every block of the model shares: projection biases, norms.
struct BlockParts {
    bias: ProjBias,
    mlp_bias: bool,
    norm: Norm,
    qk_norm: Option<Norm>,
    norms: Vec<(NormSlot, Norm)>,
}

impl BlockParts {
    fn read(cfg: &Cfg, fam: &Family, shape: &Shape) -> Result<BlockParts> {
        let attention_bias = cfg.boolean("attention_bias", false)?;
        let bias = match fam.biases {
            Biases::QwenQkv => {
                let qkv = cfg.boolean("qkv_bias", true)?;
                ProjBias {
                    q: qkv,
                    k: qkv,
                    v: qkv,
                    o: false,
                }
            }
            Biases::UseBias => ProjBias::all(cfg.boolean("use_bias", true)?),
            Biases::Keys => ProjBias::all(attention_bias),
            Biases::KeysOn => ProjBias::all(cfg.boolean("attention_bias", true)?),
            Biases::QkvKeys => ProjBias {
                o: false,
                ..ProjBias::all(attention_bias)
            },
            Biases::AttentionKey => ProjBias::all(attention_bias),
            Biases::Never => ProjBias::all(false),
        };
        let mlp_bias = match fam.biases {
            Biases::UseBias => cfg.boolean("use_bias", true)?,
            Biases::AttentionKey | Biases::Never => false,
            _ => cfg.boolean("mlp_bias", false)?,
        };
        let norm = if fam.layer_norm {
            Norm::layer(shape.hidden, true)
        } else {
            Norm::rms(shape.hidden)
        };
        let norms = match fam.norms {
            NormPlace::Sandwich => vec![
                (NormSlot::PreAttention, norm),
                (NormSlot::PostAttention, norm),
                (NormSlot::PreMlp, norm),
                (NormSlot::PostMlp, norm),
            ],
            NormPlace::Pre => vec![(NormSlot::PreAttention, norm), (NormSlot::PreMlp, norm)],
            NormPlace::Post => vec![(NormSlot::PostAttention, norm), (NormSlot::PostMlp, norm)],
        };
        Ok(BlockParts {
            bias,
            mlp_bias,
            norm,
            qk_norm: qk_norm_on(cfg, fam)?.then(|| Norm::rms(shape.head_dim)),
            norms,
        })
    }
}

/// Whether the family's q/k norms are on: always (Qwen3, Gemma-3, OLMoE), or by its key
/// (GLM-4.5 `use_qk_norm`, off by default).
fn qk_norm_on(cfg: &Cfg, fam: &Family) -> Result<bool> {
    Ok(match fam.qk_norm_key {
        Some(key) => cfg.boolean(key, false)?,
        None => fam.qk_norm,
    })
}

/// Whether layer `i` slides its window by the family's rule (the config sets `sliding_window`
/// and no `layer_types`): all layers (Mistral, Mixtral, Phi-3, StarCoder2), alternating
/// (Gemma-2: even layers local), a pattern (Gemma-3: every `sliding_window_pattern`-th layer
/// global), Qwen2/3's `use_sliding_window` from `max_window_layers` on.
fn slides_by_family(cfg: &Cfg, rule: Sliding, i: u64) -> bool {
    let flag = || cfg.boolean("use_sliding_window", false).unwrap_or(false);
    // Qwen2/Qwen3/Qwen2-MoE configs: `max_window_layers: int = 28`.
    let max_window = || cfg.uint("max_window_layers").ok().flatten().unwrap_or(28);
    match rule {
        Sliding::Never => false,
        Sliding::All => true,
        Sliding::EvenLayers => i.is_multiple_of(2),
        Sliding::Pattern { key, period } => {
            let given = key.and_then(|k| cfg.obj.get(k));
            // EXAONE-4's published configs may spell the pattern as letters ("LLLG": local,
            // local, local, global), repeated over the layers.
            if let Some(letters) = given.and_then(Value::as_str).filter(|s| !s.is_empty()) {
                let b = letters.as_bytes();
                return b[(i as usize) % b.len()] != b'G';
            }
            let pattern = given
                .and_then(Value::as_u64)
                .filter(|p| *p > 0)
                .unwrap_or(period);
            !(i + 1).is_multiple_of(pattern)
        }
        Sliding::FromMaxWindowLayers => flag() && i >= max_window(),
        Sliding::AllWithFlag => flag(),
        Sliding::EvenBelowMaxWithFlag => flag() && i.is_multiple_of(2) && i < max_window(),
    }
}

/// Standard (grouped-query) attention, or DeepSeek's multi-head latent attention with
/// DeepseekV3Config's defaults (`kv_lora_rank` 512, `q_lora_rank` 1536, rope / nope / v head
/// dims 64 / 128 / 128).
fn attention_kind(cfg: &Cfg, fam: &Family, shape: &Shape) -> Result<AttentionKind> {
    if !fam.latent {
        return Ok(AttentionKind::Standard {
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
        });
    }
    let kv_lora_rank = cfg.size(&["kv_lora_rank"], Some(512))?;
    // `q_lora_rank: null` (DeepSeek-V2-Lite) projects queries directly.
    let q_lora_rank = match cfg.obj.get("q_lora_rank") {
        Some(Value::Null) => None,
        None => Some(1536),
        Some(_) => Some(cfg.size(&["q_lora_rank"], None)?),
    };
    Ok(AttentionKind::Latent {
        heads: shape.heads,
        q_lora_rank,
        kv_lora_rank,
        qk_nope_head_dim: cfg.size(&["qk_nope_head_dim"], Some(128))?,
        qk_rope_head_dim: cfg.size(&["qk_rope_head_dim"], Some(64))?,
        v_head_dim: cfg.size(&["v_head_dim"], Some(128))?,
        indexer: None,
    })
}

/// Everything outside the blocks: final norm, embedding with rotary positions, head, dropout,
/// soft-capping.
fn finish(spec: &mut ModelSpec, cfg: &Cfg, fam: &Family, shape: &Shape, norm: Norm) -> Result<()> {
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = shape.vocab;
    spec.hidden_size = shape.hidden;
    spec.max_position_embeddings = Some(shape.max_pos);
    spec.embedding.dim = shape.hidden;
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    spec.head = Head::LanguageModel {
        tied: shape.tied,
        // PhimoeForCausalLM: `nn.Linear(hidden, vocab, bias=config.lm_head_bias)`.
        bias: fam.lm_head_bias && cfg.boolean("lm_head_bias", false)?,
    };
    // Embedding and residual dropout where the family has them (StarCoder2, Phi-3); the rest
    // of this family has attention dropout only.
    let prob = |key: Option<&str>| match key {
        Some(k) => cfg.prob(&[k], 0.0),
        None => Ok(0.0),
    };
    spec.dropout = Dropout {
        embedding: prob(fam.embedding_dropout)?,
        attention: cfg.prob(&["attention_dropout"], 0.0)?,
        hidden: prob(fam.residual_dropout)?,
    };
    // Gemma2Config defaults both caps on (50.0 and 30.0); null turns one off. Other families
    // (Gemma-3 included) have none unless the config sets one.
    let cap = |key: &str, default: f64| match cfg.obj.get(key) {
        None => fam.softcaps.then_some(default),
        Some(v) => v.as_f64().filter(|c| *c > 0.0),
    };
    spec.softcapping = Softcapping {
        attention: cap("attn_logit_softcapping", 50.0),
        final_logits: cap("final_logit_softcapping", 30.0),
    };
    Ok(())
}
