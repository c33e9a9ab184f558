//! LoRA adapters as trainable states: their parameters, gradients and optimizer states in the
//! job's `peft.adapter_dtype`.

use super::rules::Rules;
use super::sums::Sums;
use super::{eight_bit, StateBytes};
use crate::error::CoreError;
use crate::estimate::lora_modules::LoraAdapter;
use crate::estimate::optimizer;
use crate::estimate::overhead::round_size;
use crate::inventory::Component;

/// LoRA adapters in the job's `peft.adapter_dtype` (PEFT keeps them in fp32 beside a 16-bit or
/// quantized base; torchtune in the recipe's dtype), trainable: each adapter's `lora_A` and
/// `lora_B` ([`LoraAdapter`]) is its own tensor, so each is rounded by the caching allocator
/// apart (`round_size`) and meets the optimizer's per-tensor rules apart (bitsandbytes'
/// `min_8bit_size`, paging ≥ 1e5 elements, Adafactor's factoring of 2-D shapes). Their bytes
/// count as parameters and gradients (a gradient has its parameter's dtype), their gradients
/// in their layer's backward, and each gets its optimizer states in that dtype too (torch's
/// Adam makes its moments `zeros_like(param)`; computed once per shape). Returns the shapes the
/// optimizer sees, in parameter order (A, B per module), as runs of alike neighbours:
/// (shape, count).
pub(super) fn add_adapters(
    adapters: &[LoraAdapter],
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<Vec<([u64; 2], u64)>, CoreError> {
    let mut runs: Vec<([u64; 2], u64)> = Vec::new();
    let mut shapes: Vec<([u64; 2], u64)> = Vec::new(); // (shape, tensors)
    let width = adapter_width(r);
    for (layer, shape) in adapters
        .iter()
        .flat_map(|a| a.tensors().map(|s| (a.layer, s)))
    {
        let n = shape[0].saturating_mul(shape[1]);
        let bytes = round_size(n.saturating_mul(width));
        sums.params += bytes;
        sums.grads += bytes;
        sums.trainable += n;
        if r.engine_casts {
            sums.master += round_size(n.saturating_mul(r.w.master));
        }
        match runs.last_mut() {
            Some((s, count)) if *s == shape => *count += 1,
            _ => runs.push((shape, 1)),
        }
        match shapes.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, count)) => *count += 1,
            None => shapes.push((shape, 1)),
        }
        if let Some(l) = layer.and_then(|l| out.layer_grads.get_mut(l as usize)) {
            *l += bytes;
        }
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&shape, width)])?;
        let component = if layer.is_some() {
            Component::Attention
        } else {
            Component::Head
        };
        out.hook_step
            .add(layer, component, false, bytes, round_size(scratch));
    }
    for (shape, count) in shapes {
        let mut one = 0u64;
        for st in optimizer::state_tensors(r.opt, &shape, state_width(r))? {
            one = one.saturating_add(round_size(st.bytes));
        }
        sums.states = sums.states.saturating_add(one.saturating_mul(count));
        let paged = round_size(optimizer::paged_state_bytes(r.opt, &shape)?);
        sums.paged = sums.paged.saturating_add(paged.saturating_mul(count));
        sums.any_8bit |= eight_bit(r.opt, &shape);
    }
    Ok(runs)
}

/// Bytes of one adapter element: the job's `peft.adapter_dtype` (fp32 without PEFT), or the
/// model's width where the engine casts them (DeepSpeed: [`Rules::engine_casts`]).
pub(super) fn adapter_width(r: &Rules) -> u64 {
    match r.peft {
        Some(_) if r.engine_casts => r.w.param,
        Some(p) => p.adapter_dtype.bytes(),
        None => 4,
    }
}

/// Bytes of one element of an adapter's optimizer states: its own width, or the fp32 master
/// partition's where the engine keeps one ([`Rules::engine_casts`]).
fn state_width(r: &Rules) -> u64 {
    if r.engine_casts {
        r.w.state
    } else {
        adapter_width(r)
    }
}
