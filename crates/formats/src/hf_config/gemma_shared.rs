//! What Gemma 3n's and Gemma 4's text readers (`gemma3n.rs`, `gemma4.rs`) share, as
//! transformers 5.24 shares it between `configuration_gemma3n.py` and
//! `configuration_gemma4.py` (Gemma 4's modular file derives from Gemma 3n's): the
//! `layer_types` list, the kv-sharing split (`kv_sharing_modes`), the `DynamicCache` a
//! kv-sharing model holds (`cache_utils.py`), and the tensor-list plumbing of the counts.

use super::fields::Cfg;
use super::{empty_spec, field_err};
use crate::error::{FormatError, Result};
use serde_json::Value;
use vramscope_core::model::*;

/// One parameter tensor: its name as transformers names it and its shape.
pub type NamedTensor = (String, Vec<u64>);

/// `nn.Linear(inp, outp, bias)`: `weight [outp, inp]` and, with `bias`, `bias [outp]`.
pub(super) fn linear(out: &mut Vec<NamedTensor>, name: &str, inp: u64, outp: u64, bias: bool) {
    out.push((format!("{name}.weight"), vec![outp, inp]));
    if bias {
        out.push((format!("{name}.bias"), vec![outp]));
    }
}

/// A scaled RMS norm (`Gemma3nRMSNorm` / `Gemma4RMSNorm` with `with_scale=True`): `weight [dim]`.
pub(super) fn norm(out: &mut Vec<NamedTensor>, name: &str, dim: u64) {
    out.push((format!("{name}.weight"), vec![dim]));
}

/// The per-layer inputs' tensors (`Gemma3nTextModel.__init__`, `Gemma4TextModel.__init__`):
/// the packed `embed_tokens_per_layer [ple_vocab, layers · width]`,
/// `per_layer_model_projection [layers · width, hidden]` without bias and
/// `per_layer_projection_norm [width]`.
pub(super) fn per_layer_inputs(
    out: &mut Vec<NamedTensor>,
    layers: u64,
    ple: PerLayerInputs,
    hidden: u64,
) {
    let packed = layers * ple.width;
    let table = vec![ple.vocab, packed];
    out.push(("model.embed_tokens_per_layer.weight".into(), table));
    linear(
        out,
        "model.per_layer_model_projection",
        hidden,
        packed,
        false,
    );
    norm(out, "model.per_layer_projection_norm", ple.width);
}

/// The count of a tensor list; a size that overflows 64 bits is refused, naming `origin`.
pub fn params(tensors: &[NamedTensor], origin: &str) -> Result<u64> {
    tensors
        .iter()
        .try_fold(0u64, |sum, (_, s)| {
            let n = s.iter().try_fold(1u64, |a, b| a.checked_mul(*b))?;
            sum.checked_add(n)
        })
        .ok_or_else(|| FormatError::malformed(origin, "the parameter count overflows 64 bits"))
}

/// `hidden_activation`, `gelu_pytorch_tanh` by default (both text configs' class default).
pub(super) fn hidden_activation(cfg: &Cfg) -> String {
    let activation = cfg.string("hidden_activation");
    activation.unwrap_or("gelu_pytorch_tanh").to_string()
}

/// The parts of a text model's spec both readers fill alike (`Gemma3nTextModel.__init__`,
/// `Gemma4TextModel.__init__`): `(model_type, architecture, naming)`; the vocabulary and hidden
/// size; `max_position_embeddings` (the class default `positions` when absent); rotary
/// positions (`Gemma3nRotaryEmbedding` / `Gemma4RotaryEmbedding`, theta per layer type); the
/// per-layer inputs; the final RMS norm; the head, tied unless `tie_word_embeddings` is false
/// (`tied`); `attention_dropout`. The layers and softcapping are the caller's.
pub(super) fn text_spec_shell(
    cfg: &Cfg,
    (model_type, arch, naming): (&str, &str, Naming),
    (vocab, hidden, positions): (u64, u64, u64),
    per_layer_inputs: Option<PerLayerInputs>,
    tied: bool,
) -> Result<ModelSpec> {
    let mut spec = empty_spec(model_type, arch, naming);
    spec.vocab_size = vocab;
    spec.hidden_size = hidden;
    spec.max_position_embeddings = Some(cfg.uint("max_position_embeddings")?.unwrap_or(positions));
    spec.embedding.dim = hidden;
    spec.embedding.positions = Positions::Rotary { theta: None };
    spec.embedding.per_layer_inputs = per_layer_inputs;
    spec.decoder.final_norm = Some(Norm::rms(hidden));
    spec.head = Head::LanguageModel { tied, bias: false };
    spec.dropout.attention = cfg.prob(&["attention_dropout"], 0.0)?;
    Ok(spec)
}

