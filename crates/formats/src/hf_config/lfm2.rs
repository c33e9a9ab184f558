//! LFM2 and LFM2-MoE (`lfm2`, `lfm2_moe`), read as transformers 5.x's
//! `configuration_lfm2.py` / `configuration_lfm2_moe.py` define them and `modeling_lfm2.py` /
//! `modeling_lfm2_moe.py` build them: each layer is either a gated short convolution
//! (`Lfm2ShortConv`, `layer_types[i] == "conv"`) or grouped-query attention with per-head
//! RMS q/k norms (`Lfm2Attention`), pre-normed by `operator_norm`, followed by `ffn_norm` and
//! a SwiGLU MLP (`w1`, `w3`, `w2`) or, in LFM2-MoE past `num_dense_layers`, a sparse MoE block.
//! The final norm is `embedding_norm`; the head is tied by default.

use super::decoder_tail::pre_norm_layer;
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention, MAX_DIM};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// Which layers are attention: `layer_types[i] != "conv"` (`Lfm2DecoderLayer.__init__`);
/// without `layer_types`, LFM2 takes `full_attn_idxs` (default: every layer,
/// `Lfm2Config.__post_init__`); LFM2-MoE's `__post_init__` derives nothing, and its model
/// fails on a config without `layer_types`, so it is refused.
fn attention_layers(cfg: &Cfg, layers: u64, moe: bool) -> Result<Vec<bool>> {
    match cfg.obj.get("layer_types") {
        None | Some(Value::Null) if moe => Err(cfg.err(
            "layer_types",
            "is required for lfm2_moe (Lfm2MoeConfig derives no default; transformers fails \
             without it)",
        )),
        None | Some(Value::Null) => {
            let idxs = match cfg.obj.get("full_attn_idxs") {
                None | Some(Value::Null) => (0..layers).collect(),
                Some(_) => cfg.uint_list("full_attn_idxs")?,
            };
            Ok((0..layers).map(|i| idxs.contains(&i)).collect())
        }
        Some(v) => super::decoder_tail::listed_attention_layers(
            cfg,
            v,
            layers,
            &["full_attention"],
            &["conv"],
        ),
    }
}

/// The dense MLP width LFM2 builds (`Lfm2MLP.__init__`): `intermediate_size` (or the older
/// `block_ff_dim`, which `Lfm2Config.__post_init__` pops over it); with
/// `block_auto_adjust_ff_dim` (default true) `int(2 · size / 3)`, then, unless
/// `block_ffn_dim_multiplier` is null, `int(multiplier · size)` rounded up to a multiple of
/// `block_multiple_of` (default 256).
fn lfm2_ffn(cfg: &Cfg) -> Result<u64> {
    let size = cfg.size(&["block_ff_dim", "intermediate_size"], Some(12288))?;
    if !cfg.boolean("block_auto_adjust_ff_dim", true)? {
        return Ok(size);
    }
    let size = 2 * size / 3;
    let mult = match cfg.obj.get("block_ffn_dim_multiplier") {
        Some(Value::Null) => return Ok(size),
        None => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|m| m.is_finite() && *m > 0.0)
            .ok_or_else(|| {
                cfg.err(
                    "block_ffn_dim_multiplier",
                    format!("must be a positive number (got {v})"),
                )
            })?,
    };
    let scaled = (mult * size as f64).floor();
    if scaled > MAX_DIM as f64 {
        return Err(cfg.err("block_ffn_dim_multiplier", "MLP width is too large"));
    }
    let multiple = cfg.size(&["block_multiple_of"], Some(256))?;
    Ok((scaled as u64).div_ceil(multiple) * multiple)
}

