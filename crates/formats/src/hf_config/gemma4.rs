//! Gemma 4 (`gemma4`, `gemma4_text`), counted tensor by tensor as transformers 5.24 builds
//! `Gemma4ForCausalLM` (`models/gemma4/configuration_gemma4.py`, `Gemma4TextConfig`;
//! `models/gemma4/modeling_gemma4.py`, `Gemma4TextModel.__init__`,
//! `Gemma4TextDecoderLayer.__init__`, `Gemma4TextAttention.__init__`, `Gemma4TextMLP.__init__`,
//! `Gemma4TextRouter.__init__`, `Gemma4TextExperts.__init__`).
//!
//! [`text_spec`] describes the text model (`gemma4_text`) to the estimator: per-layer input
//! embeddings (`Embedding::per_layer_inputs`), layers that reuse another layer's keys and
//! values (`Attention::kv_shared`), global layers whose values are their keys
//! (`Attention::values_from_keys`), and the experts beside the dense MLP
//! (`Layer::experts_beside`). The conditional-generation model (`gemma4`) without an audio tower
//! is this text model plus the vision tower (`gemma4_vision.rs`); with an audio tower (counted
//! in `gemma4_towers.rs`) it is refused there in one line that gives its exact count, part by part.

use super::fields::Cfg;
use super::gemma_shared::{linear, norm};
use super::{dense, gemma_shared};
use crate::error::Result;
use serde_json::{Map, Value};
use vramscope_core::model::*;

pub use super::gemma_shared::{CacheLayers, NamedTensor};

/// The text config's geometry, with `Gemma4TextConfig`'s class defaults.
struct Geometry {
    vocab: u64,
    hidden: u64,
    ffn: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    /// `global_head_dim` (popped in `__post_init__`, default 512): the head size of
    /// `full_attention` layers (`per_layer_config` overrides `head_dim` there).
    global_head_dim: u64,
    /// `num_global_key_value_heads`: the full layers' kv heads, only when `attention_k_eq_v`.
    global_kv_heads: Option<u64>,
    bias: bool,
    k_eq_v: bool,
    kv_shared: u64,
    double_wide: bool,
    ple: u64,
    ple_vocab: u64,
    /// `(num_experts, moe_intermediate_size, top_k_experts)` when `enable_moe_block`.
    moe: Option<(u64, u64, u64)>,
    tied: bool,
    sliding_window: u64,
    full: Vec<bool>,
}

/// `layer_types` (`full_attention` / `sliding_attention`), else `Gemma4TextConfig`'s default
/// pattern `(i + 1) % 6 == 0` → full; the last layer is forced to full either way
/// (`Gemma4TextConfig.__post_init__`).
fn full_layers(cfg: &Cfg, layers: u64) -> Result<Vec<bool>> {
    let mut full = gemma_shared::layer_types(cfg, layers, 6)?;
    if let Some(last) = full.last_mut() {
        *last = true;
    }
    Ok(full)
}

/// `enable_moe_block` → `(num_experts, moe_intermediate_size, top_k_experts)`; all are
/// required then (`Gemma4TextExperts` and `Gemma4TextRouter` build from them; they default to
/// `None`).
fn moe(cfg: &Cfg) -> Result<Option<(u64, u64, u64)>> {
    if !cfg.boolean("enable_moe_block", false)? {
        return Ok(None);
    }
    let experts = cfg.size(&["num_experts"], None)?;
    let width = cfg.size(&["moe_intermediate_size"], None)?;
    let top_k = cfg.top_k("top_k_experts", None, experts)?;
    Ok(Some((experts, width, top_k)))
}