/// A decoder layer with the four sandwich RMS norms over `hidden` (`input_layernorm`,
/// `post_attention_layernorm`, `pre_feedforward_layernorm`, `post_feedforward_layernorm` of
/// `Gemma3nTextDecoderLayer` / `Gemma4TextDecoderLayer`).
pub(super) fn sandwich_layer(attention: Attention, mlp: Mlp, hidden: u64) -> Layer {
    let norm = Norm::rms(hidden);
    let norms = vec![
        (NormSlot::PreAttention, norm),
        (NormSlot::PostAttention, norm),
        (NormSlot::PreMlp, norm),
        (NormSlot::PostMlp, norm),
    ];
    Layer::new(attention, mlp, norms)
}

/// `layer_types` read as "is full attention" per layer (`full_attention` /
/// `sliding_attention`, exactly `layers` of them); absent or null, the text config's default
/// pattern `(i + 1) % period == 0` → full (`Gemma3nTextConfig.__post_init__`, period 5;
/// `Gemma4TextConfig.__post_init__`, period 6).
pub(super) fn layer_types(cfg: &Cfg, layers: u64, period: u64) -> Result<Vec<bool>> {
    match cfg.obj.get("layer_types") {
        None | Some(Value::Null) => Ok((0..layers).map(|i| (i + 1) % period == 0).collect()),
        Some(Value::Array(items)) if items.len() as u64 == layers => items
            .iter()
            .map(|v| match v.as_str() {
                Some("full_attention") => Ok(true),
                Some("sliding_attention") => Ok(false),
                _ => Err(cfg.err(
                    "layer_types",
                    format!("entries must be full_attention or sliding_attention (got {v})"),
                )),
            })
            .collect(),
        Some(other) => Err(cfg.err(
            "layer_types",
            format!("must be a list of {layers} layer types (got {other})"),
        )),
    }
}

/// Whether every layer type in `full` has a cache producer among the first `first` layers,
/// the layers before the kv-sharing ones (`kv_sharing_modes` raises otherwise).
pub(super) fn every_type_has_a_producer(full: &[bool], first: usize) -> bool {
    let has = |f: bool| full[..first].contains(&f);
    (!full.contains(&true) || has(true)) && (!full.contains(&false) || has(false))
}

/// Whether layer `i` of `layers` reuses another layer's keys and values (`kv_sharing_modes` is
/// `"reuse"` from `num_hidden_layers - num_kv_shared_layers` on).
pub(super) fn is_kv_shared(layers: u64, kv_shared: u64, i: usize) -> bool {
    (i as u64) >= layers - kv_shared
}

/// The layers of a kv-sharing Gemma text model whose keys and values a `DynamicCache` holds
/// (transformers 5.24, `cache_utils.py` `get_layer_types_and_kwargs`: a kv-sharing consumer is
/// a `DummyLayer` that stores nothing), each as `(full, kv_heads, head_dim)`.
pub struct CacheLayers {
    origin: String,
    sliding_window: u64,
    owners: Vec<(bool, u64, u64)>,
}

impl CacheLayers {
    /// The cache-producing layers `owners` (is each full attention), their kv heads and head
    /// size given by `heads(full)`.
    pub(super) fn new(
        origin: &str,
        sliding_window: u64,
        owners: &[bool],
        heads: impl Fn(bool) -> (u64, u64),
    ) -> Self {
        let owners = owners.iter().map(|&f| (f, heads(f).0, heads(f).1));
        CacheLayers {
            origin: origin.to_string(),
            sliding_window,
            owners: owners.collect(),
        }
    }

    /// Elements (keys and values together) the cache holds for `batch` sequences after `tokens`
    /// tokens have passed: a sliding layer (`DynamicSlidingWindowLayer.update`) keeps the last
    /// `sliding_window - 1` tokens, a full one (`DynamicLayer`) all of them, keys and values
    /// each `[batch, kv_heads, tokens, head_dim]`. A size past 64 bits is refused.
    pub fn elements(&self, batch: u64, tokens: u64) -> Result<u64> {
        let mut total: u64 = 0;
        for (i, &(full, kv_heads, head_dim)) in self.owners.iter().enumerate() {
            let kept = if full {
                tokens
            } else {
                tokens.min(self.sliding_window - 1)
            };
            let layer = [2, batch, kv_heads, kept, head_dim]
                .iter()
                .try_fold(1u64, |a, b| a.checked_mul(*b))
                .ok_or_else(|| {
                    field_err(
                        &self.origin,
                        "sliding_window",
                        format!("layer {i}: cache size overflows"),
                    )
                })?;
            total = total.saturating_add(layer);
        }
        Ok(total)
    }
}
