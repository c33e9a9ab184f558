//! Gemma 4's vision and audio towers and their embedders, counted tensor by tensor as
//! transformers 5.24 builds `Gemma4ForConditionalGeneration` (`models/gemma4/modeling_gemma4.py`:
//! `Gemma4Model.__init__`, `Gemma4VisionModel`, `Gemma4AudioModel`,
//! `Gemma4MultimodalEmbedder`; defaults from `configuration_gemma4.py`, `Gemma4VisionConfig`,
//! `Gemma4AudioConfig`, `Gemma4Config`).
//!
//! Every linear of both towers is a `Gemma4ClippableLinear`: an `nn.Linear(bias=False)` named
//! `.linear`, whose clipping bounds (`use_clipped_linears`) are buffers, not parameters; the
//! vision tower's `std_bias` / `std_scale` (`standardize`) and the audio tower's relative
//! position timescales are buffers too. A tower whose sub-config is absent or null is not
//! built (`SubConfigSpec(optional=True)`).

use super::fields::Cfg;
use super::gemma4::{text_tensors, NamedTensor};
use crate::error::Result;
use serde_json::{Map, Value};

/// `Gemma4VisionConfig`'s geometry, with its class defaults.
struct VisionGeometry {
    hidden: u64,
    ffn: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    patch: u64,
    positions: u64,
}

fn vision_geometry(v: &Cfg) -> Result<VisionGeometry> {
    Ok(VisionGeometry {
        hidden: v.size(&["hidden_size"], Some(768))?,
        ffn: v.size(&["intermediate_size"], Some(3072))?,
        layers: v.layer_count(&["num_hidden_layers"], 16)?,
        heads: v.size(&["num_attention_heads"], Some(12))?,
        kv_heads: v.size(&["num_key_value_heads"], Some(12))?,
        head_dim: v.size(&["head_dim"], Some(64))?,
        patch: v.size(&["patch_size"], Some(16))?,
        positions: v.size(&["position_embedding_size"], Some(10 * 1024))?,
    })
}

fn push(out: &mut Vec<NamedTensor>, name: String, shape: Vec<u64>) {
    out.push((name, shape));
}

/// A `Gemma4ClippableLinear`: its weight is `<name>.linear.weight`.
fn clippable(out: &mut Vec<NamedTensor>, name: &str, inp: u64, outp: u64) {
    push(out, format!("{name}.linear.weight"), vec![outp, inp]);
}

/// `Gemma4VisionModel.__init__`: the patch embedder (`input_proj` over `3 · patch²` pixel
/// values, the `[2, position_embedding_size, hidden]` table of x and y position embeddings),
/// the encoder layers (`Gemma4VisionEncoderLayer`: q/k/v/o clippable projections, `q_norm` and
/// `k_norm` over `head_dim`, the weightless `v_norm`, the gated MLP, four RMS norms); the pooler
/// has no parameters.
fn vision_tensors(out: &mut Vec<NamedTensor>, v: &Cfg, p: &str) -> Result<()> {
    let g = vision_geometry(v)?;
    let h = g.hidden;
    push(
        out,
        format!("{p}.patch_embedder.input_proj.weight"),
        vec![h, 3 * g.patch * g.patch],
    );
    push(
        out,
        format!("{p}.patch_embedder.position_embedding_table"),
        vec![2, g.positions, h],
    );
    for i in 0..g.layers {
        let l = format!("{p}.encoder.layers.{i}");
        let a = format!("{l}.self_attn");
        clippable(out, &format!("{a}.q_proj"), h, g.heads * g.head_dim);
        clippable(out, &format!("{a}.k_proj"), h, g.kv_heads * g.head_dim);
        clippable(out, &format!("{a}.v_proj"), h, g.kv_heads * g.head_dim);
        clippable(out, &format!("{a}.o_proj"), g.heads * g.head_dim, h);
        push(out, format!("{a}.q_norm.weight"), vec![g.head_dim]);
        push(out, format!("{a}.k_norm.weight"), vec![g.head_dim]);
        clippable(out, &format!("{l}.mlp.gate_proj"), h, g.ffn);
        clippable(out, &format!("{l}.mlp.up_proj"), h, g.ffn);
        clippable(out, &format!("{l}.mlp.down_proj"), g.ffn, h);
        for n in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            push(out, format!("{l}.{n}.weight"), vec![h]);
        }
    }
    Ok(())
}

/// `Gemma4AudioConfig`'s geometry, with its class defaults.
struct AudioGeometry {
    hidden: u64,
    layers: u64,
    heads: u64,
    channels: [u64; 2],
    kernel: u64,
    output: u64,
}

