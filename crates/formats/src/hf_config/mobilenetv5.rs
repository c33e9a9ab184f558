//! Gemma 3n's vision tower: timm's `mobilenetv5_300m_enc` (timm 1.0.31,
//! `timm/models/mobilenetv5.py`), counted tensor by tensor as transformers 5.24 builds it.
//!
//! `Gemma3nModel.__init__` builds `vision_tower = AutoModel.from_config(vision_config)`, a
//! `TimmWrapperModel` (`models/timm_wrapper/modeling_timm_wrapper.py`) holding
//! `timm.create_model(architecture, pretrained=False, num_classes=0, **model_args)` as
//! `timm_model`; `Gemma3nVisionConfig.architecture` defaults to `mobilenetv5_300m_enc`, whose
//! `MobileNetV5Encoder` has no classifier. `_gen_mobilenet_v5` gives the blocks as timm's block
//! strings ([`MOBILENETV5_300M`], read by `_decode_block_str` in `_efficientnet_builder.py`:
//! a type, then `r` repeats, `k` the (mid) depthwise kernel, `a` / `p` the start / end
//! depthwise kernels of a `uir`, `s` stride, `e` expansion, `c` output channels, `h` heads,
//! `d` key/value width, `v` the key/value stride), with `stem_size=64`,
//! `norm_layer=RmsNorm2d` (one weight per channel, no bias) and
//! `layer_scale_init_value=1e-5`; channels go through `round_channels(multiplier=1.0)`
//! ([`make_divisible`]). Convolutions have no bias (`create_conv2d`) except the stem's.
//! The stride and padding change no parameter count.

use super::fields::Cfg;
use super::gemma_shared::NamedTensor;
use crate::error::Result;

/// `_gen_mobilenet_v5`'s `arch_def` for every variant but `mobilenetv5_base`, four stages, as
/// runs of (block strings, times): stage 2 is 1 + 7 + 1 UIR blocks then 14 (MQA, UIR) pairs,
/// stage 3 one UIR then 19 pairs.
const MOBILENETV5_300M: [&[(&[&str], u64)]; 4] = [
    &[(&["er_r1_k3_s2_e4_c128"], 1), (&["er_r1_k3_s1_e4_c128"], 2)],
    &[
        (&["uir_r1_a3_k5_s2_e6_c256"], 1),
        (&["uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256"], 2),
    ],
    &[
        (&["uir_r1_a5_k5_s2_e6_c640"], 1),
        (&["uir_r1_a5_k0_s1_e4_c640"], 7),
        (&["uir_r1_a0_k0_s1_e1_c640"], 1),
        (
            &["mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640"],
            14,
        ),
    ],
    &[
        (&["uir_r1_a5_k5_s2_e6_c1280"], 1),
        (
            &["mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280"],
            19,
        ),
    ],
];

/// `MobileNetV5Encoder`'s `stem_size` as `_gen_mobilenet_v5` sets it.
const STEM: u64 = 64;
/// `MobileNetV5Encoder.num_features`: the fusion adapter's output channels.
const FEATURES: u64 = 2048;

/// timm's `make_divisible(v, divisor=8, round_limit=0.9)` (`timm/layers/helpers.py`): the
/// nearest multiple of 8 (at least 8), one more step up if that loses over 10 %.
fn make_divisible(v: f64) -> u64 {
    let rounded = (((v + 4.0) as u64) / 8 * 8).max(8);
    if (rounded as f64) < 0.9 * v {
        rounded + 8
    } else {
        rounded
    }
}

/// One decoded block string (`_decode_block_str`): the letters this tower uses.
#[derive(Debug, Default)]
struct Block {
    kind: String,
    /// `k`: `er`'s expansion kernel, `uir`'s middle depthwise kernel, `mqa`'s key/value
    /// down-sampling kernel.
    k: u64,
    /// `a` / `p`: `uir`'s start and end depthwise kernels (0 = none).
    a: u64,
    p: u64,
    e: f64,
    c: u64,
    h: u64,
    d: u64,
    /// `v`: `mqa`'s key/value stride (default 1).
    v: u64,
}

