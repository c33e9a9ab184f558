//! Typed, checked access to config.json fields.

use super::{field_err, MAX_DIM, MAX_LAYERS};
use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use vramscope_core::DType;

/// Typed access to config fields with the checks every size needs.
pub(crate) struct Cfg<'a> {
    pub(crate) obj: &'a Map<String, Value>,
    pub(crate) origin: &'a str,
}

impl Cfg<'_> {
    pub(crate) fn err(&self, field: &str, reason: impl Into<String>) -> FormatError {
        field_err(self.origin, field, reason)
    }

    /// A per-layer list of `field` (transformers' configs raise when its length is not the layer
    /// count, e.g. `Gemma3nTextConfig.__post_init__`, `validate_layer_type`): exactly `layers`
    /// entries, each read by `entry`; another length is refused, naming both.
    pub(crate) fn per_layer<T>(
        &self,
        field: &str,
        items: &[Value],
        layers: u64,
        entry: impl Fn(&Value) -> Result<T>,
    ) -> Result<Vec<T>> {
        if items.len() as u64 != layers {
            let reason = format!("has {} entries for {layers} layers", items.len());
            return Err(self.err(field, reason));
        }
        items.iter().map(entry).collect()
    }

    pub(crate) fn has_all(&self, keys: &[&str]) -> bool {
        keys.iter()
            .all(|k| self.obj.get(*k).is_some_and(|v| !v.is_null()))
    }

    /// A non-negative integer field (an integral float like `4096.0` is accepted); `None` when
    /// absent or null.
    pub(crate) fn uint(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.obj.get(key) else {
            return Ok(None);
        };
        if v.is_null() {
            return Ok(None);
        }
        let n = if let Some(u) = v.as_u64() {
            u
        } else if let Some(i) = v.as_i64() {
            return Err(self.err(key, format!("must not be negative (got {i})")));
        } else if let Some(f) = v.as_f64() {
            if f < 0.0 {
                return Err(self.err(key, format!("must not be negative (got {f})")));
            }
            if f.fract() != 0.0 || f > MAX_DIM as f64 {
                return Err(self.err(key, format!("must be a whole number (got {f})")));
            }
            f as u64
        } else {
            return Err(self.err(key, format!("must be a number (got {v})")));
        };
        if n > MAX_DIM {
            return Err(self.err(key, format!("{n} is implausibly large")));
        }
        Ok(Some(n))
    }

    /// The first present of several spellings.
    pub(crate) fn uint_any(&self, keys: &[&str]) -> Result<Option<u64>> {
        for k in keys {
            if let Some(v) = self.uint(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// A size that must be at least 1; `default` when absent.
    pub(crate) fn size(&self, keys: &[&str], default: Option<u64>) -> Result<u64> {
        let v = self
            .uint_any(keys)?
            .or(default)
            .ok_or_else(|| self.err(keys[0], "is required and missing"))?;
        if v == 0 {
            let key = keys
                .iter()
                .find(|k| self.obj.contains_key(**k))
                .unwrap_or(&keys[0]);
            return Err(self.err(key, "must be at least 1 (got 0)"));
        }
        Ok(v)
    }

    /// A layer count: a size, bounded before anything is built per layer.
    pub(crate) fn layer_count(&self, keys: &[&str], default: u64) -> Result<u64> {
        let n = self.size(keys, Some(default))?;
        if n > MAX_LAYERS {
            return Err(self.err(
                keys[0],
                format!("{n} layers is more than vramscope accepts ({MAX_LAYERS})"),
            ));
        }
        Ok(n)
    }

    /// The experts routed per token (`num_experts_per_tok`, Gemma 4's `top_k_experts`): a size
    /// no larger than `experts`, since the router's `torch.topk(router_logits, top_k)` picks
    /// among the experts (transformers `models/qwen3_next/modeling_qwen3_next.py`,
    /// `Qwen3NextSparseMoeBlock.forward`; the same in every MoE block this crate reads).
    pub(crate) fn top_k(&self, key: &str, default: Option<u64>, experts: u64) -> Result<u64> {
        let top_k = self.size(&[key], default)?;
        if top_k > experts {
            return Err(self.err(key, format!("{top_k} is more than num_experts {experts}")));
        }
        Ok(top_k)
    }

    /// A Mamba mixer's inner width `mamba_expand · hidden` (`mamba_expand` 2 when absent), no
    /// wider than vramscope accepts (`intermediate_size = int(mamba_expand * hidden_size)` in
    /// transformers `JambaMambaMixer`, `BambaMixer`, `Zamba2MambaMixer`, `FalconH1Mixer`).
    pub(crate) fn mamba_expanded(&self, hidden: u64) -> Result<u64> {
        let expand = self.size(&["mamba_expand"], Some(2))?;
        hidden
            .checked_mul(expand)
            .filter(|v| *v <= MAX_DIM)
            .ok_or_else(|| self.err("mamba_expand", "mamba_expand · hidden_size is too large"))
    }

    /// A vision tower's `patch_size`: a size no larger than the `image_size` tile its patch
    /// convolution cuts (`kernel_size=patch_size, stride=patch_size` over the tile: transformers
    /// `models/mllama/modeling_mllama.py` `MllamaVisionModel.__init__`,
    /// `models/llama4/modeling_llama4.py` `Llama4UnfoldConvolution`).
    pub(crate) fn patch_within(&self, default: u64, tile: u64) -> Result<u64> {
        let patch = self.size(&["patch_size"], Some(default))?;
        if patch > tile {
            return Err(self.err(
                "patch_size",
                format!("{patch} is larger than image_size {tile}"),
            ));
        }
        Ok(patch)
    }

    pub(crate) fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.err(key, format!("must be true or false (got {other})"))),
        }
    }

    pub(crate) fn string(&self, key: &str) -> Option<&str> {
        self.obj.get(key).and_then(Value::as_str)
    }

    /// A probability (dropout rate): the first key present, else `default`; must lie in [0, 1).
    pub(crate) fn prob(&self, keys: &[&str], default: f64) -> Result<f64> {
        for k in keys {
            match self.obj.get(*k) {
                None | Some(Value::Null) => continue,
                Some(v) => {
                    let p = v
                        .as_f64()
                        .ok_or_else(|| self.err(k, format!("must be a number (got {v})")))?;
                    if !(0.0..1.0).contains(&p) {
                        return Err(self.err(k, format!("must be in [0, 1) (got {p})")));
                    }
                    return Ok(p);
                }
            }
        }
        Ok(default)
    }

    pub(crate) fn float(&self, key: &str) -> Option<f64> {
        self.obj.get(key).and_then(Value::as_f64)
    }

    /// A list of non-negative integers (e.g. `mlp_only_layers`).
    pub(crate) fn uint_list(&self, key: &str) -> Result<Vec<u64>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        self.err(key, format!("entries must be layer indices (got {v})"))
                    })
                })
                .collect(),
            Some(other) => Err(self.err(key, format!("must be a list (got {other})"))),
        }
    }

    /// `layer_types` (transformers ≥ 4.53): `"sliding_attention"` / `"full_attention"` per layer.
    pub(crate) fn layer_types(&self, layers: u64) -> Result<Option<Vec<bool>>> {
        match self.obj.get("layer_types") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() as u64 != layers {
                    return Err(self.err(
                        "layer_types",
                        format!("has {} entries for {layers} layers", items.len()),
                    ));
                }
                Ok(Some(
                    items
                        .iter()
                        .map(|v| v.as_str().is_some_and(|s| s.contains("sliding")))
                        .collect(),
                ))
            }
            Some(other) => Err(self.err("layer_types", format!("must be a list (got {other})"))),
        }
    }

    /// The checkpoint dtype: `dtype` (transformers 5) or `torch_dtype` (4.x); fp32 when absent,
    /// as `from_pretrained` loads without a dtype.
    pub(crate) fn dtype(&self, warnings: &mut Vec<String>) -> Result<DType> {
        for key in ["dtype", "torch_dtype"] {
            if let Some(v) = self.obj.get(key) {
                if v.is_null() {
                    continue;
                }
                let s = v
                    .as_str()
                    .ok_or_else(|| self.err(key, format!("must be a string (got {v})")))?;
                if s == "auto" {
                    continue;
                }
                return DType::parse(s).ok_or_else(|| {
                    self.err(key, format!("unknown dtype '{s}' (expected e.g. bfloat16)"))
                });
            }
        }
        warnings.push("config.json names no dtype: weights assumed float32".into());
        Ok(DType::F32)
    }

    /// Rotary base from `rope_parameters.rope_theta` (v5) or `rope_theta` (v4).
    pub(crate) fn rope_theta(&self) -> Option<f64> {
        self.obj
            .get("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or_else(|| self.float("rope_theta"))
    }

    /// Head width: explicit `head_dim` when given, else hidden / heads (which must divide).
    pub(crate) fn head_dim(&self, hidden: u64, heads: u64) -> Result<u64> {
        if let Some(d) = self.uint("head_dim")? {
            if d == 0 {
                return Err(self.err("head_dim", "must be at least 1 (got 0)"));
            }
            return Ok(d);
        }
        if !hidden.is_multiple_of(heads) {
            return Err(self.err(
                "num_attention_heads",
                format!("{heads} does not divide hidden_size {hidden} and no head_dim is given"),
            ));
        }
        Ok(hidden / heads)
    }

    /// KV heads (`default` when absent), which must divide the query heads: GQA groups are
    /// whole.
    pub(crate) fn kv_heads(&self, keys: &[&str], heads: u64, default: u64) -> Result<u64> {
        let kv = self.size(keys, Some(default))?;
        if !heads.is_multiple_of(kv) {
            let key = keys
                .iter()
                .find(|k| self.obj.contains_key(**k))
                .unwrap_or(&keys[0]);
            return Err(self.err(
                key,
                format!("{kv} does not divide num_attention_heads {heads}"),
            ));
        }
        Ok(kv)
    }
}

