//! Gemma 3n's audio tower (`Gemma3nAudioEncoder`, a USM conformer) and the two multimodal
//! embedders, counted tensor by tensor as transformers 5.24 builds them from
//! `Gemma3nAudioConfig` (`models/gemma3n/configuration_gemma3n.py`; `modeling_gemma3n.py`:
//! `Gemma3nAudioSubSampleConvProjection`, `Gemma3nAudioSSCPConvBlock`,
//! `Gemma3nAudioCumulativeGroupNorm`, `Gemma3nAudioConformerBlock` and its feed-forward,
//! attention and light-convolution modules, `Gemma3nAudioRelativePositionEmbedding`,
//! `Gemma3nMultimodalEmbedder`). Counted, not run: a `gemma3n` job is text-only, so the audio
//! tower is held as idle weights (`gemma3n::as_conditional`).

use super::fields::Cfg;
use crate::error::Result;
use serde_json::{Map, Value};

/// One parameter tensor: its name (under `model.audio_tower.`) and its shape.
pub type NamedTensor = (String, Vec<u64>);

/// A `[[h, w], [h, w]]` pair of the subsample convolutions' kernels or strides.
fn pairs(cfg: &Cfg, key: &str, default: [[u64; 2]; 2]) -> Result<[[u64; 2]; 2]> {
    let Some(v) = cfg.obj.get(key).filter(|v| !v.is_null()) else {
        return Ok(default);
    };
    let bad = || {
        cfg.err(
            key,
            format!("must be two [height, width] pairs of sizes (got {v})"),
        )
    };
    let rows = v.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    let mut out = [[0u64; 2]; 2];
    for (i, row) in rows.iter().enumerate() {
        let row = row.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
        for (j, x) in row.iter().enumerate() {
            out[i][j] = x
                .as_u64()
                .filter(|n| (1..=1 << 20).contains(n))
                .ok_or_else(bad)?;
        }
    }
    Ok(out)
}

/// `sscp_conv_channel_size`: the two convolutions' output channels.
fn channels(cfg: &Cfg) -> Result<[u64; 2]> {
    let key = "sscp_conv_channel_size";
    let Some(v) = cfg.obj.get(key).filter(|v| !v.is_null()) else {
        return Ok([128, 32]);
    };
    let bad = || cfg.err(key, format!("must be two channel counts (got {v})"));
    let a = v.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    let c = |x: &Value| {
        x.as_u64()
            .filter(|n| (1..=1 << 20).contains(n))
            .ok_or_else(bad)
    };
    Ok([c(&a[0])?, c(&a[1])?])
}

/// The subsample convolution projection (`Gemma3nAudioSubSampleConvProjection.__init__`): two
/// bias-free `Conv2d`s (1 → c0 → c1 channels), each with its `CumulativeGroupNorm` weight
/// `[c]`, the frequency axis padded by 1 on each side, `f_out = (f + 2 - k_w) // s_w + 1`;
/// then `input_proj_linear [hidden, c1 · f_out]`.
fn subsample(out: &mut Vec<NamedTensor>, cfg: &Cfg, hidden: u64) -> Result<()> {
    let p = "model.audio_tower.subsample_conv_projection";
    let kernels = pairs(cfg, "sscp_conv_kernel_size", [[3, 3], [3, 3]])?;
    let strides = pairs(cfg, "sscp_conv_stride_size", [[2, 2], [2, 2]])?;
    let ch = channels(cfg)?;
    let mut f = cfg.size(&["input_feat_size"], Some(128))?;
    let mut c_in = 1;
    for i in 0..2 {
        let ([kh, kw], sw) = (kernels[i], strides[i][1]);
        if f + 2 < kw {
            return Err(cfg.err(
                "sscp_conv_kernel_size",
                format!(
                    "a kernel {kw} wide is wider than the padded frequency axis {}",
                    f + 2
                ),
            ));
        }
        f = (f + 2 - kw) / sw + 1;
        out.push((
            format!("{p}.conv_{i}.conv.weight"),
            vec![ch[i], c_in, kh, kw],
        ));
        out.push((format!("{p}.conv_{i}.norm.weight"), vec![ch[i]]));
        c_in = ch[i];
    }
    out.push((
        format!("{p}.input_proj_linear.weight"),
        vec![hidden, ch[1] * f],
    ));
    Ok(())
}

