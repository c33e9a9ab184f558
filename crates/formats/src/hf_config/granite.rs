//! IBM's Granite-MoE (`granitemoe`), Granite 4.0-H (`granitemoehybrid`) and Bamba (`bamba`),
//! read as transformers 5.24 defines them (`configuration_granitemoe.py`,
//! `configuration_granitemoehybrid.py`, `configuration_bamba.py` and their modelling files).
//!
//! Granite-MoE is Mixtral with muP-style multipliers (`embedding_multiplier`,
//! `attention_multiplier` as the softmax scale, `residual_multiplier`, `logits_scaling`): they
//! scale activations and hold no parameter. Granite 4.0-H and Bamba interleave Mamba2 mixers
//! with grouped-query attention, one or the other per layer (`layer_types` /
//! `attn_layer_indices`); Granite 4.0-H follows every mixer with routed experts plus an
//! always-on `shared_mlp` (or the shared MLP alone when `num_local_experts` is 0), Bamba with a
//! SwiGLU MLP.

use super::decoder_tail::{finish, pre_norm_layer};
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// A Granite-MoE config → spec (`GraniteMoeConfig` defaults: vocab 32000, hidden 4096, 32
/// layers of 32 heads, `num_key_value_heads` = heads when absent or null, experts
/// `intermediate_size` 11008 wide, 8 experts, 2 per token, untied head), named as the published
/// checkpoints name the tensors (`block_sparse_moe.router.layer`, `.input_linear`,
/// `.output_linear`: `conversion_mapping.py` "granitemoe" renames them on load).
pub(crate) fn granitemoe(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("granitemoe", "GraniteMoeForCausalLM", Naming::Granite);
    let hidden = cfg.size(&["hidden_size"], Some(4096))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 32)?;
    let attention = granite_attention(cfg, hidden)?;
    let norm = Norm::rms(hidden);
    let moe = granite_moe(cfg, None)?.ok_or_else(|| {
        cfg.err(
            "num_local_experts",
            "must be at least 1 (GraniteMoeMoE has no dense path)",
        )
    })?;
    for _ in 0..layers {
        spec.decoder.layers.push(pre_norm_layer(
            attention.clone(),
            Mlp::Moe(moe.clone()),
            norm,
        ));
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (32000, 2048), norm)?;
    Ok(spec)
}

/// A Granite 4.0-H config → spec (`GraniteMoeHybridConfig` defaults as Granite-MoE's, plus
/// `shared_intermediate_size` 1024, `layer_types` every layer Mamba, Mamba2 mixers of
/// `mamba_expand · hidden_size`; `GraniteMoeHybridDecoderLayer`: `mamba` or `self_attn`,
/// `block_sparse_moe` when `num_local_experts > 0`, always `shared_mlp`). Rotary positions only
/// with `position_embedding_type: "rope"` (`GraniteMoeHybridModel.rotary_emb`); the published
/// 4.0-H models use none.
pub(crate) fn granitemoehybrid(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec(
        "granitemoehybrid",
        "GraniteMoeHybridForCausalLM",
        Naming::Granite,
    );
    let hidden = cfg.size(&["hidden_size"], Some(4096))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 32)?;
    let kinds = granite_layer_types(cfg, layers)?;
    let attention = granite_attention(cfg, hidden)?;
    let mixer = state_space(mamba2_mixer(cfg, hidden)?);
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let shared = dense(
        cfg.size(&["shared_intermediate_size"], Some(1024))?,
        true,
        false,
        &act,
    );
    let mlp = match granite_moe(cfg, Some(shared.clone()))? {
        Some(moe) => Mlp::Moe(moe),
        None => Mlp::Dense(shared),
    };
    let norm = Norm::rms(hidden);
    for is_mamba in kinds {
        spec.decoder.layers.push(pre_norm_layer(
            if is_mamba {
                mixer.clone()
            } else {
                attention.clone()
            },
            mlp.clone(),
            norm,
        ));
    }
    spec.embedding.positions = match cfg.string("position_embedding_type") {
        Some("rope") => Positions::Rotary {
            theta: cfg.rope_theta(),
        },
        _ => Positions::None,
    };
    finish(cfg, &mut spec, hidden, (32000, 2048), norm)?;
    Ok(spec)
}

/// A Bamba config → spec (`BambaConfig` defaults: vocab 128000, hidden 4096, 32 layers of 32
/// heads over 8 KV heads, SwiGLU 14336 with `mlp_bias`, attention only on `attn_layer_indices`
/// (default none), max positions 262144, untied), named as Jamba's checkpoints are
/// (`BambaDecoderLayer`: `mamba` / `self_attn`, `feed_forward`, `input_layernorm`,
/// `pre_ff_layernorm`, `model.final_layernorm`). Bamba's rotary embedding covers half of each
/// head (`partial_rotary_factor` 0.5 hard-coded in `BambaConfig.__post_init__`): no parameter.
pub(crate) fn bamba(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("bamba", "BambaForCausalLM", Naming::Jamba);
    let (hidden, layers, heads, kv_heads, head_dim) = super::decoder_tail::hybrid_dims(cfg)?;
    let bias = ProjBias::all(cfg.boolean("attention_bias", false)?);
    let mut attention = plain_attention(heads, kv_heads, head_dim, bias);
    attention.sliding_window = None;
    let mixer = state_space(mamba2_mixer(cfg, hidden)?);
    let attn_layers = match cfg.obj.get("attn_layer_indices") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) => cfg.uint_list("attn_layer_indices")?,
    };
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let ffn = cfg.size(&["intermediate_size"], Some(14336))?;
    let mlp = dense(ffn, true, cfg.boolean("mlp_bias", false)?, &act);
    let norm = Norm::rms(hidden);
    for i in 0..layers {
        spec.decoder.layers.push(pre_norm_layer(
            if attn_layers.contains(&i) {
                attention.clone()
            } else {
                mixer.clone()
            },
            Mlp::Dense(mlp.clone()),
            norm,
        ));
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (128000, 262144), norm)?;
    Ok(spec)
}

