//! When no change of a serving job's own engine fits — a model larger than the GPU under
//! vLLM, SGLang or transformers — the way such a model is run on one card: llama.cpp with a
//! GGUF quant and the layers that do not fit in host RAM (`src/llama-model.cpp` `load_tensors`
//! puts the last `-ngl` blocks on the GPU and the rest on the CPU; `engines::llamacpp::split`).

use super::{flags, Advice};
use crate::error::CoreError;
use crate::estimate::ModelInput;
use crate::job::{Framework, ResolvedJob, Task};

/// What switching engines costs, in the points of the cost order (`techniques`): another
/// program to run, on top of what its own techniques give up.
const SWITCH_COST: u32 = 4;

/// The job under llama.cpp: one GPU, its engine's defaults (every layer on the GPU, f16 KV),
/// the model's weights as stored (the advice then picks a GGUF quant). `None` where the switch
/// does not apply: not inference, already a GGUF engine, several GPUs (a layout llama.cpp's
/// layer split, not modelled here, would serve), or no tensors to split.
fn to_llamacpp(model: &ModelInput, job: &ResolvedJob) -> Option<ResolvedJob> {
    // An engine that holds every layer on the GPU (not a training framework).
    let engine =
        crate::engines::settings::spec(job.framework).is_some_and(|e| e.layers_flag().is_none());
    if job.task != Task::Infer || !engine || job.parallel.gpus != 1 {
        return None;
    }
    model.inventory.as_ref()?;
    model.spec.as_ref()?;
    let mut j = job.clone();
    j.framework = Framework::LlamaCpp;
    j.engine = Default::default();
    // vLLM's fp8 or transformers' int8 KV are not llama.cpp cache types (the advice may
    // choose q8_0 / q4_0).
    j.kv_dtype = None;
    Some(j)
}

/// The advice for `job` run under llama.cpp instead, each entry's flags and changes taken
/// from the original job (`--framework llama.cpp` first); empty where the switch does not
/// apply or nothing fits there either.
pub(super) fn advise_llamacpp(
    model: &ModelInput,
    job: &ResolvedJob,
) -> Result<Vec<Advice>, CoreError> {
    let Some(switched) = to_llamacpp(model, job) else {
        return Ok(Vec::new());
    };
    let first = flags::flags(job, &switched);
    let base_changes = flags::changes(job, &switched);
    let found = super::advise(model, &switched)?;
    Ok(found
        .into_iter()
        .map(|a| {
            let mut changes = base_changes.clone();
            changes.extend(a.changes);
            let mut techniques = vec![format!("llama.cpp instead of {}", job.framework.as_str())];
            techniques.extend(a.techniques);
            Advice {
                flags: first.iter().cloned().chain(a.flags).collect(),
                changes,
                gives_up: format!(
                    "another engine: llama.cpp (GGUF weights, the layers that do not fit run on \
                     the CPU); {}",
                    a.gives_up
                ),
                techniques,
                cost: a.cost + SWITCH_COST,
                // Judged against the switched job, not the job that does not fit: no figure.
                time_cost: None,
                ..a
            }
        })
        .collect())
}
