//! The planner's coefficients of a LoRA / QLoRA job: the frozen base's stored bytes and the
//! adapters' elements by part, and the optimizer's state bytes per trainable element (moved
//! out of `plan.rs` unchanged).

use crate::error::CoreError;
use crate::estimate::ModelInput;
use crate::inventory::Component;
use crate::job::ResolvedJob;

/// A PEFT job's model states as `estimate::states` keeps them: the frozen base stored in 16
/// bits (or its quantized format) with no gradient, master or optimizer state, and adapters in
/// `peft.adapter_dtype` (fp32 by default) with gradients and optimizer states alike.
pub(super) struct PeftCoeffs {
    /// Stored bytes of the frozen base: embeddings, all blocks, the head.
    pub(super) frozen_embed: u64,
    pub(super) frozen_blocks: u64,
    pub(super) frozen_head: u64,
    /// Adapter elements in all blocks and outside them.
    pub(super) adapters_blocks: u64,
    pub(super) adapters_other: u64,
    /// Bytes of the trainable copies of `peft.modules_to_save`, in the base's width (their
    /// gradients alike; `estimate::states::modules_to_save`), and their elements.
    pub(super) saved_bytes: u64,
    pub(super) saved_elements: u64,
}

/// Optimizer-state bytes per trainable element of `width` bytes (`estimate::optimizer`: two
/// moments in the parameter's dtype for torch's Adam/AdamW, one for momentum SGD and Lion, two
/// fp32 ones for bitsandbytes' 32-bit paged AdamW, 8-bit blocks for bitsandbytes).
pub(super) fn state_bytes_per_element(opt: crate::job::Optimizer, width: u64) -> u64 {
    use crate::job::Optimizer as O;
    match opt {
        O::Adam | O::AdamW | O::AdamWFused => 2 * width,
        O::AdamWPaged => 8,
        O::SgdMomentum | O::Lion => width,
        O::AdamW8bit | O::AdamW8bitPaged => 2,
        O::Adafactor | O::Sgd | O::None => 0,
    }
}

/// The frozen base's stored bytes and the adapters' elements, by part.
pub(super) fn peft_coeffs(
    model: &ModelInput,
    base: &ResolvedJob,
    inv: &crate::inventory::Inventory,
) -> Result<Option<PeftCoeffs>, CoreError> {
    use crate::estimate::{quant, states};
    let Some(p) = &base.peft else { return Ok(None) };
    let weights = crate::estimate::effective_weights(model, base)?;
    let qctx = model
        .spec
        .as_ref()
        .map(quant::QuantContext::from_spec)
        .unwrap_or_default();
    let width = if base.precision == crate::job::Precision::Fp32 {
        4
    } else {
        2
    };
    let mut c = PeftCoeffs {
        frozen_embed: 0,
        frozen_blocks: 0,
        frozen_head: 0,
        adapters_blocks: 0,
        adapters_other: 0,
        saved_bytes: 0,
        saved_elements: 0,
    };
    for t in &inv.tensors {
        if states::saved_module(t, &p.modules_to_save) {
            c.saved_bytes += t.elements() * width;
            c.saved_elements += t.elements();
        }
        let b = states::stored_bytes(&weights, &qctx, t, width)?;
        match (t.layer, t.component) {
            (Some(_), _) => c.frozen_blocks += b,
            (None, Component::Embedding) => c.frozen_embed += b,
            (None, _) => c.frozen_head += b,
        }
    }
    let conv1d = states::conv1d_weights(model.spec.as_ref());
    for a in states::lora_adapters(&inv.tensors, &p.targets, p.rank, conv1d)? {
        match a.layer {
            Some(_) => c.adapters_blocks += a.elements(),
            None => c.adapters_other += a.elements(),
        }
    }
    Ok(Some(c))
}
