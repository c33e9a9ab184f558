//! Falcon-H1 (`falcon_h1`), read as transformers 5.x `configuration_falcon_h1.py` defines it:
//! every layer runs grouped-query attention and a Mamba2 mixer side by side on the same normed
//! input (`FalconH1DecoderLayer`), then a SwiGLU MLP (`feed_forward`). The muP multipliers
//! (`embedding_multiplier`, `attention_in_multiplier`, `key_multiplier`, `ssm_multipliers`,
//! `mlp_multipliers`, `lm_head_multiplier`, ...) scale activations and change no shape; the
//! per-layer `mup_vector` is a non-persistent buffer (`FalconH1Model.__init__`), not a
//! parameter.

use super::decoder_tail::finish;
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// A Falcon-H1 config → spec (`FalconH1Config` defaults; shapes of `FalconH1Attention`,
/// `FalconH1Mixer`, `FalconH1MLP`), named as the published checkpoints name the tensors
/// (`model.layers.N.self_attn.*`, `.mamba.*`, `.feed_forward.*`, `input_layernorm`,
/// `pre_ff_layernorm`, `model.final_layernorm`: Jamba's names).
pub(crate) fn falcon_h1(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("falcon_h1", "FalconH1ForCausalLM", Naming::Jamba);
    let (hidden, layers, heads, kv_heads, head_dim) = super::decoder_tail::hybrid_dims(cfg)?;
    let ffn = cfg.size(&["intermediate_size"], Some(14336))?;
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let attention = plain_attention(
        heads,
        kv_heads,
        head_dim,
        ProjBias::all(cfg.boolean("attention_bias", false)?),
    );
    let mixer = falcon_h1_mixer(cfg, hidden)?;
    let norm = Norm::rms(hidden);
    let mlp = dense(ffn, true, cfg.boolean("mlp_bias", false)?, &act);
    for _ in 0..layers {
        spec.decoder.layers.push(Layer {
            attention: attention.clone(),
            cross_attention: None,
            mlp: Mlp::Dense(mlp.clone()),
            norms: vec![(NormSlot::PreAttention, norm), (NormSlot::PreMlp, norm)],
            parallel_residual: false,
            parallel_ssm: Some(mixer),
            shared_block: None,
            experts_beside: None,
        });
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (128000, 8192), norm)?;
    Ok(spec)
}

/// `FalconH1Mixer`'s shapes: inner width `mamba_d_ssm` (default 1024; null: `mamba_expand ·
/// hidden_size`), `mamba_n_heads` heads of `mamba_d_head` ("auto": inner / heads), which must
/// tile the inner width exactly (`FalconH1Config.validate_architecture`); B and C per
/// `mamba_n_groups` group, whole groups of heads (`mamba2_chunk_scan`'s `repeat_interleave`).
fn falcon_h1_mixer(cfg: &Cfg, hidden: u64) -> Result<ParallelSsm> {
    let d_inner = match cfg.obj.get("mamba_d_ssm") {
        Some(Value::Null) => cfg.mamba_expanded(hidden)?,
        _ => cfg.size(&["mamba_d_ssm"], Some(1024))?,
    };
    let heads = cfg.size(&["mamba_n_heads"], Some(128))?;
    if !d_inner.is_multiple_of(heads) {
        return Err(cfg.err(
            "mamba_n_heads",
            format!(
                "{heads} does not divide the Mamba inner width {d_inner} (mamba_d_ssm, or \
                 mamba_expand · hidden_size when it is null)"
            ),
        ));
    }
    let (groups, d_state) = super::mamba2_heads::mamba2_heads(cfg, d_inner, heads)?;
    let base = super::mamba2_heads::mamba2_ssm(cfg, d_inner, d_state, heads, groups)?;
    let ssm = Ssm {
        conv_bias: cfg.boolean("mamba_conv_bias", true)?,
        proj_bias: cfg.boolean("mamba_proj_bias", false)?,
        ..base
    };
    Ok(ParallelSsm {
        ssm,
        out_bias: cfg.boolean("projectors_bias", false)?,
        gated_norm: cfg.boolean("mamba_rms_norm", false)?,
        norm_before_gate: cfg.boolean("mamba_norm_before_gate", true)?,
        chunk: cfg.size(&["mamba_chunk_size"], Some(256))?,
    })
}
