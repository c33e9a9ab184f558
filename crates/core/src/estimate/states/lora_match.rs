//! Which modules LoRA adapts (PEFT `LoraConfig.target_modules`, matched by suffix, GGUF names
//! too) and the adapters' sizes at the job's rank.

use crate::error::CoreError;
use crate::estimate::lora_modules::LoraModules;
use crate::inventory::Tensor;

/// LoRA adapter tensors for the job's targets: A (r × in) and B (out × r) beside every 2-D
/// weight whose module name is a target (PEFT `LoraConfig.target_modules` matching by suffix).
pub fn lora_adapters(
    tensors: &[Tensor],
    targets: &[String],
    rank: u64,
) -> Result<Vec<(Option<u32>, u64)>, CoreError> {
    adapters_of(&lora_modules(tensors, targets), targets, rank)
}

/// Matches the targets against the tensors' module names ([`LoraModules`]).
pub fn lora_modules(tensors: &[Tensor], targets: &[String]) -> LoraModules {
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
                modules.push((t.layer, t.shape[1].saturating_add(t.shape[0])));
                break;
            }
        }
    }
    LoraModules {
        modules,
        unmatched: matched.iter().position(|m| !m),
    }
}

/// The adapters' sizes at `rank`: r × (in + out) elements per adapted module (A and B).
pub fn adapters_of(
    m: &LoraModules,
    targets: &[String],
    rank: u64,
) -> Result<Vec<(Option<u32>, u64)>, CoreError> {
    let mut out = Vec::with_capacity(m.modules.len());
    for &(layer, in_out) in &m.modules {
        let n = rank
            .checked_mul(in_out)
            .ok_or_else(|| CoreError::Overflow {
                what: "LoRA adapter size".into(),
            })?;
        out.push((layer, n));
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