/// One `Gemma3nAudioConformerBlock`: two feed-forward modules (`pre_layer_norm`,
/// `ffw_layer_1 [4h, h]`, `ffw_layer_2 [h, 4h]`, `post_layer_norm`), attention
/// (`pre_attn_norm`, `attn.relative_position_embedding.pos_proj [h, h]`, `attn.per_dim_scale
/// [h / heads]`, `attn.q_proj` / `k_proj` / `v_proj [h, h]`, `post [h, h]`, `post_norm`), the
/// light convolution (`pre_layer_norm`, `linear_start [2h, h]`, the depthwise
/// `depthwise_conv1d [h, 1, conf_conv_kernel_size]`, `conv_norm`, `linear_end [h, h]`) and
/// `norm`; every norm a `Gemma3nRMSNorm [h]`, no biases.
fn conformer(out: &mut Vec<NamedTensor>, i: u64, h: u64, head_dim: u64, kernel: u64) {
    let p = format!("model.audio_tower.conformer.{i}");
    let mut t = |name: String, shape: Vec<u64>| out.push((format!("{p}.{name}"), shape));
    for ffw in ["ffw_layer_start", "ffw_layer_end"] {
        t(format!("{ffw}.pre_layer_norm.weight"), vec![h]);
        t(format!("{ffw}.ffw_layer_1.weight"), vec![4 * h, h]);
        t(format!("{ffw}.ffw_layer_2.weight"), vec![h, 4 * h]);
        t(format!("{ffw}.post_layer_norm.weight"), vec![h]);
    }
    t("attention.pre_attn_norm.weight".into(), vec![h]);
    t(
        "attention.attn.relative_position_embedding.pos_proj.weight".into(),
        vec![h, h],
    );
    t("attention.attn.per_dim_scale".into(), vec![head_dim]);
    for proj in ["q_proj", "k_proj", "v_proj"] {
        t(format!("attention.attn.{proj}.weight"), vec![h, h]);
    }
    t("attention.post.weight".into(), vec![h, h]);
    t("attention.post_norm.weight".into(), vec![h]);
    t("lconv1d.pre_layer_norm.weight".into(), vec![h]);
    t("lconv1d.linear_start.weight".into(), vec![2 * h, h]);
    t("lconv1d.depthwise_conv1d.weight".into(), vec![h, 1, kernel]);
    t("lconv1d.conv_norm.weight".into(), vec![h]);
    t("lconv1d.linear_end.weight".into(), vec![h, h]);
    t("norm.weight".into(), vec![h]);
}

/// Every parameter tensor of `Gemma3nAudioEncoder` built from an `audio_config` object, named
/// as `Gemma3nModel` holds it (`model.audio_tower.`).
pub fn audio_tensors(obj: &Map<String, Value>, origin: &str) -> Result<Vec<NamedTensor>> {
    let cfg = Cfg { obj, origin };
    let h = cfg.size(&["hidden_size"], Some(1536))?;
    let heads = cfg.size(&["conf_num_attention_heads"], Some(8))?;
    let layers = cfg.layer_count(&["conf_num_hidden_layers"], 12)?;
    let kernel = cfg.size(&["conf_conv_kernel_size"], Some(5))?;
    let mut out = Vec::new();
    subsample(&mut out, &cfg, h)?;
    for i in 0..layers {
        conformer(&mut out, i, h, h / heads, kernel);
    }
    Ok(out)
}

/// `Gemma3nMultimodalEmbedder(config, text_config)` as `name` (`embed_audio` or
/// `embed_vision`): `embedding [vocab_size, hidden]`, `hard_embedding_norm` and
/// `soft_embedding_norm [hidden]`, `embedding_projection [text_hidden, hidden]`; the
/// post-projection norm has no weight (`with_scale=False`).
pub fn embedder_tensors(
    name: &str,
    obj: &Map<String, Value>,
    origin: &str,
    (hidden_default, text_hidden): (u64, u64),
) -> Result<Vec<NamedTensor>> {
    let cfg = Cfg { obj, origin };
    let h = cfg.size(&["hidden_size"], Some(hidden_default))?;
    let vocab = cfg.size(&["vocab_size"], Some(128))?;
    let p = format!("model.{name}");
    Ok(vec![
        (format!("{p}.embedding.weight"), vec![vocab, h]),
        (format!("{p}.hard_embedding_norm.weight"), vec![h]),
        (format!("{p}.soft_embedding_norm.weight"), vec![h]),
        (
            format!("{p}.embedding_projection.weight"),
            vec![text_hidden, h],
        ),
    ])
}

pub use super::gemma_shared::params;