fn geometry(cfg: &Cfg) -> Result<Geometry> {
    let layers = cfg.layer_count(&["num_hidden_layers"], 30)?;
    let kv_shared = cfg.uint("num_kv_shared_layers")?.unwrap_or(0);
    if kv_shared > layers {
        return Err(cfg.err(
            "num_kv_shared_layers",
            format!("{kv_shared} is more than num_hidden_layers {layers}"),
        ));
    }
    let full = full_layers(cfg, layers)?;
    if kv_shared > 0 && kv_shared < layers {
        // `kv_sharing_modes`: every layer type must have a producer before the shared layers.
        let first = (layers - kv_shared) as usize;
        if !gemma_shared::every_type_has_a_producer(&full, first) {
            return Err(cfg.err(
                "num_kv_shared_layers",
                "leaves a layer type with no layer producing its cache (transformers raises)",
            ));
        }
    }
    let k_eq_v = cfg.boolean("attention_k_eq_v", false)?;
    Ok(Geometry {
        vocab: cfg.size(&["vocab_size"], Some(262_144))?,
        hidden: cfg.size(&["hidden_size"], Some(2304))?,
        ffn: cfg.size(&["intermediate_size"], Some(9216))?,
        layers,
        heads: cfg.size(&["num_attention_heads"], Some(8))?,
        kv_heads: cfg.size(&["num_key_value_heads"], Some(4))?,
        head_dim: cfg.size(&["head_dim"], Some(256))?,
        global_head_dim: cfg.size(&["global_head_dim"], Some(512))?,
        global_kv_heads: if k_eq_v {
            cfg.uint("num_global_key_value_heads")?
        } else {
            None
        },
        bias: cfg.boolean("attention_bias", false)?,
        k_eq_v,
        kv_shared,
        double_wide: cfg.boolean("use_double_wide_mlp", false)?,
        // Absent: the class default 256; null or 0: no per-layer inputs (`if
        // self.hidden_size_per_layer_input:` in `Gemma4TextModel.__init__`).
        ple: match cfg.obj.get("hidden_size_per_layer_input") {
            None => 256,
            Some(_) => cfg.uint("hidden_size_per_layer_input")?.unwrap_or(0),
        },
        ple_vocab: cfg.size(&["vocab_size_per_layer_input"], Some(262_144))?,
        moe: moe(cfg)?,
        tied: cfg.boolean("tie_word_embeddings", true)?,
        // `Gemma4TextConfig.__post_init__`: all-bidirectional attention halves the window
        // (`sliding_window // 2 + 1`).
        sliding_window: match cfg.string("use_bidirectional_attention") {
            Some("all") => cfg.size(&["sliding_window"], Some(512))? / 2 + 1,
            _ => cfg.size(&["sliding_window"], Some(512))?,
        },
        full,
    })
}

/// `Gemma4TextAttention.__init__`: q/o always with `q_norm`; a layer past
/// `num_hidden_layers - num_kv_shared_layers` reuses another layer's keys and values and has
/// no k/v projection or norm; `v_norm` has no weight (`with_scale=False`); a full layer under
/// `attention_k_eq_v` has no `v_proj`.
fn attention(out: &mut Vec<NamedTensor>, g: &Geometry, i: usize, p: &str) {
    let full = g.full[i];
    let hd = if full { g.global_head_dim } else { g.head_dim };
    let kv = match g.global_kv_heads {
        Some(n) if full => n,
        _ => g.kv_heads,
    };
    let shared = kv_shared(g, i);
    linear(out, &format!("{p}.q_proj"), g.hidden, g.heads * hd, g.bias);
    norm(out, &format!("{p}.q_norm"), hd);
    if !shared {
        norm(out, &format!("{p}.k_norm"), hd);
        linear(out, &format!("{p}.k_proj"), g.hidden, kv * hd, g.bias);
        if !(g.k_eq_v && full) {
            linear(out, &format!("{p}.v_proj"), g.hidden, kv * hd, g.bias);
        }
    }
    linear(out, &format!("{p}.o_proj"), g.heads * hd, g.hidden, g.bias);
}

