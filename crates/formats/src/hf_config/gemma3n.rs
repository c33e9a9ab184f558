//! Gemma 3n (`gemma3n`, `gemma3n_text`), counted tensor by tensor as transformers 5.24 builds
//! `Gemma3nForCausalLM` (`models/gemma3n/configuration_gemma3n.py`, `Gemma3nTextConfig`;
//! `models/gemma3n/modeling_gemma3n.py`, `Gemma3nTextModel.__init__`,
//! `Gemma3nTextDecoderLayer.__init__`, `Gemma3nTextAttention.__init__`, `Gemma3nTextMLP`,
//! `Gemma3nTextAltUp`, `Gemma3nTextLaurelBlock`).
//!
//! [`text_spec`] describes the text model (`gemma3n_text`) to the estimator: Gemma 4's
//! per-layer inputs and kv-shared layers, plus what Gemma 3n has alone ([`Gemma3nParts`]): the
//! AltUp streams, the LAuReL residual, the Gaussian top-k on the first layers' MLP gate, and an
//! MLP width per layer (MatFormer). [`as_conditional`] adds what the conditional-generation
//! model (`gemma3n`) holds around it: the two multimodal embedders and the vision and audio
//! towers, counted exactly, which a text-only step holds but never runs.

use super::fields::Cfg;
use super::gemma_shared::{linear, norm};
use super::{dense, gemma_shared};
use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use vramscope_core::model::*;

pub use super::gemma_shared::{CacheLayers, NamedTensor};

/// The text config's geometry, with `Gemma3nTextConfig`'s class defaults.
struct Geometry {
    vocab: u64,
    hidden: u64,
    /// `intermediate_size` per layer (one value for all, or a list of `num_hidden_layers`).
    ffn: Vec<u64>,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    bias: bool,
    kv_shared: u64,
    ple: u64,
    ple_vocab: u64,
    altup: u64,
    laurel_rank: u64,
    correct_scale: bool,
    /// `activation_sparsity_pattern[i] > 0`: layer `i`'s MLP gate goes through `_gaussian_topk`.
    sparse: Vec<bool>,
    tied: bool,
    sliding_window: u64,
    full: Vec<bool>,
}

/// `layer_types` (`full_attention` / `sliding_attention`), else `Gemma3nTextConfig`'s default
/// pattern `(i + 1) % 5 == 0` → full (`Gemma3nTextConfig.__post_init__`; unlike Gemma 4, the
/// last layer is not forced to full).
fn full_layers(cfg: &Cfg, layers: u64) -> Result<Vec<bool>> {
    gemma_shared::layer_types(cfg, layers, 5)
}

/// `intermediate_size`: one width for every layer, or exactly one per layer
/// (`Gemma3nTextConfig.__post_init__` raises otherwise).
fn widths(cfg: &Cfg, layers: u64) -> Result<Vec<u64>> {
    match cfg.obj.get("intermediate_size") {
        Some(Value::Array(items)) => {
            cfg.per_layer("intermediate_size", items, layers, |v| match v.as_u64() {
                Some(n) if (1..=super::MAX_DIM).contains(&n) => Ok(n),
                _ => Err(cfg.err(
                    "intermediate_size",
                    format!("entries must be positive widths (got {v})"),
                )),
            })
        }
        _ => Ok(vec![
            cfg.size(&["intermediate_size"], Some(16_384))?;
            layers as usize
        ]),
    }
}

/// `activation_sparsity_pattern`: one sparsity in [0, 1) per layer; absent or null, the first
/// 10 layers at 0.95 when there are more than 10 layers, else none
/// (`Gemma3nTextConfig.__post_init__`).
fn sparsity(cfg: &Cfg, layers: u64) -> Result<Vec<bool>> {
    let key = "activation_sparsity_pattern";
    match cfg.obj.get(key) {
        None | Some(Value::Null) => {
            let sparse = if layers > 10 { 10 } else { 0 };
            Ok((0..layers).map(|i| i < sparse).collect())
        }
        Some(Value::Array(items)) if items.len() as u64 == layers => items
            .iter()
            .map(|v| match v.as_f64() {
                Some(p) if (0.0..1.0).contains(&p) => Ok(p > 0.0),
                _ => Err(cfg.err(key, format!("entries must be in [0, 1) (got {v})"))),
            })
            .collect(),
        Some(other) => Err(cfg.err(
            key,
            format!("must be a list of {layers} sparsities (got {other})"),
        )),
    }
}