/// `GraniteMoeAttention` / `GraniteMoeHybridAttention`: q/k/v/o with `attention_bias` on all
/// four, `num_key_value_heads` = heads when absent or null (`__post_init__`), head_dim
/// `hidden_size // num_attention_heads`.
fn granite_attention(cfg: &Cfg, hidden: u64) -> Result<Attention> {
    let heads = cfg.size(&["num_attention_heads"], Some(32))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, heads)?;
    let head_dim = cfg.head_dim(hidden, heads)?;
    let bias = ProjBias::all(cfg.boolean("attention_bias", false)?);
    Ok(plain_attention(heads, kv_heads, head_dim, bias))
}

/// `GraniteMoeMoE`: a bias-free router `[experts, hidden]` and `num_local_experts` SwiGLU
/// experts of `intermediate_size` (default 11008), `num_experts_per_tok` (default 2) per
/// token; `None` when `num_local_experts` is 0 (Granite 4.0-H's dense models).
fn granite_moe(cfg: &Cfg, shared: Option<DenseMlp>) -> Result<Option<MoeMlp>> {
    let experts = cfg.uint("num_local_experts")?.unwrap_or(8);
    if experts == 0 {
        return Ok(None);
    }
    let top_k = cfg.uint("num_experts_per_tok")?.unwrap_or(2);
    if top_k == 0 || top_k > experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!("{top_k} is not between 1 and num_local_experts {experts}"),
        ));
    }
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    Ok(Some(MoeMlp {
        latent: None,
        experts,
        top_k,
        expert: dense(
            cfg.size(&["intermediate_size"], Some(11008))?,
            true,
            false,
            &act,
        ),
        shared,
        shared_gate: false,
        router_bias: false,
        input_jitter: 0,
    }))
}

/// Which layers are Mamba: `layer_types[i]` "mamba" (or its transformers 5 name
/// "linear_attention", `configuration_utils._LEGACY_LAYER_TYPE_REMAP`), attention for
/// "attention" / "full_attention"; absent or null: every layer Mamba
/// (`GraniteMoeHybridConfig.__post_init__`).
fn granite_layer_types(cfg: &Cfg, layers: u64) -> Result<Vec<bool>> {
    match cfg.obj.get("layer_types") {
        None | Some(Value::Null) => Ok(vec![true; layers as usize]),
        // `listed_attention_layers` says which are attention; Granite asks which are Mamba.
        Some(v) => Ok(super::decoder_tail::listed_attention_layers(
            cfg,
            v,
            layers,
            &["attention", "full_attention"],
            &["mamba", "linear_attention"],
        )?
        .into_iter()
        .map(|attention| !attention)
        .collect()),
    }
}

fn state_space(ssm: Ssm) -> Attention {
    Attention {
        kind: AttentionKind::StateSpace(ssm),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    }
}

/// The Mamba2 mixer of `BambaMixer` and `GraniteMoeHybridMambaLayer` (the same shapes): inner
/// width `mamba_expand · hidden_size` (default 2), `mamba_n_heads` (128) heads of
/// `mamba_d_head` ("auto": inner / heads), which must tile the inner width
/// (`validate_architecture`); `mamba_n_groups` (1) groups of B and C, `mamba_d_state` (256),
/// `mamba_d_conv` (4), `mamba_conv_bias` (true), `mamba_proj_bias` (false), `mamba_chunk_size`
/// (256, the torch path's chunk); a gated RMSNorm over the inner width always.
pub(crate) fn mamba2_mixer(cfg: &Cfg, hidden: u64) -> Result<Ssm> {
    let d_inner = cfg.mamba_expanded(hidden)?;
    let heads = cfg.size(&["mamba_n_heads"], Some(128))?;
    if !d_inner.is_multiple_of(heads) {
        return Err(cfg.err(
            "mamba_n_heads",
            format!("{heads} does not divide mamba_expand · hidden_size = {d_inner}"),
        ));
    }
    let (groups, d_state) = super::mamba2_heads::mamba2_heads(cfg, d_inner, heads)?;
    let base = super::mamba2_heads::mamba2_ssm(cfg, d_inner, d_state, heads, groups)?;
    Ok(Ssm {
        conv_bias: cfg.boolean("mamba_conv_bias", true)?,
        proj_bias: cfg.boolean("mamba_proj_bias", false)?,
        chunk: cfg.size(&["mamba_chunk_size"], Some(256))?,
        ..base
    })
}