/// One decoder layer (`Gemma4TextDecoderLayer.__init__`): attention, the dense MLP (twice as
/// wide on a kv-shared layer under `use_double_wide_mlp`, `Gemma4TextMLP`), four norms, the
/// per-layer-input gate and projection when `hidden_size_per_layer_input` is non-zero, and,
/// with `enable_moe_block`, a router (`proj`, `scale`, `per_expert_scale`), packed experts and
/// three more norms. `layer_scalar` is a buffer, not a parameter.
fn layer(out: &mut Vec<NamedTensor>, g: &Geometry, i: usize) {
    let p = format!("model.layers.{i}");
    attention(out, g, i, &format!("{p}.self_attn"));
    let shared = (i as u64) >= g.layers - g.kv_shared;
    let ffn = g.ffn * if g.double_wide && shared { 2 } else { 1 };
    linear(out, &format!("{p}.mlp.gate_proj"), g.hidden, ffn, false);
    linear(out, &format!("{p}.mlp.up_proj"), g.hidden, ffn, false);
    linear(out, &format!("{p}.mlp.down_proj"), ffn, g.hidden, false);
    for n in [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ] {
        norm(out, &format!("{p}.{n}"), g.hidden);
    }
    if g.ple > 0 {
        linear(
            out,
            &format!("{p}.per_layer_input_gate"),
            g.hidden,
            g.ple,
            false,
        );
        linear(
            out,
            &format!("{p}.per_layer_projection"),
            g.ple,
            g.hidden,
            false,
        );
        norm(out, &format!("{p}.post_per_layer_input_norm"), g.hidden);
    }
    if let Some((e, m, _)) = g.moe {
        linear(out, &format!("{p}.router.proj"), g.hidden, e, false);
        out.push((format!("{p}.router.scale"), vec![g.hidden]));
        out.push((format!("{p}.router.per_expert_scale"), vec![e]));
        out.push((
            format!("{p}.experts.gate_up_proj"),
            vec![e, 2 * m, g.hidden],
        ));
        out.push((format!("{p}.experts.down_proj"), vec![e, g.hidden, m]));
        for n in [
            "post_feedforward_layernorm_1",
            "post_feedforward_layernorm_2",
            "pre_feedforward_layernorm_2",
        ] {
            norm(out, &format!("{p}.{n}"), g.hidden);
        }
    }
}

/// Every parameter tensor of `Gemma4ForCausalLM` built from a `gemma4_text` config object
/// (`Gemma4TextModel.__init__`: `embed_tokens`, the layers, `norm`, and with
/// `hidden_size_per_layer_input` the packed `embed_tokens_per_layer`
/// `[vocab_size_per_layer_input, layers · per_layer]`, `per_layer_model_projection` and
/// `per_layer_projection_norm`; `Gemma4ForCausalLM`: `lm_head`, absent when tied, the default).
pub fn text_tensors(obj: &Map<String, Value>, origin: &str) -> Result<Vec<NamedTensor>> {
    let g = geometry(&Cfg { obj, origin })?;
    let mut out = Vec::new();
    out.push(("model.embed_tokens.weight".into(), vec![g.vocab, g.hidden]));
    if let Some(ple) = per_layer_inputs(&g) {
        gemma_shared::per_layer_inputs(&mut out, g.layers, ple, g.hidden);
    }
    for i in 0..g.full.len() {
        layer(&mut out, &g, i);
    }
    norm(&mut out, "model.norm", g.hidden);
    if !g.tied {
        out.push(("lm_head.weight".into(), vec![g.vocab, g.hidden]));
    }
    Ok(out)
}

/// The text model as the estimator reads it (`Gemma4ForCausalLM` from a `gemma4_text` config):
/// per layer the sandwich norms (`input_layernorm`, `post_attention_layernorm`,
/// `pre_feedforward_layernorm`, `post_feedforward_layernorm`, `Gemma4RMSNorm`), attention with
/// per-head q/k norms (`head_dim`, or `global_head_dim` on full layers), the sliding window on
/// sliding layers, `kv_shared` past `num_hidden_layers - num_kv_shared_layers`,
/// `values_from_keys` on full layers under `attention_k_eq_v`; the gated MLP (`Gemma4TextMLP`,
/// `hidden_activation`, twice as wide on a kv-shared layer under `use_double_wide_mlp`); the
/// experts beside it (`enable_moe_block`: `top_k_experts` of `num_experts`,
/// `moe_intermediate_size`); the per-layer inputs (`hidden_size_per_layer_input`,
/// `vocab_size_per_layer_input`); a tied head by default (`tie_word_embeddings` true) and
/// `final_logit_softcapping`. [`text_tensors`] lists the same tensors by name.
pub(crate) fn text_spec(cfg: &Cfg) -> Result<ModelSpec> {
    let g = geometry(cfg)?;
    let activation = gemma_shared::hidden_activation(cfg);
    let names = ("gemma4_text", "Gemma4ForCausalLM", Naming::Gemma4);
    let ple = per_layer_inputs(&g);
    let sizes = (g.vocab, g.hidden, 131_072);
    let mut spec = gemma_shared::text_spec_shell(cfg, names, sizes, ple, g.tied)?;
    for i in 0..g.full.len() {
        let mlp = Mlp::Dense(dense(layer_ffn(&g, i), true, false, &activation));
        let mut layer = gemma_shared::sandwich_layer(text_attention(&g, i), mlp, g.hidden);
        layer.experts_beside = g.moe.map(|(experts, width, top_k)| MoeMlp {
            experts,
            top_k,
            expert: dense(width, true, false, &activation),
            shared: None,
            shared_gate: false,
            router_bias: false,
            input_jitter: 0,
            latent: None,
        });
        spec.decoder.layers.push(layer);
    }
    spec.softcapping.final_logits = cfg.float("final_logit_softcapping");
    Ok(spec)
}

