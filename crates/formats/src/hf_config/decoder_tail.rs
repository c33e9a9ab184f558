//! The pieces every hybrid decoder reader (Bamba / Granite 4.0-H, Falcon-H1, Jamba, LFM2,
//! Nemotron-H, Qwen3-Next, Qwen3.5) builds alike: a pre-norm layer and the decoder's tail.

use super::fields::Cfg;
use crate::error::Result;
use vramscope_core::model::*;

/// A layer of `attention` (or a mixer in its place) and `mlp`, each behind an RMSNorm of the
/// residual: the `input_layernorm` / `post_attention_layernorm` (or `pre_ff_layernorm`) pair of
/// transformers' hybrid decoder layers (e.g. `modeling_bamba.py`'s `BambaDecoderLayer`,
/// `modeling_qwen3_next.py`'s `Qwen3NextDecoderLayer`).
pub(super) fn pre_norm_layer(attention: Attention, mlp: Mlp, norm: Norm) -> Layer {
    Layer::new(
        attention,
        mlp,
        vec![(NormSlot::PreAttention, norm), (NormSlot::PreMlp, norm)],
    )
}

/// Vocabulary, width, final norm, max positions, attention dropout and an untied-by-default
/// head, from the config or the class defaults given (`vocab_size`, `max_position_embeddings`;
/// `tie_word_embeddings` defaults to false in `BambaConfig`, `GraniteMoeHybridConfig`,
/// `FalconH1Config`, `JambaConfig`, `NemotronHConfig`, `Qwen3NextConfig` and `Qwen3_5TextConfig`).
pub(super) fn finish(
    cfg: &Cfg,
    spec: &mut ModelSpec,
    hidden: u64,
    (vocab, max_pos): (u64, u64),
    norm: Norm,
) -> Result<()> {
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = cfg.size(&["vocab_size"], Some(vocab))?;
    spec.hidden_size = hidden;
    spec.embedding.dim = hidden;
    spec.max_position_embeddings = Some(cfg.uint("max_position_embeddings")?.unwrap_or(max_pos));
    spec.dropout.attention = cfg.prob(&["attention_dropout"], 0.0)?;
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", false)?,
        bias: false,
    };
    Ok(())
}

/// `num_key_value_heads` as the hybrid configs read it (`BambaConfig`, `FalconH1Config`,
/// `JambaConfig`, `NemotronHConfig`): the class default 8, an explicit null meaning
/// `num_attention_heads` (their `__post_init__`).
pub(super) fn kv_heads_default_8(cfg: &Cfg, heads: u64) -> Result<u64> {
    let default = match cfg.obj.get("num_key_value_heads") {
        Some(serde_json::Value::Null) => heads,
        _ => 8,
    };
    cfg.kv_heads(&["num_key_value_heads"], heads, default)
}

/// The decoder widths the Jamba-line hybrids read alike, with the same class defaults
/// (`JambaConfig`, `BambaConfig`, `FalconH1Config`): `hidden_size` 4096, `num_hidden_layers`
/// 32, `num_attention_heads` 32, `num_key_value_heads` per [`kv_heads_default_8`], and
/// `getattr(config, "head_dim", hidden_size // num_attention_heads)`. Returns (hidden, layers,
/// heads, kv_heads, head_dim).
pub(super) fn hybrid_dims(cfg: &Cfg) -> Result<(u64, u64, u64, u64, u64)> {
    let hidden = cfg.size(&["hidden_size"], Some(4096))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 32)?;
    let heads = cfg.size(&["num_attention_heads"], Some(32))?;
    let kv_heads = kv_heads_default_8(cfg, heads)?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    Ok((hidden, layers, heads, kv_heads, head_dim))
}

/// Per layer, whether a `layer_types` list names it attention: entries in `attention` are,
/// entries in `mixer` (the family's other layer kind) are not; anything else, a list of the
/// wrong length or a value that is no list is refused, naming the field and the names it takes.
pub(super) fn listed_attention_layers(
    cfg: &Cfg,
    value: &serde_json::Value,
    layers: u64,
    attention: &[&str],
    mixer: &[&str],
) -> Result<Vec<bool>> {
    let Some(items) = value.as_array() else {
        return Err(cfg.err("layer_types", format!("must be a list (got {value})")));
    };
    cfg.per_layer("layer_types", items, layers, |v| match v.as_str() {
        Some(s) if attention.contains(&s) => Ok(true),
        Some(s) if mixer.contains(&s) => Ok(false),
        _ => Err(cfg.err(
            "layer_types",
            format!(
                "entries must be one of {} (got {v})",
                attention
                    .iter()
                    .chain(mixer)
                    .map(|n| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    })
}