/// `num_kv_shared_layers` (default 15), checked as `Gemma3nTextConfig.kv_sharing_modes` does:
/// the layers before the shared ones must include every layer type.
fn kv_shared(cfg: &Cfg, full: &[bool]) -> Result<u64> {
    let layers = full.len() as u64;
    let shared = cfg.uint("num_kv_shared_layers")?.unwrap_or(15);
    if shared == 0 {
        return Ok(0);
    }
    let first = layers.saturating_sub(shared) as usize;
    if shared >= layers || !gemma_shared::every_type_has_a_producer(full, first) {
        return Err(cfg.err(
            "num_kv_shared_layers",
            format!(
                "{shared} of {layers} layers leaves a layer type with no layer producing its \
                 cache (transformers raises)"
            ),
        ));
    }
    Ok(shared)
}

fn geometry(cfg: &Cfg) -> Result<Geometry> {
    let layers = cfg.layer_count(&["num_hidden_layers"], 35)?;
    let full = full_layers(cfg, layers)?;
    let hidden = cfg.size(&["hidden_size"], Some(2048))?;
    let heads = cfg.size(&["num_attention_heads"], Some(8))?;
    if hidden % heads != 0 {
        return Err(cfg.err(
            "hidden_size",
            format!("{hidden} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    let altup = cfg.size(&["altup_num_inputs"], Some(4))?;
    if altup.checked_mul(altup).is_none_or(|n| n > super::MAX_DIM) {
        return Err(cfg.err("altup_num_inputs", format!("{altup} is implausibly large")));
    }
    let (kv_heads, head_dim) = (
        cfg.size(&["num_key_value_heads"], Some(2))?,
        cfg.size(&["head_dim"], Some(256))?,
    );
    if heads
        .max(kv_heads)
        .checked_mul(head_dim)
        .is_none_or(|n| n > super::MAX_DIM)
    {
        return Err(cfg.err(
            "head_dim",
            format!("{head_dim} · {heads} heads is too large"),
        ));
    }
    let active = cfg.uint("altup_active_idx")?.unwrap_or(0);
    if active >= altup {
        return Err(cfg.err(
            "altup_active_idx",
            format!("{active} is not below altup_num_inputs {altup}"),
        ));
    }
    Ok(Geometry {
        vocab: cfg.size(&["vocab_size"], Some(262_400))?,
        hidden,
        ffn: widths(cfg, layers)?,
        layers,
        heads,
        kv_heads,
        head_dim,
        bias: cfg.boolean("attention_bias", false)?,
        kv_shared: kv_shared(cfg, &full)?,
        ple: cfg.size(&["hidden_size_per_layer_input"], Some(256))?,
        ple_vocab: cfg.size(&["vocab_size_per_layer_input"], Some(262_144))?,
        altup,
        laurel_rank: cfg.size(&["laurel_rank"], Some(64))?,
        correct_scale: cfg.boolean("altup_correct_scale", true)?,
        sparse: sparsity(cfg, layers)?,
        tied: cfg.boolean("tie_word_embeddings", true)?,
        sliding_window: cfg.size(&["sliding_window"], Some(512))?,
        full,
    })
}

/// `Gemma3nTextAttention.__init__`: q/o always with `q_norm`; a layer past
/// `num_hidden_layers - num_kv_shared_layers` reuses another layer's keys and values and has
/// no k/v projection or norm; `v_norm` has no weight (`with_scale=False`).
fn attention(out: &mut Vec<NamedTensor>, g: &Geometry, i: usize, p: &str) {
    let (hd, q, kv) = (g.head_dim, g.heads * g.head_dim, g.kv_heads * g.head_dim);
    linear(out, &format!("{p}.q_proj"), g.hidden, q, g.bias);
    norm(out, &format!("{p}.q_norm"), hd);
    if !is_kv_shared(g, i) {
        linear(out, &format!("{p}.k_proj"), g.hidden, kv, g.bias);
        linear(out, &format!("{p}.v_proj"), g.hidden, kv, g.bias);
        norm(out, &format!("{p}.k_norm"), hd);
    }
    linear(out, &format!("{p}.o_proj"), q, g.hidden, g.bias);
}

/// One decoder layer (`Gemma3nTextDecoderLayer.__init__`): attention, the MLP of this layer's
/// width (`Gemma3nTextMLP`), four norms, AltUp (`correct_output_scale [hidden]`,
/// `correction_coefs [n, n]`, `prediction_coefs [n², n]`, `modality_router [n, hidden]`,
/// `router_norm`), LAuReL (`linear_left [rank, hidden]`, `linear_right [hidden, rank]`,
/// `post_laurel_norm`), and the per-layer-input gate, projection and norm.
fn layer(out: &mut Vec<NamedTensor>, g: &Geometry, i: usize) {
    let (p, h, n) = (format!("model.layers.{i}"), g.hidden, g.altup);
    attention(out, g, i, &format!("{p}.self_attn"));
    let ffn = g.ffn[i];
    linear(out, &format!("{p}.mlp.gate_proj"), h, ffn, false);
    linear(out, &format!("{p}.mlp.up_proj"), h, ffn, false);
    linear(out, &format!("{p}.mlp.down_proj"), ffn, h, false);
    for name in [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ] {
        norm(out, &format!("{p}.{name}"), h);
    }
    out.push((format!("{p}.altup.correct_output_scale"), vec![h]));
    linear(out, &format!("{p}.altup.correction_coefs"), n, n, false);
    linear(out, &format!("{p}.altup.prediction_coefs"), n, n * n, false);
    linear(out, &format!("{p}.altup.modality_router"), h, n, false);
    norm(out, &format!("{p}.altup.router_norm"), h);
    linear(
        out,
        &format!("{p}.laurel.linear_left"),
        h,
        g.laurel_rank,
        false,
    );
    linear(
        out,
        &format!("{p}.laurel.linear_right"),
        g.laurel_rank,
        h,
        false,
    );
    norm(out, &format!("{p}.laurel.post_laurel_norm"), h);
    linear(out, &format!("{p}.per_layer_input_gate"), h, g.ple, false);
    linear(out, &format!("{p}.per_layer_projection"), g.ple, h, false);
    norm(out, &format!("{p}.post_per_layer_input_norm"), h);
}

/// Every parameter tensor of `Gemma3nForCausalLM` built from a `gemma3n_text` config object
/// (`Gemma3nTextModel.__init__`: `embed_tokens`, the layers, `norm`, the packed
/// `embed_tokens_per_layer [vocab_size_per_layer_input, layers · per_layer]`,
/// `per_layer_model_projection`, `per_layer_projection_norm`, and `altup_num_inputs - 1`
/// `altup_projections` and `altup_unembed_projections` `[hidden, hidden]`;
/// `Gemma3nForCausalLM`: `lm_head`, absent when tied, the default).
pub fn text_tensors(obj: &Map<String, Value>, origin: &str) -> Result<Vec<NamedTensor>> {
    let g = geometry(&Cfg { obj, origin })?;
    let mut out = Vec::new();
    let h = g.hidden;
    out.push(("model.embed_tokens.weight".into(), vec![g.vocab, h]));
    for i in 0..g.full.len() {
        layer(&mut out, &g, i);
    }
    norm(&mut out, "model.norm", h);
    gemma_shared::per_layer_inputs(&mut out, g.layers, per_layer_inputs(&g), h);
    for list in ["altup_projections", "altup_unembed_projections"] {
        for j in 0..g.altup - 1 {
            linear(&mut out, &format!("model.{list}.{j}"), h, h, false);
        }
    }
    if !g.tied {
        out.push(("lm_head.weight".into(), vec![g.vocab, h]));
    }
    Ok(out)
}

/// The parameter count of [`text_tensors`].
pub fn text_params(obj: &Map<String, Value>, origin: &str) -> Result<u64> {
    gemma_shared::params(&text_tensors(obj, origin)?, origin)
}

/// The per-layer inputs (`hidden_size_per_layer_input` wide, `vocab_size_per_layer_input`
/// rows; always present in Gemma 3n).
fn per_layer_inputs(g: &Geometry) -> PerLayerInputs {
    PerLayerInputs {
        width: g.ple,
        vocab: g.ple_vocab,
    }
}

/// Whether layer `i` reuses another layer's keys and values ([`gemma_shared::is_kv_shared`]).
fn is_kv_shared(g: &Geometry, i: usize) -> bool {
    gemma_shared::is_kv_shared(g.layers, g.kv_shared, i)
}

/// `Gemma3nTextAttention.__init__` for layer `i` (see [`attention`] for its tensors): per-head
/// q/k norms over `head_dim`, the sliding window on sliding layers.
fn text_attention(g: &Geometry, i: usize) -> Attention {
    let kind = AttentionKind::Standard {
        heads: g.heads,
        kv_heads: g.kv_heads,
        head_dim: g.head_dim,
    };
    Attention {
        qk_norm: Some(Norm::rms(g.head_dim)),
        sliding_window: (!g.full[i]).then_some(g.sliding_window),
        kv_shared: is_kv_shared(g, i),
        ..Attention::new(kind, ProjBias::all(g.bias))
    }
}

/// The text model as the estimator reads it (`Gemma3nForCausalLM` from a `gemma3n_text`
/// config): per layer the sandwich norms (`Gemma3nRMSNorm`), attention with per-head q/k norms,
/// the sliding window on sliding layers, `kv_shared` past `num_hidden_layers -
/// num_kv_shared_layers`; the gated MLP of the layer's own width (`hidden_activation`); the
/// per-layer inputs; AltUp, LAuReL and the sparse gates ([`Gemma3nParts`]); a tied head by
/// default and `final_logit_softcapping` (30). [`text_tensors`] lists the same tensors by name.
pub(crate) fn text_spec(cfg: &Cfg) -> Result<ModelSpec> {
    let g = geometry(cfg)?;
    let activation = gemma_shared::hidden_activation(cfg);
    let names = ("gemma3n_text", "Gemma3nForCausalLM", Naming::Gemma3n);
    let sizes = (g.vocab, g.hidden, 32_768);
    let mut spec =
        gemma_shared::text_spec_shell(cfg, names, sizes, Some(per_layer_inputs(&g)), g.tied)?;
    for i in 0..g.full.len() {
        let mlp = DenseMlp {
            gaussian_topk: g.sparse[i],
            ..dense(g.ffn[i], true, false, &activation)
        };
        let attention = text_attention(&g, i);
        let layer = gemma_shared::sandwich_layer(attention, Mlp::Dense(mlp), g.hidden);
        spec.decoder.layers.push(layer);
    }
    spec.gemma3n = Some(Gemma3nParts {
        altup_inputs: g.altup,
        laurel_rank: g.laurel_rank,
        correct_scale: g.correct_scale,
        embedders: None,
    });
    spec.softcapping.final_logits = match cfg.obj.get("final_logit_softcapping") {
        None => Some(30.0),
        Some(_) => cfg.float("final_logit_softcapping"),
    };
    Ok(spec)
}

/// The layers whose keys and values a `DynamicCache` holds ([`CacheLayers`]): the layers before
/// `num_hidden_layers - num_kv_shared_layers`, every one with `num_key_value_heads` heads of
/// `head_dim`.
pub fn cache_layers(obj: &Map<String, Value>, origin: &str) -> Result<CacheLayers> {
    let g = geometry(&Cfg { obj, origin })?;
    let owners = &g.full[..(g.layers - g.kv_shared) as usize];
    let heads = |_| (g.kv_heads, g.head_dim);
    Ok(CacheLayers::new(origin, g.sliding_window, owners, heads))
}

/// The conditional-generation model (`gemma3n`: `Gemma3nForConditionalGeneration`) around
/// the text model read from its `text_config`: the two multimodal embedders, which
/// `Gemma3nModel.forward` runs on every forward ([`MultimodalEmbedder`]), and the vision tower
/// (timm's `mobilenetv5_300m_enc`, `mobilenetv5.rs`) and audio tower (`gemma3n_audio.rs`) as
/// [`ModelSpec::idle_tensors`]: resident, never run by a text-only step; images are refused
/// by the estimator (MobileNetV5's activations are not modelled). An absent `vision_config`
/// or `audio_config` takes its class defaults (`Gemma3nConfig.sub_configs_defaults`); the
/// head is tied by the top-level `tie_word_embeddings`.
pub(crate) fn as_conditional(
    spec: &mut ModelSpec,
    top: &Map<String, Value>,
    origin: &str,
) -> Result<()> {
    let empty = Map::new();
    let sub = |key: &str| Cfg {
        obj: top.get(key).and_then(Value::as_object).unwrap_or(&empty),
        origin,
    };
    let (vision, audio) = (sub("vision_config"), sub("audio_config"));
    let embedder = |c: &Cfg, width| -> Result<MultimodalEmbedder> {
        Ok(MultimodalEmbedder {
            width: c.size(&["hidden_size"], Some(width))?,
            vocab: c.size(&["vocab_size"], Some(128))?,
        })
    };
    if let Some(g) = spec.gemma3n.as_mut() {
        g.embedders = Some([embedder(&vision, 2048)?, embedder(&audio, 1536)?]);
    }
    spec.idle_tensors = super::mobilenetv5::vision_tower(&vision)?;
    spec.idle_tensors
        .extend(super::gemma3n_audio::audio_tensors(audio.obj, origin)?);
    spec.model_type = "gemma3n".into();
    spec.architecture = "Gemma3nForConditionalGeneration".into();
    Ok(())
}

/// The refusal of a `gemma3n` config without `text_config` (transformers would build
/// `Gemma3nTextConfig()`'s defaults, which the reader is not given).
pub(crate) fn needs_text_config(top: &Map<String, Value>, origin: &str) -> Result<()> {
    if top.get("text_config").is_some_and(Value::is_object) {
        return Ok(());
    }
    Err(FormatError::Unsupported {
        path: origin.to_string(),
        reason: "gemma3n config without text_config is not read".into(),
    })
}
