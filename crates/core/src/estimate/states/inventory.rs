//! The model states from the inventory: weights as stored on the rank, the trained states summed
//! over the shape classes and adapters, then sharded as the job says.

use super::adapters::add_adapters;
use super::buffers::buffers_and_offload;
use super::full::full_training;
use super::lora_match::{adapters_of, conv1d_weights, lora_modules};
use super::modules_to_save;
use super::profiles::Widths;
use super::rules::Rules;
use super::step_scratch::step_scratch;
use super::stored::{stored_bytes, unquantized_bytes};
use super::sums::Sums;
use super::{add_main_grads, div_ceil, StateBytes};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::optimizer;
use crate::estimate::overhead::round_size;
use crate::inventory::{Inventory, Tensor};
use crate::job::{Framework, ResolvedJob, Task};
use crate::report::ModelStates;

/// The model states from the inventory: weights as stored, then for a full fine-tune each
/// class's gradients, master copy and optimizer states, for PEFT the adapters; then sharded.
pub(super) fn inventory_states(
    model: &ModelInput,
    inv: &Inventory,
    job: &ResolvedJob,
    w: Widths,
    shard: (u64, u64, u64),
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let (_, _, ss) = shard;
    let r = Rules::of(model, job, w);
    let adapters = match r.peft {
        Some(p) => {
            let conv1d = conv1d_weights(model.spec.as_ref());
            let modules = model.memo().lora_modules(&p.targets, || {
                lora_modules(&inv.tensors, &p.targets, conv1d)
            });
            adapters_of(&modules, &p.targets, p.rank)?
        }
        None => Vec::new(),
    };
    let tl = inv.tallies();
    let mut out = StateBytes {
        layer_grads: vec![0; r.layers],
        ..StateBytes::default()
    };
    let mut sums = Sums {
        params: weights_on_rank(model, inv, job, &r)?,
        ..Sums::default()
    };
    let trained = if r.full {
        full_training(tl, &r, &mut sums, &mut out)?
    } else {
        Vec::new()
    };
    let adapter_shapes = add_adapters(&adapters, &r, &mut sums, &mut out)?;
    let saved_scratch = modules_to_save::add_saved_modules(&inv.tensors, &r, &mut sums, &mut out)?;
    let shared = if sums.any_8bit {
        optimizer::BNB_QMAP_BYTES
    } else {
        0
    };
    sums.states = shared.saturating_add(sums.states);
    let scratch = step_scratch(inv, &r, &trained, &adapter_shapes)?.saturating_add(saved_scratch);
    out.step_scratch = div_ceil(scratch, ss * job.parallel.tp.max(1));
    out.trainable_params = if job.task == Task::Train {
        sums.trainable
    } else {
        0
    };
    shard_states(&mut out, &sums, job, shard);
    let largest_block = tl
        .layers
        .iter()
        .filter(|l| (l.layer as usize) < r.layers)
        .map(|l| l.elements)
        .max()
        .unwrap_or(0);
    let elements = inv.tensors.iter().map(Tensor::elements).sum::<u64>() / job.parallel.tp.max(1);
    let sizes = (largest_block, elements);
    buffers_and_offload(&mut out, job, sizes, w.param, w.grad, warnings);
    out.max = out.resident;
    let main_grads = sums.trainable.saturating_mul(w.main_grad);
    add_main_grads(&mut out, div_ceil(main_grads, ss * job.parallel.tp.max(1)));
    out.paged_states = if job.parallel.offload == crate::job::Offload::None {
        div_ceil(sums.paged, ss * job.parallel.tp.max(1))
    } else {
        0
    };
    if job.task == Task::Train && job.techniques.optimizer_in_backward {
        crate::estimate::techniques::steps_in_backward(&mut out);
    }
    Ok(out)
}

/// Bytes of the weights on the most-loaded rank as they sit on the GPU ([`stored_bytes`]),
/// expert weights divided over EP ranks. Without a quantized format a weight's bytes follow
/// from its class; a quantized format's choice reads each tensor's name and place.
fn weights_on_rank(
    model: &ModelInput,
    inv: &Inventory,
    job: &ResolvedJob,
    r: &Rules,
) -> Result<u64, CoreError> {
    let weights = crate::estimate::weights::effective_weights(model, job)?;
    if weights.is_none() {
        let tl = inv.tallies();
        let mut params = 0u64;
        for (_, c, n) in r.on_rank_groups(tl) {
            let class = &tl.classes[c as usize];
            let bytes = unquantized_bytes(class.dtype, class.bytes, class.elements, r.frozen_width);
            let one = round_size(bytes) / r.ep_share(class.component);
            params = params.saturating_add(one.saturating_mul(n));
        }
        return Ok(params);
    }
    let qctx = model
        .spec
        .as_ref()
        .map(crate::estimate::quant::QuantContext::from_spec)
        .unwrap_or_default();
    // Outside GGUF's per-layer mixes a weight's bytes follow from its class and whether the
    // format quantizes it (a rule on its name): each is computed once, at its first tensor.
    let per_tensor = matches!(weights, crate::estimate::quant::WeightFormat::Gguf(_));
    let tl = inv.tallies();
    let mut known: Vec<[Option<u64>; 2]> = vec![[None; 2]; tl.classes.len()];
    let mut params = 0u64;
    for (t, &c) in inv.tensors.iter().zip(&tl.tensor_class) {
        if !r.on_rank(t.layer, t.component) {
            continue;
        }
        let q = usize::from(crate::estimate::quant::is_quantized(&weights, t));
        let stored = match known[c as usize][q] {
            Some(b) if !per_tensor => b,
            _ => {
                let b = stored_bytes(&weights, &qctx, t, r.frozen_width)?;
                known[c as usize][q] = Some(b);
                b
            }
        };
        params = params.saturating_add(stored / r.ep_share(t.component));
    }
    Ok(params)
}

/// Each state divided as the job's sharding says (tensor parallelism divides them all), and
/// the per-layer gradient figures scaled to the shard the GPU keeps.
fn shard_states(
    out: &mut StateBytes,
    sums: &Sums,
    job: &ResolvedJob,
    (sp, sg, ss): (u64, u64, u64),
) {
    let tp = job.parallel.tp.max(1);
    out.resident = ModelStates {
        parameters: div_ceil(sums.params, sp * tp),
        gradients: div_ceil(sums.grads, sg * tp),
        optimizer_states: div_ceil(sums.states, ss * tp),
        master_weights: div_ceil(sums.master, ss * tp),
    };
    // Unsharded gradients appear layer by layer and are reduce-scattered after; per-layer
    // figures are scaled to the shard the GPU keeps.
    let scale = |x: u64| div_ceil(x, sg * tp);
    out.layer_grads.iter_mut().for_each(|g| *g = scale(*g));
    out.head_grad = scale(out.head_grad);
    out.embedding_grad = scale(out.embedding_grad);
    out.embedding_backward_transient = scale(out.embedding_backward_transient);
    // DeepSpeed's mixed-precision optimizer upcasts its gradient partition to fp32 for the
    // step (`stage_1_and_2.py`: `single_partition_of_fp32_groups[i].grad`), freed after it.
    if job.framework == Framework::Deepspeed && job.precision.is_mixed() && job.task == Task::Train
    {
        out.step_scratch += div_ceil(sums.trainable.saturating_mul(4), ss * tp);
    }
}
