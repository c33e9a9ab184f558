//! What every vision tower's tensors are written with: `Out` (the tensor list being built,
//! in the checkpoint's dtype) and the common ViT encoder block. Used by the dispatch
//! (`inventory`) and the family towers (`families`, `mllama`).

use super::{TowerKind, Vision};
use crate::dtype::DType;
use crate::error::CoreError;
use crate::inventory::{Component, Tensor};
use crate::model::norm::NormKind;

/// The tensor list a tower is written into, in the checkpoint's dtype.
pub(super) struct Out<'a> {
    pub(super) dtype: DType,
    pub(super) out: &'a mut Vec<Tensor>,
}

impl Out<'_> {
    pub(super) fn push(
        &mut self,
        name: String,
        shape: Vec<u64>,
        c: Component,
    ) -> Result<(), CoreError> {
        self.out
            .push(Tensor::new(name, shape, self.dtype, None, c)?);
        Ok(())
    }

    pub(super) fn linear(
        &mut self,
        name: &str,
        inp: u64,
        out: u64,
        bias: bool,
        c: Component,
    ) -> Result<(), CoreError> {
        self.push(format!("{name}.weight"), vec![out, inp], c)?;
        if bias {
            self.push(format!("{name}.bias"), vec![out], c)?;
        }
        Ok(())
    }

    pub(super) fn norm(&mut self, name: &str, kind: NormKind, dim: u64) -> Result<(), CoreError> {
        self.push(format!("{name}.weight"), vec![dim], Component::Norm)?;
        if let NormKind::LayerNorm { bias: true } = kind {
            self.push(format!("{name}.bias"), vec![dim], Component::Norm)?;
        }
        Ok(())
    }
}

/// One encoder block: two norms, attention (fused `qkv` + `proj` for Qwen, `q/k/v/out_proj`
/// for CLIP/SigLIP, all with biases) and the MLP.
pub(super) fn block(v: &Vision, p: &str, o: &mut Out) -> Result<(), CoreError> {
    let t = &v.tower;
    let (h, f) = (t.hidden, t.ffn);
    let (a, m) = (Component::Attention, Component::Mlp);
    let (n1, n2) = match t.kind {
        TowerKind::Qwen | TowerKind::Qwen3 => ("norm1", "norm2"),
        _ => ("layer_norm1", "layer_norm2"),
    };
    o.norm(&format!("{p}.{n1}"), t.norm, h)?;
    match t.kind {
        TowerKind::Qwen | TowerKind::Qwen3 => {
            o.linear(&format!("{p}.attn.qkv"), h, 3 * h, true, a)?;
            o.linear(&format!("{p}.attn.proj"), h, h, true, a)?;
        }
        _ => {
            for proj in ["k_proj", "v_proj", "q_proj", "out_proj"] {
                o.linear(&format!("{p}.self_attn.{proj}"), h, h, true, a)?;
            }
        }
    }
    o.norm(&format!("{p}.{n2}"), t.norm, h)?;
    if t.kind == TowerKind::Qwen3 {
        o.linear(&format!("{p}.mlp.linear_fc1"), h, f, true, m)?;
        o.linear(&format!("{p}.mlp.linear_fc2"), f, h, true, m)
    } else if t.gated {
        o.linear(&format!("{p}.mlp.gate_proj"), h, f, true, m)?;
        o.linear(&format!("{p}.mlp.up_proj"), h, f, true, m)?;
        o.linear(&format!("{p}.mlp.down_proj"), f, h, true, m)
    } else {
        o.linear(&format!("{p}.mlp.fc1"), h, f, true, m)?;
        o.linear(&format!("{p}.mlp.fc2"), f, h, true, m)
    }
}

/// `SiglipMultiheadAttentionPoolingHead` (`modeling_siglip.py`): the `probe` row, a
/// `torch.nn.MultiheadAttention` (packed `in_proj_weight` `[3h, h]` with its bias, `out_proj`),
/// a LayerNorm and a SigLIP MLP.
pub(super) fn siglip_head(v: &Vision, p: &str, o: &mut Out) -> Result<(), CoreError> {
    let (h, f) = (v.tower.hidden, v.tower.ffn);
    let (a, m) = (Component::Attention, Component::Mlp);
    o.push(format!("{p}.probe"), vec![1, 1, h], Component::Embedding)?;
    o.push(format!("{p}.attention.in_proj_weight"), vec![3 * h, h], a)?;
    o.push(format!("{p}.attention.in_proj_bias"), vec![3 * h], a)?;
    o.linear(&format!("{p}.attention.out_proj"), h, h, true, a)?;
    o.norm(&format!("{p}.layernorm"), v.tower.norm, h)?;
    o.linear(&format!("{p}.mlp.fc1"), h, f, true, m)?;
    o.linear(&format!("{p}.mlp.fc2"), f, h, true, m)
}
