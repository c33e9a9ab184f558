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
