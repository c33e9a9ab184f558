//! State-space language models: Mamba (`mamba`), FalconMamba (`falcon_mamba`) and Mamba2
//! (`mamba2`), read as their transformers configuration classes define them
//! (`configuration_mamba.py`, `configuration_falcon_mamba.py`, `configuration_mamba2.py`): every
//! block is `x + mixer(norm(x))` with an RMSNorm and no MLP; the mixer replaces attention and
//! caches a recurrent state instead of keys and values.

use super::fields::Cfg;
use super::{empty_spec, MAX_DIM};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// Class defaults that differ between the three configuration classes.
struct Defaults {
    arch: &'static str,
    version: SsmVersion,
    vocab: u64,
    hidden: u64,
    layers: u64,
    state: u64,
    tied: bool,
}

fn defaults(model_type: &str) -> Defaults {
    match model_type {
        // Mamba2Config: num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096,
        // state_size=128, num_hidden_layers=64, n_groups=8, tie_word_embeddings=False.
        "mamba2" => Defaults {
            arch: "Mamba2ForCausalLM",
            version: SsmVersion::Mamba2,
            vocab: 32768,
            hidden: 4096,
            layers: 64,
            state: 128,
            tied: false,
        },
        // FalconMambaConfig: vocab_size=50280, hidden_size=768, state_size=16,
        // num_hidden_layers=32, tie_word_embeddings=True.
        "falcon_mamba" => Defaults {
            arch: "FalconMambaForCausalLM",
            version: SsmVersion::FalconMamba,
            vocab: 50280,
            hidden: 768,
            layers: 32,
            state: 16,
            tied: true,
        },
        // MambaConfig: the same defaults as FalconMamba's.
        _ => Defaults {
            arch: "MambaForCausalLM",
            version: SsmVersion::Mamba1,
            vocab: 50280,
            hidden: 768,
            layers: 32,
            state: 16,
            tied: true,
        },
    }
}

/// A Mamba / FalconMamba / Mamba2 config → spec ([`inner_width`] for the inner width); Mamba's `time_step_rank` "auto" is `⌈hidden /
/// 16⌉`; Mamba2's heads are `num_heads` of `head_dim`, which must tile `intermediate_size`.
pub(crate) fn mamba_like(cfg: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let d = defaults(model_type);
    let mut spec = empty_spec(model_type, d.arch, Naming::Mamba);
    let hidden = cfg.size(&["hidden_size", "d_model"], Some(d.hidden))?;
    let layers = cfg.layer_count(&["num_hidden_layers", "n_layer"], d.layers)?;
    let vocab = cfg.size(&["vocab_size"], Some(d.vocab))?;
    let d_inner = inner_width(cfg, d.version, hidden)?;
    let ssm = Ssm {
        version: d.version,
        d_inner,
        d_state: cfg.size(&["state_size"], Some(d.state))?,
        d_conv: cfg.size(&["conv_kernel"], Some(4))?,
        dt_rank: match d.version {
            SsmVersion::Mamba2 => 0,
            _ => time_step_rank(cfg, hidden)?,
        },
        heads: match d.version {
            SsmVersion::Mamba2 => mamba2_heads(cfg, d_inner)?,
            _ => 0,
        },
        groups: match d.version {
            SsmVersion::Mamba2 => cfg.size(&["n_groups"], Some(8))?,
            _ => 0,
        },
        conv_bias: cfg.boolean("use_conv_bias", true)?,
        proj_bias: cfg.boolean("use_bias", false)?,
        state_fp32: false,
        chunk: match d.version {
            SsmVersion::Mamba2 => cfg.size(&["chunk_size"], Some(256))?,
            _ => 0,
        },
    };
    if ssm.version == SsmVersion::Mamba2 && !ssm.d_inner.is_multiple_of(ssm.groups) {
        return Err(cfg.err(
            "n_groups",
            format!("{} does not divide intermediate_size {d_inner}", ssm.groups),
        ));
    }
    let norm = Norm::rms(hidden);
    for _ in 0..layers {
        spec.decoder.layers.push(Layer::new(
            Attention::new(AttentionKind::StateSpace(ssm), ProjBias::all(false)),
            Mlp::None,
            vec![(NormSlot::PreAttention, norm)],
        ));
    }
    spec.decoder.final_norm = Some(norm);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::None;
    spec.head = Head::LanguageModel {
        tied: cfg.boolean("tie_word_embeddings", d.tied)?,
        bias: false,
    };
    Ok(spec)
}

/// The mixer's inner width. `MambaConfig` / `FalconMambaConfig.__post_init__` set
/// `intermediate_size = expand · hidden_size`, but a config's own `intermediate_size` is
/// applied after it and wins (falcon-mamba-7b: `expand` 16, `intermediate_size` 8192, and its
/// checkpoint's `in_proj` is `[16384, 4096]`); `Mamba2Mixer` always uses `expand ·
/// hidden_size`.
fn inner_width(cfg: &Cfg, version: SsmVersion, hidden: u64) -> Result<u64> {
    if version != SsmVersion::Mamba2 {
        if let Some(i) = cfg.uint("intermediate_size")? {
            return cfg.size(&["intermediate_size"], Some(i));
        }
    }
    let expand = cfg.size(&["expand"], Some(2))?;
    hidden
        .checked_mul(expand)
        .filter(|v| *v <= MAX_DIM)
        .ok_or_else(|| cfg.err("expand", "expand · hidden_size is too large"))
}

/// `time_step_rank`: an integer, or "auto" (the default) for `math.ceil(hidden_size / 16)`
/// (`configuration_mamba.py`).
fn time_step_rank(cfg: &Cfg, hidden: u64) -> Result<u64> {
    match cfg.obj.get("time_step_rank") {
        None | Some(Value::Null) => Ok(hidden.div_ceil(16)),
        Some(Value::String(s)) if s == "auto" => Ok(hidden.div_ceil(16)),
        Some(_) => cfg.size(&["time_step_rank"], None),
    }
}

/// Mamba2's heads: `num_heads` (default 128) of `head_dim` (default 64), whose product must be
/// `intermediate_size` (the mixer reshapes its inner width into heads).
fn mamba2_heads(cfg: &Cfg, d_inner: u64) -> Result<u64> {
    let heads = cfg.size(&["num_heads"], Some(128))?;
    let head_dim = cfg.size(&["head_dim"], Some(64))?;
    if heads.checked_mul(head_dim) != Some(d_inner) {
        return Err(cfg.err(
            "num_heads",
            format!(
                "{heads} heads × head_dim {head_dim} is not intermediate_size {d_inner} \
                 (expand · hidden_size)"
            ),
        ));
    }
    Ok(heads)
}
