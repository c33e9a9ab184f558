//! PEFT's `modules_to_save` (axolotl `lora_modules_to_save`): modules trained in full beside
//! the adapters. PEFT wraps each in a `ModulesToSaveWrapper` (`peft/utils/other.py`): the
//! `original_module` stays, frozen, and `modules_to_save[adapter]` is a `copy.deepcopy` of it
//! with `requires_grad` on, the one the forward runs. So each such weight is held twice (the
//! frozen original among the model's weights, the trainable copy here, in the dtype the base
//! was loaded in: PEFT's `autocast_adapter_dtype` upcasts only the adapter layers), and the
//! copy has a gradient of its own dtype and optimizer states (`zeros_like(param)`).

use super::rules::Rules;
use super::sums::Sums;
use super::{eight_bit, StateBytes};
use crate::error::CoreError;
use crate::estimate::optimizer;
use crate::estimate::overhead::round_size;
use crate::inventory::{Component, Tensor};

/// Whether a tensor belongs to one of the named modules, by PEFT's rule for module names: the
/// whole name or its last dotted parts (`embed_tokens` matches `model.embed_tokens`).
pub fn named(t: &Tensor, names: &[String]) -> bool {
    let module = t
        .name
        .strip_suffix(".weight")
        .or_else(|| t.name.strip_suffix(".bias"))
        .unwrap_or(&t.name);
    names.iter().any(|n| {
        module == n
            || module
                .strip_suffix(n.as_str())
                .is_some_and(|p| p.ends_with('.'))
    })
}

/// Adds the trainable copies of the job's `modules_to_save` on this rank: their weights,
/// gradients (placed in the backward of their layer, the head or the embeddings) and
/// optimizer states; returns their optimizer step's scratch, unsharded.
pub(super) fn add_saved_modules(
    tensors: &[Tensor],
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<u64, CoreError> {
    let Some(names) = r.peft.map(|p| &p.modules_to_save).filter(|m| !m.is_empty()) else {
        return Ok(0);
    };
    let width = r.frozen_width;
    let mut shapes: Vec<&[u64]> = Vec::new();
    for t in tensors {
        if !r.on_rank(t.layer, t.component) || !named(t, names) {
            continue;
        }
        let bytes = round_size(t.elements().saturating_mul(width));
        sums.params = sums.params.saturating_add(bytes);
        sums.grads = sums.grads.saturating_add(bytes);
        sums.trainable = sums.trainable.saturating_add(t.elements());
        for st in optimizer::state_tensors(r.opt, &t.shape, width)? {
            sums.states = sums.states.saturating_add(round_size(st.bytes));
        }
        let paged = round_size(optimizer::paged_state_bytes(r.opt, &t.shape)?);
        sums.paged = sums.paged.saturating_add(paged);
        sums.any_8bit |= eight_bit(r.opt, &t.shape);
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&t.shape, width)])?;
        out.hook_step
            .add(t.layer, t.component, false, bytes, round_size(scratch));
        match (t.layer, t.component) {
            (Some(l), _) => {
                if let Some(g) = out.layer_grads.get_mut(l as usize) {
                    *g += bytes;
                }
            }
            (None, Component::Head) => out.head_grad += bytes,
            (None, _) => out.embedding_grad += bytes,
        }
        shapes.push(&t.shape);
    }
    let runs: Vec<(&[u64], u64)> = shapes.into_iter().map(|s| (s, width)).collect();
    optimizer::step_scratch_bytes(r.opt, &runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str) -> Tensor {
        let dtype = crate::dtype::DType::BF16;
        Tensor::new(name.into(), vec![4, 4], dtype, None, Component::Embedding).unwrap()
    }

    /// PEFT matches `embed_tokens` against `model.embed_tokens` and `lm_head` against itself,
    /// not `q_proj` against `model.layers.0.self_attn.q_proj_extra`.
    #[test]
    fn names_match_as_peft_matches_them() {
        let names = vec!["embed_tokens".to_string(), "lm_head".to_string()];
        assert!(named(&tensor("model.embed_tokens.weight"), &names));
        assert!(named(&tensor("lm_head.weight"), &names));
        assert!(!named(&tensor("model.my_embed_tokens.weight"), &names));
        assert!(!named(
            &tensor("model.layers.0.self_attn.q_proj.weight"),
            &names
        ));
    }
}