fn decode(block: &str) -> Block {
    let mut parts = block.split('_');
    let mut b = Block {
        kind: parts.next().unwrap_or_default().to_string(),
        v: 1,
        ..Block::default()
    };
    for op in parts {
        let (key, value) = op.split_at(1);
        let n = value.parse::<f64>().unwrap_or(0.0);
        match key {
            "k" => b.k = n as u64,
            "a" => b.a = n as u64,
            "p" => b.p = n as u64,
            "e" => b.e = n,
            "c" => b.c = n as u64,
            "h" => b.h = n as u64,
            "d" => b.d = n as u64,
            "v" => b.v = n as u64,
            _ => {} // `r` (always 1 here) and `s` change no parameter
        }
    }
    b
}

/// Pushes `name.weight` of shape `shape`.
fn weight(out: &mut Vec<NamedTensor>, name: &str, shape: Vec<u64>) {
    out.push((format!("{name}.weight"), shape));
}

/// A bias-free `ConvNormAct` (`timm/layers/conv_bn_act.py`): `conv [out, in / groups, k, k]`
/// and the `RmsNorm2d` weight `bn [out]`.
fn conv_norm(out: &mut Vec<NamedTensor>, p: &str, (cin, cout, k, groups): (u64, u64, u64, u64)) {
    weight(out, &format!("{p}.conv"), vec![cout, cin / groups, k, k]);
    weight(out, &format!("{p}.bn"), vec![cout]);
}

/// `EdgeResidual.__init__` (`_efficientnet_blocks.py`; `group_size` unset → one group):
/// `conv_exp [mid, in, k, k]`, `bn1 [mid]`, `conv_pwl [out, mid, 1, 1]`, `bn2 [out]`, with
/// `mid = make_divisible(in · e)`; no layer scale. E.g. `er_r1_k3_s2_e4_c128` after the
/// 64-channel stem: 256·64·9 + 256 + 128·256 + 128 = 180,608.
fn edge_residual(out: &mut Vec<NamedTensor>, p: &str, b: &Block, cin: u64) {
    let mid = make_divisible(cin as f64 * b.e);
    weight(out, &format!("{p}.conv_exp"), vec![mid, cin, b.k, b.k]);
    weight(out, &format!("{p}.bn1"), vec![mid]);
    weight(out, &format!("{p}.conv_pwl"), vec![b.c, mid, 1, 1]);
    weight(out, &format!("{p}.bn2"), vec![b.c]);
}

/// `UniversalInvertedResidual.__init__` (`group_size=1`: depthwise): `dw_start` (when `a`,
/// `[in, 1, a, a]` and its norm), `pw_exp [mid, in]` and norm, `dw_mid` (when `k`,
/// `[mid, 1, k, k]` and norm), `pw_proj [out, mid]` and norm, `dw_end` (when `p`), and
/// `layer_scale.gamma [out]` when `layer_scale` (`LayerScale2d`). E.g.
/// `uir_r1_a3_k5_s2_e6_c256` from 128 channels: 128·9 + 128 + 768·128 + 768 + 768·25 + 768 +
/// 256·768 + 256 + 256 = 317,440.
fn universal(out: &mut Vec<NamedTensor>, p: &str, b: &Block, cin: u64, layer_scale: bool) {
    let mid = make_divisible(cin as f64 * b.e);
    if b.a > 0 {
        conv_norm(out, &format!("{p}.dw_start"), (cin, cin, b.a, cin));
    }
    conv_norm(out, &format!("{p}.pw_exp"), (cin, mid, 1, 1));
    if b.k > 0 {
        conv_norm(out, &format!("{p}.dw_mid"), (mid, mid, b.k, mid));
    }
    conv_norm(out, &format!("{p}.pw_proj"), (mid, b.c, 1, 1));
    if b.p > 0 {
        conv_norm(out, &format!("{p}.dw_end"), (b.c, b.c, b.p, b.c));
    }
    if layer_scale {
        out.push((format!("{p}.layer_scale.gamma"), vec![b.c]));
    }
}

