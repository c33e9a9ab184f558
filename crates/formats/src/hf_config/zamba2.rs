//! Zamba2 (`zamba2`), read as transformers 5.24 `configuration_zamba2.py` defines it and
//! `modeling_zamba2.py` builds it: a stack of Mamba2 layers (`Zamba2MambaDecoderLayer`), some
//! of them "hybrid" (`Zamba2HybridLayer`): before their Mamba2 layer they apply one of
//! `num_mem_blocks` shared transformer blocks to `[hidden, original embeddings]` and add its
//! output, through a per-layer `linear`, to the Mamba layer's input
//! (`vramscope_core::model::SharedBlock`).

use super::decoder_tail::finish;
use super::fields::Cfg;
use super::{dense, empty_spec, plain_attention, MAX_DIM};
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::*;

/// `Zamba2Config.__post_init__`'s `layers_block_type` when the config gives none: 54 layers,
/// hybrid at 6, 12, ..., 42, 47 and 51.
fn default_pattern() -> Vec<bool> {
    let mut p = vec![false];
    for _ in 0..7 {
        p.extend([false; 5]);
        p.push(true);
    }
    p.extend([false; 4]);
    p.push(true);
    p.extend([false; 3]);
    p.push(true);
    p.extend([false; 2]);
    p
}