fn audio_geometry(a: &Cfg) -> Result<AudioGeometry> {
    let channels = match a.obj.get("subsampling_conv_channels") {
        None | Some(Value::Null) => [128, 32],
        Some(Value::Array(items)) if items.len() == 2 => {
            let c: Vec<u64> = items.iter().filter_map(Value::as_u64).collect();
            match c[..] {
                [c0, c1] if c0 > 0 && c1 > 0 => [c0, c1],
                _ => return Err(bad_channels(a)),
            }
        }
        Some(_) => return Err(bad_channels(a)),
    };
    Ok(AudioGeometry {
        hidden: a.size(&["hidden_size"], Some(1024))?,
        layers: a.layer_count(&["num_hidden_layers"], 12)?,
        heads: a.size(&["num_attention_heads"], Some(8))?,
        channels,
        kernel: a.size(&["conv_kernel_size"], Some(5))?,
        output: a.size(&["output_proj_dims"], Some(1536))?,
    })
}

fn bad_channels(a: &Cfg) -> crate::error::FormatError {
    a.err(
        "subsampling_conv_channels",
        "must be a list of two positive channel counts",
    )
}

/// One conformer layer (`Gemma4AudioLayer.__init__`): two feed-forward modules
/// (`Gemma4AudioFeedForward`: `ffw_layer_1` to `4 · hidden` and back, pre and post RMS norms),
/// the chunked attention (`Gemma4AudioAttention`: q/k/v/`post` clippable projections of
/// `hidden`, `relative_k_proj` a plain linear, `per_dim_scale` over `hidden / heads`), the
/// light convolution (`Gemma4AudioLightConv1d`: `linear_start` to `2 · hidden`, the depthwise
/// `[hidden, 1, conv_kernel_size]` convolution without bias, `linear_end`, two RMS norms) and
/// three RMS norms.
fn audio_layer(out: &mut Vec<NamedTensor>, g: &AudioGeometry, l: &str) {
    let h = g.hidden;
    for ff in ["feed_forward1", "feed_forward2"] {
        clippable(out, &format!("{l}.{ff}.ffw_layer_1"), h, 4 * h);
        clippable(out, &format!("{l}.{ff}.ffw_layer_2"), 4 * h, h);
        push(out, format!("{l}.{ff}.pre_layer_norm.weight"), vec![h]);
        push(out, format!("{l}.{ff}.post_layer_norm.weight"), vec![h]);
    }
    let a = format!("{l}.self_attn");
    for n in ["q_proj", "k_proj", "v_proj", "post"] {
        clippable(out, &format!("{a}.{n}"), h, h);
    }
    push(out, format!("{a}.relative_k_proj.weight"), vec![h, h]);
    push(out, format!("{a}.per_dim_scale"), vec![h / g.heads]);
    let c = format!("{l}.lconv1d");
    clippable(out, &format!("{c}.linear_start"), h, 2 * h);
    clippable(out, &format!("{c}.linear_end"), h, h);
    push(
        out,
        format!("{c}.depthwise_conv1d.weight"),
        vec![h, 1, g.kernel],
    );
    push(out, format!("{c}.pre_layer_norm.weight"), vec![h]);
    push(out, format!("{c}.conv_norm.weight"), vec![h]);
    for n in ["norm_pre_attn", "norm_post_attn", "norm_out"] {
        push(out, format!("{l}.{n}.weight"), vec![h]);
    }
}

/// `Gemma4AudioModel.__init__`: the sub-sampling projection (two 3×3 stride-2 convolutions
/// without bias, each with a bias-free `LayerNorm` over its channels, then `input_proj_linear`
/// from `(channels[0] // 4) · channels[1]`), the conformer layers, `output_proj` (with bias)
/// to `output_proj_dims`.
fn audio_tensors(out: &mut Vec<NamedTensor>, a: &Cfg, p: &str) -> Result<AudioGeometry> {
    let g = audio_geometry(a)?;
    if g.hidden % g.heads != 0 {
        return Err(a.err(
            "num_attention_heads",
            format!("{} does not divide hidden_size {}", g.heads, g.hidden),
        ));
    }
    let [c0, c1] = g.channels;
    let s = format!("{p}.subsample_conv_projection");
    push(out, format!("{s}.layer0.conv.weight"), vec![c0, 1, 3, 3]);
    push(out, format!("{s}.layer0.norm.weight"), vec![c0]);
    push(out, format!("{s}.layer1.conv.weight"), vec![c1, c0, 3, 3]);
    push(out, format!("{s}.layer1.norm.weight"), vec![c1]);
    push(
        out,
        format!("{s}.input_proj_linear.weight"),
        vec![g.hidden, (c0 / 4) * c1],
    );
    for i in 0..g.layers {
        audio_layer(out, &g, &format!("{p}.layers.{i}"));
    }
    push(
        out,
        format!("{p}.output_proj.weight"),
        vec![g.output, g.hidden],
    );
    push(out, format!("{p}.output_proj.bias"), vec![g.output]);
    Ok(g)
}

