//! The older decoder families: GPT-2, GPTBigCode, GPT-NeoX, OPT, Falcon.

use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention};
use crate::error::Result;
use vramscope_core::model::*;

/// GPT-2 (`modeling_gpt2.py`: Conv1D projections with biases, learned positions, pre-norm
/// LayerNorm, tied head) and GPTBigCode (same layout with Linear weights and multi-query
/// attention, `modeling_gpt_bigcode.py`).
pub(crate) fn gpt2_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let bigcode = model_type == "gpt_bigcode";
    let mut spec = empty_spec(
        model_type,
        if bigcode {
            "GPTBigCodeForCausalLM"
        } else {
            "GPT2LMHeadModel"
        },
        if bigcode {
            Naming::BigCode
        } else {
            Naming::Gpt2
        },
    );
    let hidden = cfg.size(&["n_embd", "hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["n_layer", "num_hidden_layers"], 12)?;
    let heads = cfg.size(&["n_head", "num_attention_heads"], Some(12))?;
    if hidden % heads != 0 {
        return Err(cfg.err("n_head", format!("{heads} does not divide n_embd {hidden}")));
    }
    let head_dim = hidden / heads;
    let ffn = match cfg.uint("n_inner")? {
        Some(0) => return Err(cfg.err("n_inner", "must be at least 1 (got 0)")),
        Some(n) => n,
        None => 4 * hidden,
    };
    let positions = cfg.size(&["n_positions", "max_position_embeddings"], Some(1024))?;
    let vocab = cfg.size(&["vocab_size"], Some(50257))?;
    let kv_heads = if bigcode && cfg.boolean("multi_query", true)? {
        1
    } else {
        heads
    };
    let activation = cfg
        .string("activation_function")
        .unwrap_or("gelu_new")
        .to_string();
    let ln = Norm::layer(hidden, true);
    for _ in 0..layers {
        spec.decoder.layers.push(Layer::new(
            plain_attention(heads, kv_heads, head_dim, ProjBias::all(true)),
            Mlp::Dense(dense(ffn, false, true, &activation)),
            vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
        ));
    }
    let dropout = Dropout {
        embedding: cfg.prob(&["embd_pdrop"], 0.1)?,
        attention: cfg.prob(&["attn_pdrop"], 0.1)?,
        hidden: cfg.prob(&["resid_pdrop"], 0.1)?,
    };
    let learned = Positions::Learned { rows: positions };
    let frame = ((vocab, hidden, positions), Some(ln), learned, dropout);
    lm_frame(&mut spec, cfg, frame, true)?;
    Ok(spec)
}

/// GPT-NeoX / Pythia (`modeling_gpt_neox.py`): fused query_key_value with biases, parallel
/// residual with two LayerNorms, rotary positions, untied `embed_out` by default.
pub(crate) fn gpt_neox(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("gpt_neox", "GPTNeoXForCausalLM", Naming::NeoX);
    let hidden = cfg.size(&["hidden_size"], Some(6144))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 44)?;
    let heads = cfg.size(&["num_attention_heads"], Some(64))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["intermediate_size"], Some(24576))?;
    let vocab = cfg.size(&["vocab_size"], Some(50432))?;
    let bias = cfg.boolean("attention_bias", true)?;
    let ln = Norm::layer(hidden, true);
    let parallel = cfg.boolean("use_parallel_residual", true)?;
    let activation = cfg.string("hidden_act").unwrap_or("gelu").to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            parallel_residual: parallel,
            ..Layer::new(
                plain_attention(heads, heads, head_dim, ProjBias::all(bias)),
                Mlp::Dense(dense(ffn, false, true, &activation)),
                vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
            )
        });
    }
    let context = cfg.uint("max_position_embeddings")?.unwrap_or(2048);
    let rotary = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    let frame = (
        (vocab, hidden, context),
        Some(ln),
        rotary,
        neox_dropout(cfg)?,
    );
    lm_frame(&mut spec, cfg, frame, false)?;
    Ok(spec)
}

/// OPT (`modeling_opt.py`): learned positions with an offset of 2 rows
/// (`OPTLearnedPositionalEmbedding`), optional project_in/out when `word_embed_proj_dim` differs
/// from the width (OPT-350m), biases everywhere (`enable_bias`), a final LayerNorm unless
/// `do_layer_norm_before` is false or `_remove_final_layer_norm`, tied head.
pub(crate) fn opt(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("opt", "OPTForCausalLM", Naming::Opt);
    let hidden = cfg.size(&["hidden_size"], Some(768))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 12)?;
    let heads = cfg.size(&["num_attention_heads"], Some(12))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let ffn = cfg.size(&["ffn_dim"], Some(3072))?;
    let vocab = cfg.size(&["vocab_size"], Some(50272))?;
    let max_pos = cfg.size(&["max_position_embeddings"], Some(2048))?;
    let proj_dim = cfg.size(&["word_embed_proj_dim"], Some(hidden))?;
    let bias = cfg.boolean("enable_bias", true)?;
    let affine = cfg.boolean("layer_norm_elementwise_affine", true)?;
    let pre_norm = cfg.boolean("do_layer_norm_before", true)?;
    let remove_final = cfg.boolean("_remove_final_layer_norm", false)?;
    let ln = Norm::layer(hidden, true);
    let activation = cfg
        .string("activation_function")
        .unwrap_or("relu")
        .to_string();
    for _ in 0..layers {
        spec.decoder.layers.push(Layer::new(
            plain_attention(heads, heads, head_dim, ProjBias::all(bias)),
            Mlp::Dense(dense(ffn, false, bias, &activation)),
            if affine {
                vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)]
            } else {
                Vec::new()
            },
        ));
    }
    let final_norm = (pre_norm && !remove_final && affine).then_some(ln);
    let d = cfg.prob(&["dropout"], 0.1)?;
    let dropout = Dropout {
        embedding: d,
        attention: cfg.prob(&["attention_dropout"], 0.0)?,
        hidden: d,
    };
    let learned = Positions::Learned { rows: max_pos + 2 };
    let frame = ((vocab, hidden, max_pos), final_norm, learned, dropout);
    lm_frame(&mut spec, cfg, frame, true)?;
    spec.embedding.dim = proj_dim;
    spec.embedding.projection = proj_dim != hidden;
    Ok(spec)
}