#[cfg(test)]
mod tests {
    use super::Cfg;

    fn cfg_of(json: &str) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(json).unwrap()
    }

    /// 8 of 8 experts is the most `torch.topk` can pick; 9 of 8 is refused naming the key and
    /// both numbers; an absent key takes the default, which is checked too.
    #[test]
    fn top_k_is_bounded_by_the_experts() {
        let obj = cfg_of(r#"{"num_experts_per_tok": 8, "top_k_experts": 9}"#);
        let c = Cfg {
            obj: &obj,
            origin: "c.json",
        };
        assert_eq!(c.top_k("num_experts_per_tok", None, 8).unwrap(), 8);
        let e = c.top_k("top_k_experts", None, 8).unwrap_err().to_string();
        assert!(
            e.contains("top_k_experts") && e.contains("9 is more than num_experts 8"),
            "{e}"
        );
        assert_eq!(c.top_k("absent", Some(2), 8).unwrap(), 2);
        assert!(c.top_k("absent", Some(4), 3).is_err());
    }

    /// A 14 px patch fits a 448 px tile; a 500 px patch (the config's) does not; the default 14
    /// is taken when `patch_size` is absent.
    #[test]
    fn patch_fits_the_tile() {
        let obj = cfg_of(r#"{"patch_size": 500}"#);
        let c = Cfg {
            obj: &obj,
            origin: "c.json",
        };
        let e = c.patch_within(14, 448).unwrap_err().to_string();
        assert!(
            e.contains("patch_size") && e.contains("500 is larger than image_size 448"),
            "{e}"
        );
        assert_eq!(c.patch_within(14, 500).unwrap(), 500);
        let empty = cfg_of("{}");
        let c = Cfg {
            obj: &empty,
            origin: "c.json",
        };
        assert_eq!(c.patch_within(14, 448).unwrap(), 14);
    }
}
