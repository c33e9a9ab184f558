//! Which modules LoRA adapts (PEFT `LoraConfig.target_modules`, matched by suffix, GGUF names
//! too) and the adapters' sizes at the job's rank.

use crate::error::CoreError;
use crate::estimate::lora_modules::{LoraAdapter, LoraModule, LoraModules};
use crate::inventory::Tensor;
use crate::model::{ModelSpec, Naming};

/// LoRA adapter tensors for the job's targets: A `[r, in]` and B `[out, r]` beside every 2-D
/// weight whose module name is a target (PEFT `LoraConfig.target_modules` matching by suffix).
/// `conv1d`: the weights are transformers' `Conv1D` (`[in, out]`: [`conv1d_weights`]).
pub fn lora_adapters(
    tensors: &[Tensor],
    targets: &[String],
    rank: u64,
    conv1d: bool,
) -> Result<Vec<LoraAdapter>, CoreError> {
    adapters_of(&lora_modules(tensors, targets, conv1d), targets, rank)
}

/// Whether the model's projections are transformers' `Conv1D` (GPT-2: weight `[in, out]`,
/// `pytorch_utils.py`), whose features PEFT reads from the weight's shape in that order
/// (`LoraLayer.__init__`: `in_features, out_features = base_layer.weight.shape` for `Conv1D`);
/// an `nn.Linear` is `[out, in]`.
pub fn conv1d_weights(spec: Option<&ModelSpec>) -> bool {
    spec.is_some_and(|s| s.naming == Naming::Gpt2)
}

/// Matches the targets against the tensors' module names ([`LoraModules`]); `conv1d`: the
/// weights are `[in, out]` ([`conv1d_weights`]).
pub fn lora_modules(tensors: &[Tensor], targets: &[String], conv1d: bool) -> LoraModules {
    let mut modules = Vec::new();
    let mut matched = vec![false; targets.len()];
    // GGUF files name the same projections llama.cpp's way (`blk.N.attn_q`).
    let gguf_names: Vec<&str> = targets.iter().map(|t| gguf_module(t)).collect();
    // `part:module` aims a target at one component of a vision-language model
    // (`language:q_proj`); a bare module name matches in every component, as PEFT's suffix
    // matching does.
    let split: Vec<(Option<crate::vision::Part>, &str)> = targets
        .iter()
        .map(|t| crate::vision::split_target(t))
        .collect();
    for t in tensors {
        if t.shape.len() != 2 || !t.name.ends_with(".weight") {
            continue;
        }
        let mut module = t.name.as_str();
        while let Some(m) = module.strip_suffix(".weight") {
            module = m;
        }
        let leaf = module.rsplit('.').next().unwrap_or(module);
        for (i, (&(part, target), gguf)) in split.iter().zip(&gguf_names).enumerate() {
            if part.is_some_and(|p| p != t.part) {
                continue;
            }
            let dotted = module
                .strip_suffix(target)
                .is_some_and(|p| p.ends_with('.'));
            if leaf == target || leaf == *gguf || dotted {
                matched[i] = true;
                let (in_features, out_features) = if conv1d {
                    (t.shape[0], t.shape[1])
                } else {
                    (t.shape[1], t.shape[0])
                };
                modules.push(LoraModule {
                    layer: t.layer,
                    in_features,
                    out_features,
                });
                break;
            }
        }
    }
    LoraModules {
        modules,
        unmatched: matched.iter().position(|m| !m),
    }
}

/// The adapters at `rank`, one [`LoraAdapter`] (A `[r, in]`, B `[out, r]`) per adapted
/// module, in module order.
pub fn adapters_of(
    m: &LoraModules,
    targets: &[String],
    rank: u64,
) -> Result<Vec<LoraAdapter>, CoreError> {
    let mut out = Vec::with_capacity(m.modules.len());
    for md in &m.modules {
        let fits = |a: u64, b: u64| a.checked_mul(b).is_some();
        let total = md.in_features.checked_add(md.out_features);
        if !(fits(rank, md.in_features) && total.is_some_and(|t| fits(rank, t))) {
            return Err(CoreError::Overflow {
                what: "LoRA adapter size".into(),
            });
        }
        out.push(LoraAdapter {
            layer: md.layer,
            a: [rank, md.in_features],
            b: [md.out_features, rank],
        });
    }
    if let Some(i) = m.unmatched {
        return Err(CoreError::field(
            "peft.targets",
            format!("the model has no module named '{}'", targets[i]),
        ));
    }
    Ok(out)
}

/// A Hugging Face projection's name in GGUF files (llama.cpp's `blk.N.attn_q`).
fn gguf_module(target: &str) -> &str {
    match target {
        "q_proj" => "attn_q",
        "k_proj" => "attn_k",
        "v_proj" => "attn_v",
        "o_proj" => "attn_output",
        "gate_proj" => "ffn_gate",
        "up_proj" => "ffn_up",
        "down_proj" => "ffn_down",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::inventory::Component;

    fn weight(name: &str, shape: [u64; 2]) -> Tensor {
        let c = Component::Attention;
        Tensor::new(
            format!("{name}.weight"),
            shape.to_vec(),
            DType::F32,
            Some(0),
            c,
        )
        .unwrap()
    }

    /// Read off PEFT 0.21.2 on CPU (`get_peft_model`, `named_parameters`): a Llama `k_proj`
    /// `[128, 256]` at r 8 gets `lora_A` (8, 256) then `lora_B` (128, 8); GPT-2's `Conv1D`
    /// `c_attn` `[64, 192]` (in, out) at r 4 gets `lora_A` (4, 64) then `lora_B` (192, 4).
    #[test]
    fn a_is_r_by_in_and_b_out_by_r_for_linear_and_conv1d() {
        let t = [weight("model.layers.0.self_attn.k_proj", [128, 256])];
        let got = lora_adapters(&t, &["k_proj".into()], 8, false).unwrap();
        assert_eq!((got[0].a, got[0].b), ([8, 256], [128, 8]));
        let t = [weight("transformer.h.0.attn.c_attn", [64, 192])];
        let got = lora_adapters(&t, &["c_attn".into()], 4, true).unwrap();
        assert_eq!((got[0].a, got[0].b), ([4, 64], [192, 4]));
        assert_eq!(got[0].elements(), 4 * 64 + 192 * 4);
    }
}
