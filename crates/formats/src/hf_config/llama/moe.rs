//! Which layers of a Llama-shaped MoE family hold experts, and what the experts look like, per
//! family (`modeling_mixtral.py`, `modeling_qwen2_moe.py` / `modeling_qwen3_moe.py`,
//! `modeling_deepseek_v3.py`).

use super::family::Experts;
use crate::error::Result;
use crate::hf_config::dense;
use crate::hf_config::fields::Cfg;
use serde_json::Value;
use vramscope_core::model::MoeMlp;

/// Which layers are MoE and what their experts look like.
pub(super) struct MoeLayout {
    pub(super) template: MoeMlp,
    /// Layer indices that stay dense.
    pub(super) dense_layers: Vec<u64>,
    pub(super) first_dense: u64,
    pub(super) step: u64,
    /// DeepSeek counts MoE layers as `i % moe_layer_freq == 0` (`modeling_deepseek_v3.py`);
    /// Qwen-MoE as `(i + 1) % decoder_sparse_step == 0` (`modeling_qwen2_moe.py`).
    pub(super) zero_based_step: bool,
}

impl MoeLayout {
    /// Every decoder layer routed through `template`'s experts: no dense layers, no dense
    /// prefix, step 1 (Mixtral, OLMoE, PhiMoE, gpt-oss: their decoder layers build the sparse
    /// block unconditionally).
    fn every_layer(template: MoeMlp) -> Self {
        MoeLayout {
            template,
            dense_layers: Vec::new(),
            first_dense: 0,
            step: 1,
            zero_based_step: false,
        }
    }

    pub(super) fn for_layer(&self, i: u64) -> Option<MoeMlp> {
        if i < self.first_dense || self.dense_layers.contains(&i) {
            return None;
        }
        let moe_here = if self.zero_based_step {
            i.is_multiple_of(self.step)
        } else {
            (i + 1).is_multiple_of(self.step)
        };
        moe_here.then(|| self.template.clone())
    }
}

/// The family's MoE layout, `None` for a dense model; more experts per token than experts is
/// an error naming `num_experts_per_tok`.
pub(super) fn moe_layout(
    cfg: &Cfg,
    experts: Experts,
    activation: &str,
    ffn_default: u64,
) -> Result<Option<MoeLayout>> {
    let layout = match experts {
        Experts::Dense => return Ok(None),
        Experts::Mixtral {
            experts,
            top_k,
            jitter,
        } => {
            let mut layout = mixtral(cfg, activation, (experts, top_k, ffn_default))?;
            layout.template.input_jitter = match jitter {
                Some((key, times)) if cfg.prob(&[key], 0.0)? > 0.0 => times,
                _ => 0,
            };
            layout
        }
        Experts::Llama4 => llama4_moe(cfg, activation)?,
        Experts::GptOss => gpt_oss(cfg)?,
        Experts::Qwen {
            experts,
            top_k,
            expert_ffn,
            shared_ffn,
        } => qwen(cfg, activation, experts, top_k, expert_ffn, shared_ffn)?,
        Experts::DeepSeek {
            expert_ffn,
            shared,
            experts,
            first_dense,
        } => {
            let defaults = DeepSeekDefaults {
                expert_ffn,
                shared,
                experts,
                first_dense,
            };
            match deepseek(cfg, activation, defaults)? {
                Some(layout) => layout,
                None => return Ok(None),
            }
        }
    };
    if layout.template.top_k > layout.template.experts {
        return Err(cfg.err(
            "num_experts_per_tok",
            format!(
                "{} is more than the {} experts",
                layout.template.top_k, layout.template.experts
            ),
        ));
    }
    Ok(Some(layout))
}

/// Mixtral: every layer MoE (MixtralConfig: 8 experts, 2 per token, `intermediate_size` 14336;
/// OlmoeConfig 64, 8, 2048; PhimoeConfig 16, 2, 6400).
fn mixtral(
    cfg: &Cfg,
    activation: &str,
    (experts, top_k, ffn): (u64, u64, u64),
) -> Result<MoeLayout> {
    Ok(MoeLayout::every_layer(MoeMlp {
        experts: cfg.size(&["num_local_experts", "num_experts"], Some(experts))?,
        top_k: cfg.size(&["num_experts_per_tok"], Some(top_k))?,
        expert: dense(
            cfg.size(&["intermediate_size"], Some(ffn))?,
            true,
            false,
            activation,
        ),
        shared: None,
        shared_gate: false,
        router_bias: false,
        input_jitter: 0,
        latent: None,
    }))
}

