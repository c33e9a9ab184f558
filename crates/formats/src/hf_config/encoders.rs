//! Encoder and encoder-decoder families: BERT, RoBERTa, T5.

use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention};
use crate::error::Result;
use vramscope_core::model::*;

/// BERT and RoBERTa (`modeling_bert.py`, `modeling_roberta.py`): post-norm encoder with biases,
/// learned positions, token types and an embedding LayerNorm; the MLM head (dense + LayerNorm +
/// tied decoder + bias) or the bare model with its pooler.
pub(crate) fn bert_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let roberta = model_type == "roberta";
    let mut spec = empty_spec(
        model_type,
        if roberta {
            "RobertaForMaskedLM"
        } else {
            "BertForMaskedLM"
        },
        if roberta {
            Naming::Roberta
        } else {
            Naming::Bert
        },
    );
    let hidden = cfg.size(&["hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 12)?;
    let heads = cfg.size(&["num_attention_heads"], Some(12))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["intermediate_size"], Some(3072))?;
    let vocab = cfg.size(&["vocab_size"], Some(if roberta { 50265 } else { 30522 }))?;
    let max_pos = cfg.size(&["max_position_embeddings"], Some(512))?;
    let token_types = cfg.uint("type_vocab_size")?.unwrap_or(2);
    let ln = Norm::layer(hidden, true);
    let activation = cfg.string("hidden_act").unwrap_or("gelu").to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer::new(
            plain_attention(heads, heads, head_dim, ProjBias::all(true)),
            Mlp::Dense(dense(ffn, false, true, &activation)),
            vec![(NormSlot::PostAttention, ln), (NormSlot::PostMlp, ln)],
        ));
    }
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(max_pos);
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Learned { rows: max_pos };
    spec.embedding.token_types = token_types;
    spec.embedding.norm = Some(ln);
    spec.head = Head::MaskedLm {
        tied: cfg.boolean("tie_word_embeddings", true)?,
    };
    let hidden_p = cfg.prob(&["hidden_dropout_prob"], 0.1)?;
    spec.dropout = Dropout {
        embedding: hidden_p,
        attention: cfg.prob(&["attention_probs_dropout_prob"], 0.1)?,
        hidden: hidden_p,
    };
    Ok(spec)
}

/// T5 (`modeling_t5.py`): encoder and decoder stacks of RMS-style T5LayerNorm blocks without
/// biases, a relative-position bias table in the first block of each stack, cross-attention in
/// the decoder, relu or gated-gelu MLP, a shared embedding, and an lm_head that is tied unless
/// `tie_word_embeddings` is false (T5 v1.1, Flan-T5).
pub(crate) fn t5(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("t5", "T5ForConditionalGeneration", Naming::T5);
    let d_model = cfg.size(&["d_model"], Some(512))?;
    let d_kv = cfg.size(&["d_kv"], Some(64))?;
    let d_ff = cfg.size(&["d_ff"], Some(2048))?;
    let enc_layers = cfg.layer_count(&["num_layers"], 6)?;
    let dec_layers = cfg.layer_count(&["num_decoder_layers"], enc_layers)?;
    let heads = cfg.size(&["num_heads"], Some(8))?;
    let buckets = cfg.size(&["relative_attention_num_buckets"], Some(32))?;
    let vocab = cfg.size(&["vocab_size"], Some(32128))?;
    let proj = cfg.string("feed_forward_proj").unwrap_or("relu");
    let gated = proj.starts_with("gated-");
    let activation = proj.trim_start_matches("gated-").to_string();
    let ln = Norm::rms(d_model);
    let attention = |first: bool| Attention {
        relative_bias_buckets: first.then_some(buckets),
        ..Attention::new(
            AttentionKind::Standard {
                heads,
                kv_heads: heads,
                head_dim: d_kv,
            },
            ProjBias::all(false),
        )
    };
    let mut encoder = Stack {
        layers: Vec::new(),
        final_norm: Some(ln),
    };
    for i in 0..enc_layers {
        encoder.layers.push(Layer::new(
            attention(i == 0),
            Mlp::Dense(dense(d_ff, gated, false, &activation)),
            vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
        ));
    }
    for i in 0..dec_layers {
        spec.decoder.layers.push(Layer {
            cross_attention: Some(attention(false)),
            ..Layer::new(
                attention(i == 0),
                Mlp::Dense(dense(d_ff, gated, false, &activation)),
                vec![
                    (NormSlot::PreAttention, ln),
                    (NormSlot::PreCrossAttention, ln),
                    (NormSlot::PreMlp, ln),
                ],
            )
        });
    }
    spec.decoder.final_norm = Some(ln);
    spec.encoder = Some(encoder);
    spec.vocab_size = vocab;
    spec.hidden_size = d_model;
    spec.max_position_embeddings = cfg.uint("n_positions")?;
    spec.embedding.dim = d_model;
    spec.embedding.positions = Positions::Relative { buckets };
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", true)?,
        bias: false,
    };
    let d = cfg.prob(&["dropout_rate"], 0.1)?;
    spec.dropout = Dropout {
        embedding: d,
        attention: d,
        hidden: d,
    };
    Ok(spec)
}
