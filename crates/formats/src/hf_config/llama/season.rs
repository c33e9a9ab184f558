//! This season's nearly-Llama families, as rows of the Llama-shaped table: SmolLM3 (NoPE layers,
//! tied head by default), OLMo-2 and OLMo-3 (norms after each sublayer, q/k norms over the whole
//! projections; OLMo-3's sliding layers), EXAONE-4 (norms after each sublayer, per-head q/k
//! norms, sliding layers and NoPE global layers). Class defaults are those of
//! `configuration_<family>.py` and shapes those of `modeling_<family>.py` in transformers 5.24.0.

use super::family::{
    Biases, Defaults, Family, NormPlace, Positions, Sliding, LLAMA, LLAMA_DEFAULTS,
};
use crate::error::Result;
use crate::hf_config::fields::Cfg;
use serde_json::Value;
use vramscope_core::model::ModelSpec;

/// SmolLM3 (`SmolLM3Config`: vocab 128256, hidden 2048, 11008, 36 layers, 16 heads, 4 KV heads,
/// 32768 positions, `tie_word_embeddings = True`). The blocks are Llama's (`attention_bias`,
/// `mlp_bias` as Llama reads them); positions per [`Positions::SmolLm3`].
pub(super) const SMOLLM3: Family = Family {
    model_type: "smollm3",
    defaults: Defaults {
        arch: "SmolLM3ForCausalLM",
        vocab: 128256,
        hidden: 2048,
        ffn: 11008,
        layers: 36,
        heads: 16,
        kv_heads: Some(4),
        max_pos: 32768,
        tied: true,
        ..LLAMA_DEFAULTS
    },
    positions: Positions::SmolLm3,
    ..LLAMA
};

/// OLMo-2 (`Olmo2Config`: vocab 50304, hidden 4096, 11008, 32 layers, 32 heads, KV heads = heads,
/// 2048 positions, untied). `Olmo2Attention`: q/k/v/o biases by `attention_bias`, `q_norm` over
/// `heads · head_dim` and `k_norm` over `kv_heads · head_dim`; `Olmo2DecoderLayer`:
/// `post_attention_layernorm` and `post_feedforward_layernorm` on the sublayers' outputs, no
/// input norm; `Olmo2MLP` without biases.
pub(super) const OLMO2: Family = Family {
    model_type: "olmo2",
    defaults: Defaults {
        arch: "Olmo2ForCausalLM",
        vocab: 50304,
        ..LLAMA_DEFAULTS
    },
    biases: Biases::AttentionKey,
    qk_norm: true,
    qk_norm_whole: true,
    norms: NormPlace::Post,
    ..LLAMA
};

/// OLMo-3 (`Olmo3Config`): OLMo-2's shapes and defaults, plus `sliding_window` 4096 on the
/// layers `layer_types` names, by default every layer but each 4th (`__post_init__`:
/// `"sliding_attention" if (i + 1) % 4 != 0`).
pub(super) const OLMO3: Family = Family {
    model_type: "olmo3",
    defaults: Defaults {
        arch: "Olmo3ForCausalLM",
        window: Some(4096),
        ..OLMO2.defaults
    },
    sliding: Sliding::Pattern {
        key: None,
        period: 4,
    },
    ..OLMO2
};

/// EXAONE-4 (`Exaone4Config`: vocab 102400, hidden 4096, 16384, 32 layers, 32 heads, 32 KV heads,
/// 2048 positions, untied, `sliding_window` 4096, `sliding_window_pattern` 4).
/// `Exaone4Attention`: no biases, `q_norm` and `k_norm` over one head (`head_dim`);
/// `Exaone4DecoderLayer`: norms after each sublayer as OLMo-2; `Exaone4MLP` without biases;
/// positions per [`Positions::GlobalNope`].
pub(super) const EXAONE4: Family = Family {
    model_type: "exaone4",
    defaults: Defaults {
        arch: "Exaone4ForCausalLM",
        vocab: 102400,
        ffn: 16384,
        kv_heads: Some(32),
        window: Some(4096),
        ..LLAMA_DEFAULTS
    },
    biases: Biases::Never,
    qk_norm: true,
    norms: NormPlace::Post,
    positions: Positions::GlobalNope,
    sliding: Sliding::Pattern {
        key: Some("sliding_window_pattern"),
        period: 4,
    },
    ..LLAMA
};

/// Applies the family's per-layer positions to the built layers (their sliding windows already
/// set by the family's rule): SmolLM3's NoPE layers and their windows, EXAONE-4's NoPE global
/// layers.
pub(super) fn apply_positions(cfg: &Cfg, fam: &Family, spec: &mut ModelSpec) -> Result<()> {
    match fam.positions {
        Positions::Rope => Ok(()),
        Positions::SmolLm3 => smollm3_layers(cfg, spec),
        Positions::GlobalNope => {
            // `Exaone4Attention.forward`: RoPE `if self.sliding_window is None or self.is_sliding`.
            let window_set = !matches!(cfg.obj.get("sliding_window"), Some(Value::Null));
            for layer in &mut spec.decoder.layers {
                layer.attention.nope = window_set && layer.attention.sliding_window.is_none();
            }
            Ok(())
        }
    }
}

/// SmolLM3 (`SmolLM3Config.__post_init__`, `SmolLM3Attention`): layer `i` uses RoPE when
/// `no_rope_layers[i]` is 1 (default `(i + 1) % no_rope_layer_interval != 0`); its window is
/// `sliding_window` only when `use_sliding_window` and `layer_types[i]` is
/// `"sliding_attention"` (default: the NoPE layers).
fn smollm3_layers(cfg: &Cfg, spec: &mut ModelSpec) -> Result<()> {
    let n = spec.decoder.layers.len() as u64;
    let rope: Vec<bool> = match cfg.obj.get("no_rope_layers") {
        None | Some(Value::Null) => {
            let interval = cfg.size(&["no_rope_layer_interval"], Some(4))?;
            (0..n).map(|i| !(i + 1).is_multiple_of(interval)).collect()
        }
        Some(_) => {
            let flags = cfg.uint_list("no_rope_layers")?;
            if flags.len() as u64 != n {
                return Err(cfg.err(
                    "no_rope_layers",
                    format!("has {} entries for {n} layers", flags.len()),
                ));
            }
            flags.iter().map(|f| *f != 0).collect()
        }
    };
    let use_window = cfg.boolean("use_sliding_window", false)?;
    let window = cfg.uint("sliding_window")?.filter(|_| use_window);
    let sliding: Vec<bool> = match cfg.layer_types(n)? {
        Some(types) => types,
        None => rope.iter().map(|r| !r && window.is_some()).collect(),
    };
    for (i, layer) in spec.decoder.layers.iter_mut().enumerate() {
        layer.attention.nope = !rope[i];
        layer.attention.sliding_window = if sliding[i] { window } else { None };
    }
    Ok(())
}
