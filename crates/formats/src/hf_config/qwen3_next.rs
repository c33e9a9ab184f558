//! Qwen3-Next (`qwen3_next`), read as transformers 5.x's `configuration_qwen3_next.py` defines
//! it and `modeling_qwen3_next.py` builds it: gated DeltaNet layers (`linear_attention`) and
//! gated full attention (`full_attention`, every `full_attention_interval`-th layer unless
//! `layer_types` says otherwise), each followed by a sparse MoE block with a gated shared
//! expert (`Qwen3NextSparseMoeBlock`) or, on `mlp_only_layers`, a dense SwiGLU MLP.

use super::decoder_tail::{finish, pre_norm_layer};
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention, MAX_DIM};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// Which layers are full attention: `layer_types[i] == "full_attention"`, else (no
/// `layer_types`) `(i + 1) % full_attention_interval == 0` (`Qwen3NextConfig.__post_init__`,
/// default interval 4).
pub(super) fn full_attention_layers(cfg: &Cfg, layers: u64) -> Result<Vec<bool>> {
    match cfg.obj.get("layer_types") {
        None | Some(Value::Null) => {
            let every = cfg.size(&["full_attention_interval"], Some(4))?;
            Ok((0..layers).map(|i| (i + 1) % every == 0).collect())
        }
        Some(v) => super::decoder_tail::listed_attention_layers(
            cfg,
            v,
            layers,
            &["full_attention"],
            &["linear_attention"],
        ),
    }
}

/// `Qwen3NextGatedDeltaNet`'s shapes as an [`Ssm`]: `heads` = `linear_num_value_heads`,
/// `groups` = `linear_num_key_heads`, `d_state` = `linear_key_head_dim`, `d_inner` =
/// value heads · `linear_value_head_dim`, `d_conv` = `linear_conv_kernel_dim`; no conv or
/// projection biases. The value heads must be a multiple of the key heads
/// (`fix_query_key_value_ordering` splits each key head's slice into `nv / nk` value heads).
pub(super) fn gated_delta(cfg: &Cfg) -> Result<Ssm> {
    let nk = cfg.size(&["linear_num_key_heads"], Some(16))?;
    let nv = cfg.size(&["linear_num_value_heads"], Some(32))?;
    let dk = cfg.size(&["linear_key_head_dim"], Some(128))?;
    let dv = cfg.size(&["linear_value_head_dim"], Some(128))?;
    if !nv.is_multiple_of(nk) {
        return Err(cfg.err(
            "linear_num_value_heads",
            format!("{nv} is not a multiple of linear_num_key_heads {nk}"),
        ));
    }
    let d_inner = nv
        .checked_mul(dv)
        .filter(|v| *v <= MAX_DIM)
        .ok_or_else(|| cfg.err("linear_value_head_dim", "value width is too large"))?;
    nk.checked_mul(dk)
        .filter(|v| *v <= MAX_DIM)
        .ok_or_else(|| cfg.err("linear_key_head_dim", "key width is too large"))?;
    Ok(Ssm {
        version: SsmVersion::GatedDeltaNet,
        d_inner,
        d_state: dk,
        d_conv: cfg.size(&["linear_conv_kernel_dim"], Some(4))?,
        dt_rank: 0,
        heads: nv,
        groups: nk,
        conv_bias: false,
        proj_bias: false,
        state_fp32: false,
        chunk: 0,
    })
}

/// The MoE block (`Qwen3NextSparseMoeBlock`): `num_experts` experts of `moe_intermediate_size`,
/// `num_experts_per_tok` per token, a bias-free `gate`, a shared expert of
/// `shared_expert_intermediate_size` behind a sigmoid `shared_expert_gate`.
fn moe_block(cfg: &Cfg, experts: u64, act: &str) -> Result<MoeMlp> {
    let top_k = cfg.top_k("num_experts_per_tok", Some(10), experts)?;
    Ok(MoeMlp {
        experts,
        top_k,
        expert: dense(
            cfg.size(&["moe_intermediate_size"], Some(512))?,
            true,
            false,
            act,
        ),
        shared: Some(dense(
            cfg.size(&["shared_expert_intermediate_size"], Some(512))?,
            true,
            false,
            act,
        )),
        shared_gate: true,
        router_bias: false,
        input_jitter: 0,
        latent: None,
    })
}

/// A Qwen3-Next config → spec (`Qwen3NextConfig` defaults). Full-attention layers are
/// `Qwen3NextAttention`: `q_proj` doubled for the output gate, per-head RMS q/k norms, no
/// biases unless `attention_bias`, rotary on `partial_rotary_factor` of each head (no
/// parameters). A layer holds the MoE block unless it is in `mlp_only_layers`, `num_experts`
/// is 0, or `(i + 1) % decoder_sparse_step != 0`; then a dense MLP of `intermediate_size`.
pub(crate) fn qwen3_next(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("qwen3_next", "Qwen3NextForCausalLM", Naming::QwenMoe);
    let hidden = cfg.size(&["hidden_size"], Some(2048))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 48)?;
    let heads = cfg.size(&["num_attention_heads"], Some(16))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, 2)?;
    let head_dim = match cfg.obj.get("head_dim") {
        None | Some(Value::Null) => 256,
        Some(_) => cfg.size(&["head_dim"], None)?,
    };
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let full = full_attention_layers(cfg, layers)?;
    let (attention, mixer) = mixers(cfg, heads, kv_heads, head_dim)?;
    let experts = cfg.uint("num_experts")?.unwrap_or(512);
    let step = cfg.size(&["decoder_sparse_step"], Some(1))?;
    let mlp_only = cfg.uint_list("mlp_only_layers")?;
    let moe = if experts > 0 {
        Some(moe_block(cfg, experts, &act)?)
    } else {
        None
    };
    let dense_mlp = dense(
        cfg.size(&["intermediate_size"], Some(5632))?,
        true,
        false,
        &act,
    );
    let norm = Norm::rms(hidden);
    for (i, is_full) in full.iter().enumerate() {
        let i = i as u64;
        let mlp = match &moe {
            Some(m) if !mlp_only.contains(&i) && (i + 1).is_multiple_of(step) => {
                Mlp::Moe(m.clone())
            }
            _ => Mlp::Dense(dense_mlp.clone()),
        };
        spec.decoder.layers.push(pre_norm_layer(
            if *is_full {
                attention.clone()
            } else {
                mixer.clone()
            },
            mlp,
            norm,
        ));
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (151936, 32768), norm)?;
    Ok(spec)
}

/// The two token mixers of a Qwen3-Next / Qwen3.5 decoder: the gated full attention
/// (`Qwen3NextAttention`: per-head RMS q/k norms, the output gate folded into a doubled
/// `q_proj`) and the gated DeltaNet (`Qwen3NextGatedDeltaNet`) in its place on linear layers.
pub(super) fn mixers(
    cfg: &Cfg,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
) -> Result<(Attention, Attention)> {
    let mut attention = plain_attention(
        heads,
        kv_heads,
        head_dim,
        ProjBias::all(cfg.boolean("attention_bias", false)?),
    );
    attention.qk_norm = Some(Norm::rms(head_dim));
    attention.output_gate = true;
    let mixer = Attention {
        kind: AttentionKind::StateSpace(gated_delta(cfg)?),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    };
    Ok((attention, mixer))
}