/// The per-layer inputs, none when `hidden_size_per_layer_input` is 0 or null (`if
/// self.hidden_size_per_layer_input:` in `Gemma4TextModel.__init__`).
fn per_layer_inputs(g: &Geometry) -> Option<PerLayerInputs> {
    (g.ple > 0).then_some(PerLayerInputs {
        width: g.ple,
        vocab: g.ple_vocab,
    })
}

/// Whether layer `i` reuses another layer's keys and values ([`gemma_shared::is_kv_shared`]).
fn kv_shared(g: &Geometry, i: usize) -> bool {
    gemma_shared::is_kv_shared(g.layers, g.kv_shared, i)
}

/// `Gemma4TextMLP.__init__`: `intermediate_size`, doubled on a kv-shared layer under
/// `use_double_wide_mlp`.
fn layer_ffn(g: &Geometry, i: usize) -> u64 {
    g.ffn
        * if g.double_wide && kv_shared(g, i) {
            2
        } else {
            1
        }
}

/// `Gemma4TextAttention.__init__` for layer `i` (see [`attention`] for its tensors).
fn text_attention(g: &Geometry, i: usize) -> Attention {
    let full = g.full[i];
    let head_dim = if full { g.global_head_dim } else { g.head_dim };
    let kv_heads = match g.global_kv_heads {
        Some(n) if full => n,
        _ => g.kv_heads,
    };
    let kind = AttentionKind::Standard {
        heads: g.heads,
        kv_heads,
        head_dim,
    };
    Attention {
        qk_norm: Some(Norm::rms(head_dim)),
        sliding_window: (!full).then_some(g.sliding_window),
        kv_shared: kv_shared(g, i),
        values_from_keys: g.k_eq_v && full,
        ..Attention::new(kind, ProjBias::all(g.bias))
    }
}

/// The parameter count of [`text_tensors`].
pub fn text_params(obj: &Map<String, Value>, origin: &str) -> Result<u64> {
    gemma_shared::params(&text_tensors(obj, origin)?, origin)
}

/// The layers whose keys and values a `DynamicCache` holds ([`CacheLayers`]): the layers before
/// `num_hidden_layers - num_kv_shared_layers` (each consumer, `kv_sharing_modes == "reuse"`,
/// is a `DummyLayer`), a full one with `global_head_dim` heads (`num_global_key_value_heads`
/// of them under `attention_k_eq_v`), a sliding one with `num_key_value_heads` of `head_dim`.
/// Keys and values are separate tensors even when `attention_k_eq_v`
/// (`Gemma4TextAttention.forward` normalises the value copy with `v_norm`).
pub fn cache_layers(obj: &Map<String, Value>, origin: &str) -> Result<CacheLayers> {
    let g = geometry(&Cfg { obj, origin })?;
    let owners = &g.full[..(g.layers - g.kv_shared) as usize];
    let heads = |full| {
        if full {
            (g.global_kv_heads.unwrap_or(g.kv_heads), g.global_head_dim)
        } else {
            (g.kv_heads, g.head_dim)
        }
    };
    Ok(CacheLayers::new(origin, g.sliding_window, owners, heads))
}
