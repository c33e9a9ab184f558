//! Where a model-parallel layout puts the forward's activations (a child of `activations.rs`):
//! the most-loaded rank's blocks under Megatron's per-layer bytes or tensor and context
//! splits, the vocabulary-parallel head and loss, and the first pipeline stage's micro-batches
//! in flight.

use super::{LayerPlan, LossMemory, StageMemory};
use crate::job::{Checkpointing, ResolvedJob, Task};
use crate::model::ModelSpec;

/// What [`distribute`] places on a rank: the blocks, the head, the logits and the loss.
pub(super) struct Parts {
    pub(super) layers: Vec<LayerPlan>,
    pub(super) head: StageMemory,
    pub(super) logits: u64,
    pub(super) loss: LossMemory,
}

/// The most-loaded rank of a model-parallel layout: the first pipeline stage keeps
/// ⌈L/pp⌉ blocks, each for up to `pp` micro-batches in flight under 1F1B (Narayanan et al.
/// 2021 §2.2; Korthikanti et al. 2022 §4.2.3: "the first stage must store the activations of p
/// micro-batches", L layers' worth in all); the head and the loss live on the last stage.
/// Megatron's blocks keep Korthikanti's per-layer bytes (tensor and sequence parallelism
/// included); elsewhere tensor and context parallelism divide each block's activations.
pub(super) fn distribute(
    spec: &ModelSpec,
    job: &ResolvedJob,
    mut parts: Parts,
    megatron_per_layer: u64,
    megatron: bool,
    warnings: &mut Vec<String>,
) -> Parts {
    let par = &job.parallel;
    let (tp, cp) = (par.tp.max(1), par.cp.max(1));
    if job.task == Task::Train && megatron {
        megatron_blocks(job, &mut parts.layers, megatron_per_layer);
    } else if tp * cp > 1 {
        if job.task == Task::Train {
            warnings.push(format!(
                "tensor/context parallelism with framework {} is approximated by dividing each \
                 block's activations by tp × cp = {}; use framework megatron for its exact \
                 accounting",
                job.framework.as_str(),
                tp * cp
            ));
        }
        split_blocks(&mut parts.layers, tp, cp);
    }
    if tp > 1 {
        parts = vocab_parallel(parts, tp);
    }
    if par.pp.max(1) == 1 {
        return parts;
    }
    first_pipeline_stage(spec, job, parts.layers, warnings)
}

/// Megatron's blocks: Korthikanti's per-layer bytes, each rank's share. Context parallelism
/// gives each rank s/cp of the tokens (their queries against all keys): every term of
/// Korthikanti's per-layer bytes divides by cp (Megatron-Core context parallel docs:
/// "activation memory per GPU is CP times smaller").
fn megatron_blocks(job: &ResolvedJob, layers: &mut [LayerPlan], per_layer: u64) {
    let (tp, cp) = (job.parallel.tp.max(1), job.parallel.cp.max(1));
    for l in layers {
        let transient = l.forward_peak.saturating_sub(l.kept);
        l.kept = per_layer / cp;
        l.weight_copies = 0;
        l.cached_copies = 0;
        l.forward_peak = (per_layer + transient / tp) / cp;
        // Megatron's kept bytes are its own formula: the backward's net scratch alone.
        l.backward_transient = l.backward_transient.saturating_sub(l.backward_released) / (tp * cp);
        l.backward_released = 0;
        l.backward_accumulate = None;
        if job.checkpointing == Checkpointing::Full {
            l.recomputed /= tp * cp;
        }
    }
}

/// Tensor and context parallelism outside Megatron, approximated: each block's activations
/// divided by tp × cp, its weight copies by tp.
fn split_blocks(layers: &mut [LayerPlan], tp: u64, cp: u64) {
    for l in layers {
        l.kept /= tp * cp;
        l.weight_copies /= tp;
        l.cached_copies /= tp;
        l.forward_peak /= tp * cp;
        l.backward_transient /= tp * cp;
        l.backward_released /= tp * cp;
        l.backward_accumulate = None;
        l.recomputed /= tp * cp;
    }
}

/// Vocabulary-parallel head and cross-entropy (Megatron `VocabParallelEmbedding`,
/// `vocab_parallel_cross_entropy`): each TP rank holds b·s·V/t of the logits.
fn vocab_parallel(parts: Parts, tp: u64) -> Parts {
    let Parts {
        layers,
        head,
        logits,
        loss,
    } = parts;
    Parts {
        layers,
        head: StageMemory {
            kept: head.kept / tp,
            peak: head.peak / tp,
            weight_copies: head.weight_copies / tp,
        },
        logits: logits / tp,
        loss: LossMemory {
            saved: loss.saved / tp,
            forward_transient: loss.forward_transient / tp,
            backward_transient: loss.backward_transient / tp,
            dlogits: loss.dlogits / tp,
        },
    }
}

/// The first pipeline stage: ⌈L/pp⌉ blocks, each kept for the micro-batches in flight under
/// 1F1B (training; one under inference); the head and loss sit on the last stage.
fn first_pipeline_stage(
    spec: &ModelSpec,
    job: &ResolvedJob,
    mut layers: Vec<LayerPlan>,
    warnings: &mut Vec<String>,
) -> Parts {
    let par = &job.parallel;
    let pp = par.pp.max(1);
    let per_stage = (spec.num_layers() as usize).div_ceil(pp as usize);
    let in_flight = if job.task == Task::Train {
        pp.min(par.microbatches.max(1))
    } else {
        1
    };
    layers.truncate(per_stage);
    for l in &mut layers {
        l.kept *= in_flight;
        l.weight_copies *= in_flight;
        l.cached_copies *= in_flight;
    }
    if job.task == Task::Train {
        warnings.push(format!(
            "per-GPU figures are the first pipeline stage's: {per_stage} of {} layers, {in_flight} \
             micro-batch(es) in flight (1F1B); the head and loss sit on the last stage",
            spec.num_layers()
        ));
    }
    Parts {
        layers,
        head: StageMemory::default(),
        logits: 0,
        loss: LossMemory::default(),
    }
}