/// A sub-config object, `None` when absent or null (the tower is not built).
fn sub<'a>(top: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    top.get(key).and_then(Value::as_object)
}

/// Every parameter tensor of `Gemma4ForConditionalGeneration` from a `gemma4` config: the
/// language model under `model.language_model.` (`text_tensors` of `text_config`, class
/// defaults when absent, without its own head: the top-level tie decides), the
/// vision tower and `embed_vision` (`Gemma4MultimodalEmbedder`: a weightless pre-projection
/// norm and `embedding_projection` from the tower's `hidden_size` to the text hidden size), the
/// audio tower and `embed_audio` (the same, from `output_proj_dims`), and `lm_head` only when
/// the top-level `tie_word_embeddings` (default true) is false.
pub fn model_tensors(top: &Map<String, Value>, origin: &str) -> Result<Vec<NamedTensor>> {
    let t = Cfg { obj: top, origin };
    // An absent text config is `Gemma4TextConfig()` (`Gemma4Config.sub_configs_defaults`).
    let mut text = sub(top, "text_config").cloned().unwrap_or_default();
    text.insert("tie_word_embeddings".into(), Value::Bool(true));
    let text_origin = format!("{origin} text_config");
    let mut out: Vec<NamedTensor> = text_tensors(&text, &text_origin)?
        .into_iter()
        .map(|(n, s)| (n.replacen("model.", "model.language_model.", 1), s))
        .collect();
    let lm_hidden = out[0].1[1];
    let vocab = out[0].1[0];
    if let Some(v) = sub(top, "vision_config") {
        let vo = format!("{origin} vision_config");
        let vc = Cfg {
            obj: v,
            origin: &vo,
        };
        vision_tensors(&mut out, &vc, "model.vision_tower")?;
        let width = vision_geometry(&vc)?.hidden;
        push(
            &mut out,
            "model.embed_vision.embedding_projection.weight".into(),
            vec![lm_hidden, width],
        );
    }
    out.extend(audio_part(top, origin, lm_hidden)?);
    if !t.boolean("tie_word_embeddings", true)? {
        push(&mut out, "lm_head.weight".into(), vec![vocab, lm_hidden]);
    }
    Ok(out)
}

/// Parameters of each part of [`model_tensors`]: the language model (with `lm_head` when
/// untied), the vision tower with its embedder, the audio tower with its embedder.
pub fn part_counts(tensors: &[NamedTensor]) -> [u64; 3] {
    let mut parts = [0u64; 3];
    for (name, shape) in tensors {
        let i = if name.starts_with("model.vision_tower.")
            || name.starts_with("model.embed_vision.")
        {
            1
        } else if name.starts_with("model.audio_tower.") || name.starts_with("model.embed_audio.") {
            2
        } else {
            0
        };
        parts[i] += shape.iter().product::<u64>();
    }
    parts
}

/// The audio tower and `embed_audio` (`Gemma4MultimodalEmbedder`: a weightless
/// pre-projection norm and `embedding_projection` from `output_proj_dims` to the text hidden
/// size `lm_hidden`) of a `gemma4` config, empty when `audio_config` is absent or null (the 26B
/// and 31B). The estimator loads them and never runs them (`ModelSpec::idle_tensors`):
/// `Gemma4Model.forward` calls `get_audio_features` only when `input_features` and
/// `input_features_mask` are given, and a job has no audio input; a text or image forward
/// reads nothing of the audio side (it masks `audio_token_id` placeholders in `input_ids`
/// only).
pub fn audio_part(
    top: &Map<String, Value>,
    origin: &str,
    lm_hidden: u64,
) -> Result<Vec<NamedTensor>> {
    let Some(a) = sub(top, "audio_config") else {
        return Ok(Vec::new());
    };
    let ao = format!("{origin} audio_config");
    let ac = Cfg {
        obj: a,
        origin: &ao,
    };
    let mut out = Vec::new();
    let g = audio_tensors(&mut out, &ac, "model.audio_tower")?;
    push(
        &mut out,
        "model.embed_audio.embedding_projection.weight".into(),
        vec![lm_hidden, g.output],
    );
    Ok(out)
}
