//! Hybrid decoders that interleave attention with a recurrent mixer, read as their transformers
//! configuration classes define them: Jamba (`jamba`, `configuration_jamba.py`).
//!
//! Each layer holds either softmax attention (its KV cache grows with the context) or a
//! state-space mixer (a recurrent and a convolution state per sequence, constant in context
//! length), so the per-layer pattern decides both the parameter count and the cache.

use super::decoder_tail::{finish, pre_norm_layer};
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// The layer pattern of `JambaConfig`: `layers_block_type[i]` is attention where `i %
/// attn_layer_period == attn_layer_offset` (else Mamba), and `layers_num_experts[i]` is
/// `num_experts` where `i % expert_layer_period == expert_layer_offset` (else 1: a dense
/// `JambaMLP`) (`configuration_jamba.py`, properties `layers_block_type`,
/// `layers_num_experts`).
struct JambaPattern {
    attn_period: u64,
    attn_offset: u64,
    expert_period: u64,
    expert_offset: u64,
}

impl JambaPattern {
    fn read(cfg: &Cfg) -> Result<Self> {
        let p = JambaPattern {
            attn_period: cfg.size(&["attn_layer_period"], Some(8))?,
            attn_offset: cfg.uint("attn_layer_offset")?.unwrap_or(4),
            expert_period: cfg.size(&["expert_layer_period"], Some(2))?,
            expert_offset: cfg.uint("expert_layer_offset")?.unwrap_or(1),
        };
        // `JambaConfig.validate_architecture` refuses an offset not below its period.
        if p.attn_offset >= p.attn_period {
            return Err(cfg.err(
                "attn_layer_offset",
                "must be smaller than attn_layer_period",
            ));
        }
        if p.expert_offset >= p.expert_period {
            return Err(cfg.err(
                "expert_layer_offset",
                "must be smaller than expert_layer_period",
            ));
        }
        Ok(p)
    }

    fn attention_at(&self, i: u64) -> bool {
        i % self.attn_period == self.attn_offset
    }

    fn experts_at(&self, i: u64) -> bool {
        i % self.expert_period == self.expert_offset
    }
}

/// A Jamba config → spec (`configuration_jamba.py` defaults; `modeling_jamba.py` shapes):
/// attention layers without biases or positional encoding (Jamba uses none: the Mamba layers
/// carry position), Mamba layers whose mixer is Mamba1 with Δ/B/C norms (inner width
/// `mamba_expand · hidden_size`, `mamba_dt_rank` "auto" = `⌈hidden / 16⌉`), each followed by a
/// SwiGLU MLP or `num_experts` routed experts of the same width (`num_experts_per_tok` per
/// token, a bias-free `router`).
pub(crate) fn jamba(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("jamba", "JambaForCausalLM", Naming::Jamba);
    let (hidden, layers, heads, kv_heads, head_dim) = super::decoder_tail::hybrid_dims(cfg)?;
    let ffn = cfg.size(&["intermediate_size"], Some(14336))?;
    let act = cfg.string("hidden_act").unwrap_or("silu").to_string();
    let experts = cfg
        .uint_any(&["num_experts", "num_local_experts"])?
        .unwrap_or(16);
    let top_k = cfg.size(&["num_experts_per_tok"], Some(2))?;
    if experts > 1 && top_k > experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!("{top_k} is more than num_experts {experts}"),
        ));
    }
    let pattern = JambaPattern::read(cfg)?;
    let ssm = jamba_mixer(cfg, hidden)?;
    let mut attention = plain_attention(heads, kv_heads, head_dim, ProjBias::all(false));
    attention.sliding_window = cfg.uint("sliding_window")?.filter(|w| *w > 0);
    let mixer = Attention {
        kind: AttentionKind::StateSpace(ssm),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    };
    let norm = Norm::rms(hidden);
    let expert = dense(ffn, true, false, &act);
    for i in 0..layers {
        let mlp = if experts > 1 && pattern.experts_at(i) {
            Mlp::Moe(MoeMlp {
                experts,
                top_k,
                expert: expert.clone(),
                shared: None,
                shared_gate: false,
                router_bias: false,
                // JambaSparseMoeBlock adds no input noise (modeling_jamba.py has no jitter).
                input_jitter: 0,
                latent: None,
            })
        } else {
            Mlp::Dense(expert.clone())
        };
        spec.decoder.layers.push(pre_norm_layer(
            if pattern.attention_at(i) {
                attention.clone()
            } else {
                mixer.clone()
            },
            mlp,
            norm,
        ));
    }
    spec.embedding.positions = Positions::None;
    finish(cfg, &mut spec, hidden, (65536, 262144), norm)?;
    Ok(spec)
}

/// `JambaMambaMixer`'s shapes: `intermediate_size = mamba_expand · hidden_size`,
/// `time_step_rank = mamba_dt_rank` ("auto": `math.ceil(hidden_size / 16)`,
/// `JambaConfig.__post_init__`), `mamba_d_state`, `mamba_d_conv`, biases from
/// `mamba_conv_bias` / `mamba_proj_bias`.
fn jamba_mixer(cfg: &Cfg, hidden: u64) -> Result<Ssm> {
    let d_inner = cfg.mamba_expanded(hidden)?;
    let dt_rank = match cfg.obj.get("mamba_dt_rank") {
        None | Some(Value::Null) => hidden.div_ceil(16),
        Some(Value::String(s)) if s == "auto" => hidden.div_ceil(16),
        Some(_) => cfg.size(&["mamba_dt_rank"], None)?,
    };
    Ok(Ssm {
        version: SsmVersion::Jamba,
        d_inner,
        d_state: cfg.size(&["mamba_d_state"], Some(16))?,
        d_conv: cfg.size(&["mamba_d_conv"], Some(4))?,
        dt_rank,
        heads: 0,
        groups: 0,
        conv_bias: cfg.boolean("mamba_conv_bias", true)?,
        proj_bias: cfg.boolean("mamba_proj_bias", false)?,
        state_fp32: false,
        chunk: 0,
    })
}