/// Per layer, whether it is hybrid: `layers_block_type` (alias `layer_types`), its legacy
/// `"mamba"` read as `"linear_attention"` (`remap_legacy_layer_types`). Transformers builds one
/// layer per entry (`Zamba2Model.get_layers`), whatever `num_hidden_layers` says; a config
/// whose two disagree is refused rather than guessed.
fn hybrid_pattern(cfg: &Cfg) -> Result<Vec<bool>> {
    let key = ["layers_block_type", "layer_types"]
        .into_iter()
        .find(|k| cfg.obj.get(*k).is_some_and(|v| !v.is_null()));
    let pattern = match key {
        None => default_pattern(),
        Some(k) => {
            let Some(items) = cfg.obj[k].as_array() else {
                return Err(cfg.err(k, "must be a list"));
            };
            if items.len() as u64 > super::MAX_LAYERS {
                return Err(cfg.err(k, "lists more layers than vramscope accepts"));
            }
            items
                .iter()
                .map(|v| match v.as_str() {
                    Some("hybrid") => Ok(true),
                    Some("mamba" | "linear_attention") => Ok(false),
                    _ => Err(cfg.err(
                        k,
                        format!("entries must be \"hybrid\" or \"mamba\" (got {v})"),
                    )),
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    if let Some(n) = cfg.uint("num_hidden_layers")? {
        if n != pattern.len() as u64 {
            return Err(cfg.err(
                "num_hidden_layers",
                format!(
                    "is {n} but layers_block_type lists {} layers (transformers builds one per \
                     entry)",
                    pattern.len()
                ),
            ));
        }
    }
    Ok(pattern)
}

/// A Zamba2 config → spec (`Zamba2Config` defaults; shapes of `Zamba2MambaMixer`,
/// `Zamba2Attention`, `Zamba2MLP`; names of the published checkpoints). The class's
/// `__post_init__` derives `intermediate_size = 4 · hidden` when null, `attention_head_dim =
/// 2 · hidden // heads` (always: a config's own value is overwritten), `mamba_headdim =
/// mamba_expand · hidden // n_mamba_heads`, `num_key_value_heads = heads` when null. The
/// Mamba2 `conv1d` always has a bias (`bias=True`; `use_conv_bias` is not read), `in_proj` and
/// `out_proj` take `add_bias_linear`. Every shared MLP has its adapters (transformers 5.24
/// reads no `use_shared_mlp_adapter`). The hybrid layers share their blocks only when
/// `tie_word_embeddings` is true ([`SharedBlock`]).
pub(crate) fn zamba2(cfg: &Cfg) -> Result<ModelSpec> {
    let mut spec = empty_spec("zamba2", "Zamba2ForCausalLM", Naming::Zamba2);
    let hidden = cfg.size(&["hidden_size"], Some(2560))?;
    let pattern = hybrid_pattern(cfg)?;
    let heads = cfg.size(&["num_attention_heads"], Some(32))?;
    let kv_heads = cfg.kv_heads(&["num_key_value_heads"], heads, heads)?;
    let two_h = hidden
        .checked_mul(2)
        .filter(|v| *v <= MAX_DIM)
        .ok_or_else(|| cfg.err("hidden_size", "is too large"))?;
    if !two_h.is_multiple_of(heads) {
        // `head_dim = 2h // heads`: the q/k/v adapters (2h wide) would not add to q (heads ·
        // head_dim wide) in `Zamba2Attention.forward`.
        return Err(cfg.err(
            "num_attention_heads",
            format!("{heads} does not divide 2 · hidden_size = {two_h}"),
        ));
    }
    stated_as_derived(
        cfg,
        "attention_head_dim",
        two_h / heads,
        "2 · hidden_size // num_attention_heads",
    )?;
    stated_as_derived(cfg, "attention_hidden_size", two_h, "2 · hidden_size")?;
    let ffn = match cfg.obj.get("intermediate_size") {
        None | Some(Value::Null) => hidden.checked_mul(4).filter(|v| *v <= MAX_DIM),
        _ => Some(cfg.size(&["intermediate_size"], None)?),
    }
    .ok_or_else(|| cfg.err("intermediate_size", "4 · hidden_size is too large"))?;
    let bias = cfg.boolean("add_bias_linear", false)?;
    let act = cfg.string("hidden_act").unwrap_or("gelu").to_string();
    let mut attention = plain_attention(heads, kv_heads, two_h / heads, ProjBias::all(false));
    if !cfg.boolean("use_mem_rope", false)? {
        // `Zamba2Attention.forward` applies rotary only with `use_mem_rope`.
        attention.nope = true;
    }
    let mem_blocks = cfg.size(&["num_mem_blocks"], Some(1))?;
    let shared = SharedBlock {
        block: 0,
        visit: 0,
        owner: 0,
        mem_blocks,
        applications: pattern.iter().filter(|h| **h).count() as u64,
        attention,
        mlp: dense(ffn, true, bias, &act),
        adapter_rank: cfg.size(&["adapter_rank"], Some(128))?,
        attention_adapter: cfg.boolean("use_shared_attention_adapter", false)?,
    };
    let mixer = Attention {
        kind: AttentionKind::StateSpace(zamba2_mixer(cfg, hidden, bias)?),
        ..plain_attention(0, 0, 0, ProjBias::all(false))
    };
    let norm = Norm::rms(hidden);
    // `Zamba2Config.tie_word_embeddings` defaults to true; it also decides whether the hybrid
    // layers share their blocks (`get_expanded_tied_weights_keys`: no tie at all when false).
    let tied = cfg.boolean("tie_word_embeddings", true)?;
    let mut owners: Vec<u64> = Vec::new();
    let mut visit = 0u64;
    for (i, hybrid) in pattern.into_iter().enumerate() {
        let mut layer = Layer::new(
            mixer.clone(),
            Mlp::None,
            vec![(NormSlot::PreAttention, norm)],
        );
        if hybrid {
            let block = visit % mem_blocks;
            if owners.len() < mem_blocks as usize {
                owners.push(i as u64);
            }
            layer.shared_block = Some(Box::new(SharedBlock {
                block,
                visit,
                owner: if tied {
                    owners[block as usize]
                } else {
                    i as u64
                },
                ..shared.clone()
            }));
            visit += 1;
        }
        spec.decoder.layers.push(layer);
    }
    spec.embedding.positions = Positions::Rotary {
        theta: cfg.rope_theta(),
    };
    finish(cfg, &mut spec, hidden, (32000, 4096), norm)?;
    if cfg.boolean("use_long_context", false)? {
        // `__post_init__` sets 16384 with `use_long_context`, whatever the config says.
        spec.max_position_embeddings = Some(16384);
    }
    spec.head = Head::LanguageModel { tied, bias: false };
    Ok(spec)
}

/// `Zamba2Config.__post_init__` overwrites `key` with what it derives (`derived`, by `rule`)
/// whatever the config says; a config stating another value meant another shape (Zyphra's
/// pre-transformers configs name `mamba_headdim` 64 with no `n_mamba_heads`, whose default 8
/// would make it 7168 // 8 = 896 for the 7B), so it is refused rather than counted as
/// transformers would silently build it.
fn stated_as_derived(cfg: &Cfg, key: &str, derived: u64, rule: &str) -> Result<()> {
    match cfg.uint(key)? {
        Some(v) if v != derived => Err(cfg.err(
            key,
            format!(
                "is {v} but transformers derives {derived} ({rule}) and builds that; the config \
                 is not Zamba2Config's (state the fields it reads)"
            ),
        )),
        _ => Ok(()),
    }
}

/// `Zamba2MambaMixer`'s shapes: inner width `int(mamba_expand · hidden_size)`,
/// `n_mamba_heads` heads (each `mamba_headdim = inner // heads` wide, which must tile the
/// inner width for the scan's reshapes), `mamba_ngroups` groups of B and C of `mamba_d_state`.
fn zamba2_mixer(cfg: &Cfg, hidden: u64, bias: bool) -> Result<Ssm> {
    let d_inner = cfg.mamba_expanded(hidden)?;
    let heads = cfg.size(&["n_mamba_heads"], Some(8))?;
    if !d_inner.is_multiple_of(heads) {
        return Err(cfg.err(
            "n_mamba_heads",
            format!("{heads} does not divide the Mamba inner width {d_inner}"),
        ));
    }
    let groups = super::mamba2_heads::head_groups(cfg, ("mamba_ngroups", "n_mamba_heads"), heads)?;
    stated_as_derived(
        cfg,
        "mamba_headdim",
        d_inner / heads,
        "mamba_expand · hidden_size // n_mamba_heads",
    )?;
    let d_state = cfg.size(&["mamba_d_state"], Some(64))?;
    let base = super::mamba2_heads::mamba2_ssm(cfg, d_inner, d_state, heads, groups)?;
    Ok(Ssm {
        conv_bias: true,
        proj_bias: bias,
        // Generation runs the torch path (`cache` set: no fused training branch), whose
        // `mamba2_chunk_scan` returns the final state from `hidden_states.float()`;
        // `LinearAttentionLayer.lazy_initialization` allocates `zeros_like` of it: fp32.
        state_fp32: true,
        chunk: cfg.size(&["chunk_size"], Some(256))?,
        ..base
    })
}