/// LFM2-MoE's sparse block (`Lfm2MoeSparseMoeBlock`): `num_experts` experts of
/// `moe_intermediate_size`, `num_experts_per_tok` routed per token, no shared expert.
fn moe_block(cfg: &Cfg) -> Result<MoeMlp> {
    let experts = cfg.size(&["num_experts"], Some(32))?;
    let top_k = cfg.top_k("num_experts_per_tok", Some(4), experts)?;
    Ok(MoeMlp {
        latent: None,
        experts,
        top_k,
        expert: dense(
            cfg.size(&["moe_intermediate_size"], Some(1792))?,
            true,
            false,
            "silu",
        ),
        shared: None,
        shared_gate: false,
        router_bias: false,
        input_jitter: 0,
    })
}

/// An LFM2 (`moe == false`, `Lfm2Config` defaults) or LFM2-MoE (`Lfm2MoeConfig` defaults)
/// config → spec. Attention has no biases and no `attention_bias` field; the convolution's
/// projections and kernel carry biases when `conv_bias`. `tie_embedding` is the older
/// spelling of `tie_word_embeddings` (both `__post_init__`s pop it over the field).
pub(crate) fn lfm2(cfg: &Cfg, moe: bool) -> Result<ModelSpec> {
    let (t, arch) = if moe {
        ("lfm2_moe", "Lfm2MoeForCausalLM")
    } else {
        ("lfm2", "Lfm2ForCausalLM")
    };
    let mut spec = empty_spec(t, arch, Naming::Lfm2);
    let hidden = cfg.size(&["hidden_size"], Some(if moe { 2048 } else { 2560 }))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 32)?;
    let heads = cfg.size(&["num_attention_heads"], Some(32))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, 8)?;
    // `getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)`.
    let head_dim = cfg.head_dim(hidden, heads)?;
    let is_attention = attention_layers(cfg, layers, moe)?;
    let mut attention = plain_attention(heads, kv_heads, head_dim, ProjBias::all(false));
    attention.qk_norm = Some(Norm::rms(head_dim));
    let conv_bias = cfg.boolean("conv_bias", false)?;
    let conv = Attention {
        kind: AttentionKind::StateSpace(Ssm {
            state_fp32: false,
            version: SsmVersion::ShortConv,
            d_inner: hidden,
            d_state: 0,
            d_conv: cfg.size(&["conv_L_cache"], Some(3))?,
            dt_rank: 0,
            heads: 0,
            groups: 0,
            conv_bias,
            proj_bias: conv_bias,
            chunk: 0,
        }),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    };
    // LFM2-MoE's dense layers take `intermediate_size` as is (`Lfm2MoeMLP`).
    let dense_mlp = if moe {
        dense(
            cfg.size(&["intermediate_size"], Some(7168))?,
            true,
            false,
            "silu",
        )
    } else {
        dense(lfm2_ffn(cfg)?, true, false, "silu")
    };
    let (sparse, first_sparse) = if moe {
        (
            Some(moe_block(cfg)?),
            cfg.uint("num_dense_layers")?.unwrap_or(2),
        )
    } else {
        (None, u64::MAX)
    };
    let norm = Norm::rms(hidden);
    for (i, attn) in is_attention.iter().enumerate() {
        let mlp = match &sparse {
            Some(m) if i as u64 >= first_sparse => Mlp::Moe(m.clone()),
            _ => Mlp::Dense(dense_mlp.clone()),
        };
        spec.decoder.layers.push(pre_norm_layer(
            if *attn {
                attention.clone()
            } else {
                conv.clone()
            },
            mlp,
            norm,
        ));
    }
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = cfg.size(&["vocab_size"], Some(65536))?;
    spec.hidden_size = hidden;
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta().or(Some(1_000_000.0)),
    };
    spec.max_position_embeddings = Some(cfg.uint("max_position_embeddings")?.unwrap_or(128_000));
    let tied = match cfg.obj.get("tie_embedding") {
        Some(Value::Bool(b)) => *b,
        _ => cfg.boolean("tie_word_embeddings", true)?,
    };
    spec.head = Head::LanguageModel { tied, bias: false };
    Ok(spec)
}
