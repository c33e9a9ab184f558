//! Model states — parameters, gradients, optimizer states, master weights — as each framework
//! keeps them, sharded as the job's parallel layout says, and LoRA/QLoRA's trainable subset.
//!
//! By concept: `profiles` (each framework's widths and sharding), `inventory` (states from the
//! tensors) or `bare_count` (from a parameter count alone), `rules` (what one job trains and
//! which tensors its most-loaded rank holds), `full` (a full fine-tune's classes), `adapters`
//! and `lora_match` (LoRA), `modules_to_save`, `sums` (the trained states before sharding),
//! `step_scratch` (the optimizer step's temporaries), `buffers` (communication buffers and
//! offload), `stored` (a weight's bytes as it sits on the GPU).

mod adapters;
mod bare_count;
mod buffers;
mod full;
mod inventory;
mod lora_match;
mod modules_to_save;
mod profiles;
mod rules;
mod step_scratch;
mod stored;
mod sums;

use bare_count::bare_count_states;
pub use buffers::{DS_PREFETCH_BUCKET, DS_REDUCE_BUCKET};
use inventory::inventory_states;
pub use lora_match::{adapters_of, conv1d_weights, lora_adapters, lora_modules};
pub use modules_to_save::named as saved_module;
use profiles::{shards, widths};
pub use stored::{stored_bytes, stored_bytes_exact};

use super::input::ModelInput;
pub use super::lora_modules::{LoraAdapter, LoraModule, LoraModules};
use super::optimizer;
pub use super::state_bytes::StateBytes;
use crate::error::CoreError;
use crate::job::{Optimizer, ResolvedJob, Task};

pub(super) fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// The model states of the job's most-loaded GPU: from the inventory's shape tallies when the
/// model has tensors, from the bare parameter count otherwise.
pub fn model_states(
    model: &ModelInput,
    job: &ResolvedJob,
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let w = widths(job);
    let shard = shards(job, warnings);
    let mut st = match &model.inventory {
        Some(inv) => inventory_states(model, inv, job, w, shard, warnings),
        None => bare_count_states(model, job, w, shard, warnings),
    }?;
    if let Some(audio) = model
        .inventory
        .as_ref()
        .and_then(|inv| inv.by_part().remove(&crate::vision::Part::Audio))
    {
        warnings.push(format!(
            "audio inputs are not modelled: the audio tower's {} parameters are loaded, not run",
            audio.params
        ));
    }
    super::techniques::add_reference_model(job, &mut st);
    Ok(st)
}

/// The optimizer a job runs: none outside training.
pub(super) fn job_optimizer(job: &ResolvedJob) -> Optimizer {
    if job.task == Task::Train {
        job.optimizer
    } else {
        Optimizer::None
    }
}

/// Whether bitsandbytes gives a tensor of this shape 8-bit states (and so makes its shared
/// maps): [`optimizer::shared_state_bytes`] of the one shape.
pub(super) fn eight_bit(opt: Optimizer, shape: &[u64]) -> bool {
    optimizer::shared_state_bytes(opt, [shape]) > 0
}

/// The optimizer's fp32 gradient copies (`Widths::main_grad`): made at the step, freed after
/// it, so step scratch, and part of the gradients' maximum over the step (`model_states`).
pub(super) fn add_main_grads(out: &mut StateBytes, bytes: u64) {
    out.step_scratch = out.step_scratch.saturating_add(bytes);
    out.max.gradients = out.max.gradients.saturating_add(bytes);
}
