//! LoRA adapters as trainable states: their parameters, gradients and optimizer states in the
//! job's `peft.adapter_dtype`.

use super::rules::Rules;
use super::sums::Sums;
use super::{eight_bit, StateBytes};
use crate::error::CoreError;
use crate::estimate::optimizer;
use crate::estimate::overhead::round_size;
use crate::inventory::Component;

/// LoRA adapters in the job's `peft.adapter_dtype` (PEFT keeps them in fp32 beside a 16-bit or
/// quantized base; torchtune in the recipe's dtype), trainable: their bytes count as parameters
/// and gradients (a gradient has its parameter's dtype), their gradients in their layer's
/// backward, and each gets its optimizer states in that dtype too (torch's Adam makes its
/// moments `zeros_like(param)`; computed once per adapter size). Returns the flat shapes the
/// optimizer sees, as runs of alike neighbours: ([elements], count).
pub(super) fn add_adapters(
    adapters: &[(Option<u32>, u64)],
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<Vec<([u64; 1], u64)>, CoreError> {
    let mut runs: Vec<([u64; 1], u64)> = Vec::new();
    let mut sizes: Vec<(u64, u64)> = Vec::new(); // (elements, adapters)
    let width = adapter_width(r);
    for (layer, n) in adapters {
        let bytes = round_size(n * width);
        sums.params += bytes;
        sums.grads += bytes;
        sums.trainable += n;
        match runs.last_mut() {
            Some((shape, count)) if shape[0] == *n => *count += 1,
            _ => runs.push(([*n], 1)),
        }
        match sizes.iter_mut().find(|(m, _)| m == n) {
            Some((_, count)) => *count += 1,
            None => sizes.push((*n, 1)),
        }
        if let Some(l) = layer.and_then(|l| out.layer_grads.get_mut(l as usize)) {
            *l += bytes;
        }
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&[*n], width)])?;
        let component = if layer.is_some() {
            Component::Attention
        } else {
            Component::Head
        };
        out.hook_step
            .add(*layer, component, false, bytes, round_size(scratch));
    }
    for (n, count) in sizes {
        let mut one = 0u64;
        for st in optimizer::state_tensors(r.opt, &[n], width)? {
            one = one.saturating_add(round_size(st.bytes));
        }
        sums.states = sums.states.saturating_add(one.saturating_mul(count));
        let paged = round_size(optimizer::paged_state_bytes(r.opt, &[n])?);
        sums.paged = sums.paged.saturating_add(paged.saturating_mul(count));
        sums.any_8bit |= eight_bit(r.opt, &[n]);
    }
    Ok(runs)
}

/// Bytes of one adapter element: the job's `peft.adapter_dtype` (fp32 without PEFT).
pub(super) fn adapter_width(r: &Rules) -> u64 {
    r.peft.map_or(4, |p| p.adapter_dtype.bytes())
}
