//! Nemotron-H and Nemotron-3 (`nemotron_h`), read as transformers 5.24
//! `configuration_nemotron_h.py` (`NemotronHConfig`) defines them and `modeling_nemotron_h.py`
//! builds them: every layer is ONE mixer after one RMSNorm (`NemotronHBlock`): a Mamba2 mixer
//! (`M`, `linear_attention`), grouped-query attention without rotary embedding or biases (`*`,
//! `full_attention`), a squared-ReLU MLP without gate (`-`, `mlp`) or a routed MoE of such
//! MLPs with a shared expert and optional latent projections (`E`, `moe`). Multi-token
//! prediction layers (`num_nextn_predict_layers`) are not built (`_keys_to_ignore_on_load_
//! unexpected = [r"mtp.*"]`).

use super::decoder_tail::finish;
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention, MAX_DIM};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// One layer's mixer, as `NemotronHConfig._pattern_to_list` and the legacy names
/// (`configuration_utils.py` `_LEGACY_LAYER_TYPE_REMAP`: `mamba`, `attention`) spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Mamba,
    Attention,
    Mlp,
    Moe,
}

impl Block {
    fn of_char(c: char) -> Option<Block> {
        Some(match c {
            'M' => Block::Mamba,
            '*' => Block::Attention,
            '-' => Block::Mlp,
            'E' => Block::Moe,
            _ => return None,
        })
    }

    fn of_name(s: &str) -> Option<Block> {
        Some(match s {
            "linear_attention" | "mamba" => Block::Mamba,
            "full_attention" | "attention" => Block::Attention,
            "mlp" => Block::Mlp,
            "moe" => Block::Moe,
            _ => return None,
        })
    }
}