/// `MobileAttention.__init__` with `use_multi_query=True` (`MultiQueryAttention2d`,
/// `timm/layers/attention2d.py`; no query stride, no bias, no positional conv): `norm [in]`,
/// `attn.query.proj [h · d, in, 1, 1]`, for keys and values a depthwise `down_conv
/// [in, 1, k, k]` and `norm [in]` when `v > 1`, then `proj [d, in, 1, 1]` (one shared head),
/// `attn.output.proj [out, h · d, 1, 1]`, `layer_scale.gamma [out]`. E.g.
/// `mqa_r1_k3_h12_v2_s1_d64_c640`: 640 + 768·640 + 2·(640·9 + 640 + 64·640) + 640·768 + 640 =
/// 1,079,040.
fn multi_query(out: &mut Vec<NamedTensor>, p: &str, b: &Block, cin: u64) {
    weight(out, &format!("{p}.norm"), vec![cin]);
    weight(
        out,
        &format!("{p}.attn.query.proj"),
        vec![b.h * b.d, cin, 1, 1],
    );
    for kv in ["key", "value"] {
        let q = format!("{p}.attn.{kv}");
        if b.v > 1 {
            weight(out, &format!("{q}.down_conv"), vec![cin, 1, b.k, b.k]);
            weight(out, &format!("{q}.norm"), vec![cin]);
        }
        weight(out, &format!("{q}.proj"), vec![b.d, cin, 1, 1]);
    }
    weight(
        out,
        &format!("{p}.attn.output.proj"),
        vec![b.c, b.h * b.d, 1, 1],
    );
    out.push((format!("{p}.layer_scale.gamma"), vec![b.c]));
}

/// Every parameter tensor of `MobileNetV5Encoder` for `mobilenetv5_300m_enc`, named under
/// `prefix` (`model.vision_tower.timm_model`): the stem (`conv_stem`: a biased 3×3 convolution
/// 3 → 64 and its norm), the blocks stage by stage (`blocks.{stage}.{i}`), and the fusion
/// adapter (`MobileNetV5MultiScaleFusionAdapter`: over the last two stages' channels
/// concatenated (`msfa_indices=(-2, -1)`), a UIR without depthwise convolutions, expansion 2,
/// no layer scale, to 2048, then `norm [2048]`).
pub fn tower_tensors(prefix: &str) -> Vec<NamedTensor> {
    let mut out = Vec::new();
    let stem = format!("{prefix}.conv_stem");
    weight(&mut out, &format!("{stem}.conv"), vec![STEM, 3, 3, 3]);
    out.push((format!("{stem}.conv.bias"), vec![STEM]));
    weight(&mut out, &format!("{stem}.bn"), vec![STEM]);
    let (mut cin, mut ends) = (STEM, Vec::new());
    for (s, runs) in MOBILENETV5_300M.iter().enumerate() {
        let blocks = runs
            .iter()
            .flat_map(|(seq, n)| (0..*n).flat_map(move |_| seq.iter()));
        for (i, text) in blocks.enumerate() {
            let (b, p) = (decode(text), format!("{prefix}.blocks.{s}.{i}"));
            match b.kind.as_str() {
                "er" => edge_residual(&mut out, &p, &b, cin),
                "uir" => universal(&mut out, &p, &b, cin, true),
                _ => multi_query(&mut out, &p, &b, cin),
            }
            cin = b.c;
        }
        ends.push(cin);
    }
    let fused = ends[ends.len() - 2..].iter().sum::<u64>();
    let adapter = Block {
        e: 2.0,
        c: FEATURES,
        ..Block::default()
    };
    universal(
        &mut out,
        &format!("{prefix}.msfa.ffn"),
        &adapter,
        fused,
        false,
    );
    weight(&mut out, &format!("{prefix}.msfa.norm"), vec![FEATURES]);
    out
}

/// The vision tower of a `gemma3n` config's `vision_config` (absent: the class defaults), named
/// as `Gemma3nModel` holds it. Only `mobilenetv5_300m_enc` with no `model_args` is read: any
/// other timm architecture, or kwargs that would change the blocks, is refused naming the field.
pub(crate) fn vision_tower(cfg: &Cfg) -> Result<Vec<NamedTensor>> {
    let arch = cfg.obj.get("architecture").and_then(|v| v.as_str());
    if arch.is_some_and(|a| a != "mobilenetv5_300m_enc") {
        return Err(cfg.err(
            "architecture",
            format!(
                "timm architecture {} is not counted (only mobilenetv5_300m_enc)",
                arch.unwrap_or_default()
            ),
        ));
    }
    match cfg.obj.get("model_args") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(m)) if m.is_empty() => {}
        Some(other) => {
            return Err(cfg.err(
                "model_args",
                format!("timm kwargs {other} are not read (they may change the blocks)"),
            ))
        }
    }
    Ok(tower_tensors("model.vision_tower.timm_model"))
}