/// Falcon (`modeling_falcon.py`): fused query_key_value sized by the attention variant (new
/// decoder architecture: grouped KV; `multi_query`: one KV head; else MHA), parallel attention,
/// one or two input LayerNorms, tied head.
pub(crate) fn falcon(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("falcon", "FalconForCausalLM", Naming::Falcon);
    let hidden = cfg.size(&["hidden_size"], Some(4544))?;
    let layers = cfg.layer_count(&["num_hidden_layers", "n_layer"], 32)?;
    let heads = cfg.size(&["num_attention_heads", "n_head"], Some(71))?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let vocab = cfg.size(&["vocab_size"], Some(65024))?;
    let new_arch = cfg.boolean("new_decoder_architecture", false)?;
    let multi_query = cfg.boolean("multi_query", true)?;
    let parallel = cfg.boolean("parallel_attn", true)?;
    let bias = cfg.boolean("bias", false)?;
    let kv_heads = if new_arch {
        cfg.kv_heads(&["num_kv_heads", "n_head_kv"], heads, heads)?
    } else if multi_query {
        1
    } else {
        heads
    };
    let ffn = match cfg.uint("ffn_hidden_size")? {
        Some(0) => return Err(cfg.err("ffn_hidden_size", "must be at least 1 (got 0)")),
        Some(f) => f,
        None => 4 * hidden,
    };
    let ln = Norm::layer(hidden, true);
    let norms = if new_arch {
        match cfg.uint("num_ln_in_parallel_attn")? {
            Some(1) => vec![(NormSlot::PreAttention, ln)],
            _ => vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)],
        }
    } else if parallel {
        vec![(NormSlot::PreAttention, ln)]
    } else {
        vec![(NormSlot::PreAttention, ln), (NormSlot::PreMlp, ln)]
    };
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            parallel_residual: parallel || new_arch,
            ..Layer::new(
                plain_attention(heads, kv_heads, head_dim, ProjBias::all(bias)),
                Mlp::Dense(dense(ffn, false, bias, "gelu")),
                norms.clone(),
            )
        });
    }
    let context = cfg.uint("max_position_embeddings")?.unwrap_or(2048);
    let positions = if cfg.boolean("alibi", false)? {
        Positions::None
    } else {
        Positions::Rotary {
            theta: cfg.rope_theta(),
        }
    };
    let frame = (
        (vocab, hidden, context),
        Some(ln),
        positions,
        neox_dropout(cfg)?,
    );
    lm_frame(&mut spec, cfg, frame, true)?;
    Ok(spec)
}

/// (vocabulary, width, context), the final norm, the positions and the dropouts of a model.
type Frame = ((u64, u64, u64), Option<Norm>, Positions, Dropout);

/// The language-model frame GPT-2, GPT-NeoX, OPT and Falcon fill alike (`GPT2LMHeadModel`,
/// `GPTNeoXForCausalLM`, `OPTForCausalLM`, `FalconForCausalLM`): the final norm, the
/// vocabulary, width and context, a token table as wide as the model with its positions, the
/// dropouts, and an LM head without bias, tied as `tie_word_embeddings` says (the class
/// default `tied`).
fn lm_frame(spec: &mut ModelSpec, cfg: &Cfg, frame: Frame, tied: bool) -> Result<()> {
    let ((vocab, hidden, context), final_norm, positions, dropout) = frame;
    spec.decoder.final_norm = final_norm;
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(context);
    spec.embedding.dim = hidden;
    spec.embedding.positions = positions;
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", tied)?,
        bias: false,
    };
    spec.dropout = dropout;
    Ok(())
}

/// GPT-NeoX's and Falcon's dropouts (`GPTNeoXConfig`, `FalconConfig`): none on the embedding,
/// `attention_dropout` and `hidden_dropout` after attention and on the residual (default 0).
fn neox_dropout(cfg: &Cfg) -> Result<Dropout> {
    Ok(Dropout {
        embedding: 0.0,
        attention: cfg.prob(&["attention_dropout"], 0.0)?,
        hidden: cfg.prob(&["hidden_dropout"], 0.0)?,
    })
}