/// Qwen2-MoE / Qwen3-MoE, with the family's defaults; a gated shared expert where the family
/// has one (`shared_ffn`).
fn qwen(
    cfg: &Cfg,
    activation: &str,
    experts: u64,
    top_k: u64,
    expert_ffn: u64,
    shared_ffn: Option<u64>,
) -> Result<MoeLayout> {
    // Qwen3MoeConfig (transformers 5) maps `num_experts` to `num_local_experts`
    // (`attribute_map`): either spelling.
    let experts = cfg.size(&["num_experts", "num_local_experts"], Some(experts))?;
    let shared_ffn = match shared_ffn {
        Some(default) => cfg
            .uint("shared_expert_intermediate_size")?
            .unwrap_or(default),
        None => 0,
    };
    Ok(MoeLayout {
        template: MoeMlp {
            experts,
            top_k: cfg.size(&["num_experts_per_tok"], Some(top_k))?,
            expert: dense(
                cfg.size(&["moe_intermediate_size"], Some(expert_ffn))?,
                true,
                false,
                activation,
            ),
            shared: (shared_ffn > 0).then(|| dense(shared_ffn, true, false, activation)),
            shared_gate: shared_ffn > 0,
            router_bias: false,
            input_jitter: 0,
            latent: None,
        },
        dense_layers: cfg.uint_list("mlp_only_layers")?,
        first_dense: 0,
        step: cfg.size(&["decoder_sparse_step"], Some(1))?,
        zero_based_step: false,
    })
}

/// A DeepSeek-style family's class defaults (`Experts::DeepSeek`).
struct DeepSeekDefaults {
    expert_ffn: u64,
    shared: u64,
    experts: Option<u64>,
    first_dense: u64,
}

/// DeepSeek-V2/V3 and GLM-4.5: `None` (a dense model) when the config routes to no experts.
fn deepseek(cfg: &Cfg, activation: &str, d: DeepSeekDefaults) -> Result<Option<MoeLayout>> {
    let DeepSeekDefaults {
        expert_ffn, shared, ..
    } = d;
    let Some(experts) = cfg
        .uint_any(&["n_routed_experts", "num_local_experts"])?
        .or(d.experts)
    else {
        return Ok(None);
    };
    if experts == 0 {
        return Ok(None);
    }
    let expert_ffn = cfg.size(&["moe_intermediate_size"], Some(expert_ffn))?;
    let shared = cfg.uint("n_shared_experts")?.unwrap_or(shared);
    Ok(Some(MoeLayout {
        template: MoeMlp {
            experts,
            top_k: cfg.size(&["num_experts_per_tok"], Some(8))?,
            expert: dense(expert_ffn, true, false, activation),
            // DeepseekV3MoE: one MLP of width moe_intermediate_size × n_shared_experts.
            shared: (shared > 0)
                .then(|| dense(expert_ffn.saturating_mul(shared), true, false, activation)),
            shared_gate: false,
            router_bias: false,
            input_jitter: 0,
            latent: None,
        },
        dense_layers: Vec::new(),
        first_dense: cfg.uint("first_k_dense_replace")?.unwrap_or(d.first_dense),
        step: cfg.size(&["moe_layer_freq"], Some(1))?,
        zero_based_step: true,
    }))
}

/// gpt-oss: every layer MoE (GptOssConfig: 128 local experts, 4 per token, `intermediate_size`
/// 2880); the router and both expert projections carry biases, and the experts apply the clamped
/// SwiGLU of `GptOssExperts._apply_gate` (named `gpt_oss_swiglu` here: the config's `hidden_act`
/// is not what the experts run).
fn gpt_oss(cfg: &Cfg) -> Result<MoeLayout> {
    Ok(MoeLayout::every_layer(MoeMlp {
        experts: cfg.size(&["num_local_experts", "num_experts"], Some(128))?,
        top_k: cfg.size(&["num_experts_per_tok", "experts_per_token"], Some(4))?,
        expert: dense(
            cfg.size(&["intermediate_size"], Some(2880))?,
            true,
            true,
            "gpt_oss_swiglu",
        ),
        shared: None,
        shared_gate: false,
        router_bias: true,
        input_jitter: 0,
        latent: None,
    }))
}

/// `Llama4TextMoe` layers: `moe_layers` when the config lists them, else every
/// `interleave_moe_layer_step`-th layer from index `step - 1` (Llama4TextConfig
/// `__post_init__`); `num_local_experts` (16) experts and a shared expert, both
/// `intermediate_size` (8192) wide, `num_experts_per_tok` (1) per token.
pub(super) fn llama4_moe(cfg: &Cfg, activation: &str) -> Result<MoeLayout> {
    let ffn = cfg.size(&["intermediate_size"], Some(8192))?;
    let layers = cfg.layer_count(&["num_hidden_layers"], 48)?;
    let (dense_layers, step) = match cfg.obj.get("moe_layers") {
        None | Some(Value::Null) => (
            Vec::new(),
            cfg.size(&["interleave_moe_layer_step"], Some(1))?,
        ),
        Some(_) => {
            let moe = cfg.uint_list("moe_layers")?;
            ((0..layers).filter(|i| !moe.contains(i)).collect(), 1)
        }
    };
    Ok(MoeLayout {
        template: MoeMlp {
            latent: None,
            experts: cfg.size(&["num_local_experts"], Some(16))?,
            top_k: cfg.size(&["num_experts_per_tok"], Some(1))?,
            expert: dense(ffn, true, false, activation),
            shared: Some(dense(ffn, true, false, activation)),
            shared_gate: false,
            router_bias: false,
            input_jitter: 0,
        },
        dense_layers,
        first_dense: 0,
        step,
        zero_based_step: false,
    })
}