/// The layer list, in `NemotronHConfig.__post_init__`'s order: `layers_block_type` (or its
/// alias `layer_types`) when given, else `hybrid_override_pattern`, else the class default
/// `["linear_attention", "moe", "full_attention", "mlp"]`. `num_hidden_layers` is ignored
/// (transformers only warns when it disagrees).
fn blocks(cfg: &Cfg) -> Result<Vec<Block>> {
    for key in ["layers_block_type", "layer_types"] {
        match cfg.obj.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(items)) => {
                return items
                    .iter()
                    .map(|v| {
                        v.as_str().and_then(Block::of_name).ok_or_else(|| {
                            cfg.err(key, format!("unknown layer type {v} (expected mamba, attention, mlp or moe)"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()
                    .and_then(|b| bounded(cfg, key, b));
            }
            Some(other) => return Err(cfg.err(key, format!("must be a list (got {other})"))),
        }
    }
    match cfg.obj.get("hybrid_override_pattern") {
        None | Some(Value::Null) => {
            Ok(vec![Block::Mamba, Block::Moe, Block::Attention, Block::Mlp])
        }
        Some(Value::String(p)) => {
            let b = p
                .chars()
                .map(|c| {
                    Block::of_char(c).ok_or_else(|| {
                        cfg.err(
                            "hybrid_override_pattern",
                            format!("unknown layer character '{c}' (expected M, *, - or E)"),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            bounded(cfg, "hybrid_override_pattern", b)
        }
        Some(other) => Err(cfg.err(
            "hybrid_override_pattern",
            format!("must be a string (got {other})"),
        )),
    }
}

fn bounded(cfg: &Cfg, key: &str, b: Vec<Block>) -> Result<Vec<Block>> {
    if b.is_empty() || b.len() as u64 > super::MAX_LAYERS {
        return Err(cfg.err(key, format!("{} layers is not a model", b.len())));
    }
    Ok(b)
}

/// A Nemotron-H config → spec (`NemotronHConfig` defaults; shapes of `NemotronHMamba2Mixer`,
/// `NemotronHAttention`, `NemotronHMLP`, `NemotronHMoE`), named as nvidia's checkpoints name
/// the tensors (`backbone.layers.N.mixer.*`).
pub(crate) fn nemotron_h(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("nemotron_h", "NemotronHForCausalLM", Naming::NemotronH);
    let hidden = cfg.size(&["hidden_size"], Some(4096))?;
    let heads = cfg.size(&["num_attention_heads"], Some(32))?;
    let kv_heads = super::decoder_tail::kv_heads_default_8(cfg, heads)?;
    // `head_dim` is a class field (default 128), not hidden / heads.
    let head_dim = cfg.size(&["head_dim"], Some(128))?;
    // `NemotronHAttention` builds q/k/v/o with `bias=False` whatever `attention_bias` says.
    let attention = plain_attention(heads, kv_heads, head_dim, ProjBias::all(false));
    let mamba = Attention {
        kind: AttentionKind::StateSpace(mixer(cfg)?),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    };
    let none = plain_attention(0, 0, 0, ProjBias::all(false));
    let act = cfg.string("mlp_hidden_act").unwrap_or("relu2").to_string();
    let mlp_bias = cfg.boolean("mlp_bias", false)?;
    let mlp = dense(
        cfg.size(&["intermediate_size"], Some(21504))?,
        false,
        mlp_bias,
        &act,
    );
    let norm = Norm::rms(hidden);
    let layers = blocks(cfg)?;
    let moe = if layers.contains(&Block::Moe) {
        Some(moe(cfg, &act, mlp_bias)?)
    } else {
        None
    };
    for b in layers {
        let (attention, mlp, slot) = match b {
            Block::Mamba => (mamba.clone(), Mlp::None, NormSlot::PreAttention),
            Block::Attention => (attention.clone(), Mlp::None, NormSlot::PreAttention),
            Block::Mlp => (none.clone(), Mlp::Dense(mlp.clone()), NormSlot::PreMlp),
            Block::Moe => (
                none.clone(),
                moe.clone().map_or(Mlp::None, Mlp::Moe),
                NormSlot::PreMlp,
            ),
        };
        spec.decoder.layers.push(Layer {
            attention,
            cross_attention: None,
            mlp,
            norms: vec![(slot, norm)],
            parallel_residual: false,
            parallel_ssm: None,
            shared_block: None,
            experts_beside: None,
        });
    }
    // No rotary embedding: `NemotronHAttention.forward` applies none.
    spec.embedding.positions = Positions::None;
    finish(cfg, &mut spec, hidden, (131072, 4096), norm)?;
    Ok(spec)
}

/// `NemotronHMamba2Mixer`'s shapes: `mamba_num_heads` heads of `mamba_head_dim` (inner width
/// their product; `expand` is not used), B and C per `n_groups` group (`mamba_n_groups`
/// overrides it in `__post_init__`, as `mamba_d_conv` does `conv_kernel` and
/// `mamba_conv_bias` `use_conv_bias`); `in_proj`/`out_proj` biases follow `use_bias` (not
/// `mamba_proj_bias`); the gated RMSNorm `norm [d_inner]` normalises per group after the
/// `silu(z)` gate.
fn mixer(cfg: &Cfg) -> Result<Ssm> {
    let heads = cfg.size(&["mamba_num_heads"], Some(128))?;
    let head_dim = cfg.size(&["mamba_head_dim"], Some(64))?;
    let d_inner = heads
        .checked_mul(head_dim)
        .filter(|v| *v <= MAX_DIM)
        .ok_or_else(|| {
            cfg.err(
                "mamba_head_dim",
                "mamba_num_heads · mamba_head_dim is too large",
            )
        })?;
    let groups = cfg.size(&["mamba_n_groups", "n_groups"], Some(8))?;
    if !heads.is_multiple_of(groups) {
        return Err(cfg.err(
            "n_groups",
            format!("{groups} does not divide mamba_num_heads {heads}"),
        ));
    }
    let d_state = cfg.size(&["ssm_state_size"], Some(128))?;
    let too_big = groups
        .checked_mul(d_state)
        .and_then(|v| v.checked_mul(2))
        .and_then(|v| v.checked_add(2 * d_inner + heads))
        .is_none_or(|v| v > MAX_DIM);
    if too_big {
        return Err(cfg.err("ssm_state_size", "the Mamba projections are too large"));
    }
    let conv_bias = match cfg.obj.get("mamba_conv_bias") {
        None | Some(Value::Null) => cfg.boolean("use_conv_bias", true)?,
        Some(_) => cfg.boolean("mamba_conv_bias", true)?,
    };
    Ok(Ssm {
        version: SsmVersion::Mamba2,
        d_inner,
        d_state,
        d_conv: cfg.size(&["mamba_d_conv", "conv_kernel"], Some(4))?,
        dt_rank: 0,
        heads,
        groups,
        conv_bias,
        proj_bias: cfg.boolean("use_bias", false)?,
        state_fp32: ssm_state_fp32(cfg)?,
        chunk: cfg.size(&["mamba_chunk_size", "chunk_size"], Some(128))?,
    })
}

/// `mamba_ssm_cache_dtype` (default `"float32"`): the SSM state's cache dtype, which vLLM
/// honours; transformers' torch path keeps that state in fp32 whatever the setting
/// (`mamba2_chunk_scan` returns its final state from `hidden_states.float()`), so only an
/// explicit half-width setting narrows it.
fn ssm_state_fp32(cfg: &Cfg) -> Result<bool> {
    match cfg.obj.get("mamba_ssm_cache_dtype") {
        None | Some(Value::Null) => Ok(true),
        Some(Value::String(s)) => match s.as_str() {
            "float32" | "fp32" => Ok(true),
            "bfloat16" | "float16" | "auto" => Ok(false),
            other => Err(cfg.err(
                "mamba_ssm_cache_dtype",
                format!("unknown dtype '{other}' (expected float32, bfloat16, float16 or auto)"),
            )),
        },
        Some(other) => Err(cfg.err(
            "mamba_ssm_cache_dtype",
            format!("must be a string (got {other})"),
        )),
    }
}

/// `NemotronHMoE`: `n_routed_experts` (alias `num_local_experts`) experts of
/// `moe_intermediate_size`, `num_experts_per_tok` per token, one shared expert of
/// `moe_shared_expert_intermediate_size` (`n_shared_experts` does not change its width), the
/// experts in `moe_latent_size` when set. The experts never carry biases (`NemotronHExperts`
/// holds two stacked matrices); the shared expert and latent projections follow `mlp_bias`.
fn moe(cfg: &Cfg, act: &str, bias: bool) -> Result<MoeMlp> {
    let experts = cfg.size(&["n_routed_experts", "num_local_experts"], Some(8))?;
    let top_k = cfg.size(&["num_experts_per_tok"], Some(2))?;
    if top_k > experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!("{top_k} is more than n_routed_experts {experts}"),
        ));
    }
    let latent = cfg.uint("moe_latent_size")?;
    if latent == Some(0) {
        return Err(cfg.err("moe_latent_size", "must be at least 1 (got 0)"));
    }
    Ok(MoeMlp {
        experts,
        top_k,
        expert: dense(
            cfg.size(&["moe_intermediate_size"], Some(7688))?,
            false,
            false,
            act,
        ),
        shared: Some(dense(
            cfg.size(&["moe_shared_expert_intermediate_size"], Some(7688))?,
            false,
            bias,
            act,
        )),
        shared_gate: false,
        router_bias: false,
        input_jitter: 0,
        latent,
    })
}
