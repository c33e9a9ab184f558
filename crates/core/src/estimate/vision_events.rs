//! A vision-language training step's vision tower as allocator events (issue 30): what the
//! stream (`alloc_events/tower.rs`) writes between the text embeddings and the decoder, read
//! off the same pieces the walk's `vision::tower_forward` sums — the tower's inputs
//! (`vision::tower_inputs`), one block program run per layer (`blocks::block_program`, the
//! walk's `block_memory` with its events), the projector (`vision::projector_memory`) — and
//! the merge of the image features into the text embeddings.
//!
//! Written for Gemma 3 (transformers 5.24 `models/gemma3/modeling_gemma3.py`) and PaliGemma
//! (`models/paligemma/modeling_paligemma.py`, the same order): a SigLIP tower
//! (`SiglipVisionTransformer`: patch embedding, pre-norm encoder layers, `post_layernorm`)
//! under `Gemma3MultiModalProjector` or `PaliGemmaMultiModalProjector`. `Gemma3Model.forward` runs, in order: the text embeddings
//! (`get_input_embeddings()(llm_input_ids)`), `get_image_features` (the tower, then the
//! projector on its last hidden state), `pooler_output.to(inputs_embeds.device,
//! inputs_embeds.dtype)`, `get_placeholder_mask` (`input_ids == image_token_id`, a `[b, s]`
//! bool, `unsqueeze(-1)`: a view) and `inputs_embeds.masked_scatter(special_image_mask,
//! image_features)`. Other towers keep the walk's figures and the packing heuristic.

use super::alloc_events::plan_events::TowerEvents;
use super::blocks::{block_program, Numerics};
use super::stages::StageMemory;
use super::vision::{
    projector_memory, projector_trains, siglip_tower_parts, tower_ctx, tower_images, tower_inputs,
    tower_spec, tower_trains,
};
use crate::error::CoreError;
use crate::job::{Checkpointing, ResolvedJob, Task};
use crate::model::ModelSpec;
use crate::vision::{Projector, TowerKind, Vision};

/// The tower's events for a training job with images on a tower the stream writes
/// ([`written`]); `None` otherwise. `tower` is the walk's figure for the same tower
/// (`vision::tower_forward`), `embedding` the text embeddings' own stage.
pub fn tower_events(
    spec: &ModelSpec,
    job: &ResolvedJob,
    num: Numerics,
    tower: StageMemory,
    embedding: StageMemory,
) -> Result<Option<TowerEvents>, CoreError> {
    let (Some(v), Some(images)) = (spec.vision.as_ref(), job.images) else {
        return Ok(None);
    };
    if job.task != Task::Train || !written(v, job) {
        return Ok(None);
    }
    let (n, cost) = tower_images(v, job, images.count)?;
    let trains = tower_trains(v, job);
    let proj_trains = trains || projector_trains(job);
    let tspec = tower_spec(spec, v);
    let ctx = tower_ctx(&tspec, job, num, (n, cost.tower_seq), trains);
    let (mem, block) = block_program(ctx, &tspec.decoder.layers[0]);
    let (kept, live) = tower_inputs(v, n, cost, num, trains);
    let embeddings = n
        .saturating_mul(cost.tower_seq)
        .saturating_mul(v.tower.hidden)
        .saturating_mul(num.param);
    let stream = super::overhead::round_size(embeddings);
    let (proj_kept, proj_peak) = projector_memory(v, ctx, stream, (n, cost), proj_trains);
    // The embeddings' output is the first block's input here; the rest joins the projector.
    let (_, tail) = siglip_tower_parts(v, n, cost, num, trains);
    let proj_kept = proj_kept + tail;
    let proj_peak = proj_peak + tail;
    // The image tokens of the micro-batch, each a row of the text width in the embeddings'
    // dtype (`.to(inputs_embeds.dtype)`).
    let tokens = job.batch.saturating_mul(job.image_tokens);
    let checkpointed = trains && job.checkpointing == Checkpointing::Full;
    let saved = (mem.kept + mem.weight_copies).saturating_sub(mem.input_freed);
    let layers = u32::try_from(v.tower.layers).unwrap_or(u32::MAX);
    let top = Layers {
        count: layers,
        saved,
        released: if checkpointed { stream } else { saved },
        checkpointed,
        output: stream,
        projector: proj_kept,
        projector_grads: projector_grads(v, num, proj_trains),
    };
    Ok(Some(TowerEvents {
        inputs_kept: kept,
        inputs_transient: live.saturating_sub(kept),
        embeddings,
        layers,
        trains,
        checkpointed,
        projector_kept: proj_kept,
        projector_transient: proj_peak.saturating_sub(proj_kept),
        projector_trains: proj_trains,
        features: tokens
            .saturating_mul(spec.hidden_size)
            .saturating_mul(num.param),
        mask: job.batch.saturating_mul(job.seq),
        prefix_sum: job
            .batch
            .saturating_mul(job.seq)
            .saturating_mul(spec.hidden_size)
            .saturating_mul(8),
        walk_kept: tower.kept,
        embedding_transient: embedding.peak.saturating_sub(embedding.kept),
        backward_top: if trains { backward_top(&block, top) } else { 0 },
        block,
    }))
}

/// The tower's layers as its backward sees them: how many, what one keeps for its backward
/// (`saved`, the walk's per-layer bytes), what one's backward releases (`released`: its saved
/// bytes, or under checkpointing its input alone) and whether each is replayed first.
#[derive(Debug, Clone, Copy)]
struct Layers {
    count: u32,
    saved: u64,
    released: u64,
    checkpointed: bool,
    /// One layer's output (its input's size).
    output: u64,
    /// What the projector kept, released by its backward before the layers' (with the last
    /// layer's output it read), and the gradients its backward made.
    projector: u64,
    projector_grads: u64,
}

/// The projector's weight gradients at the parameters' width: `Gemma3MultiModalProjector`'s
/// `mm_input_projection_weight` `[tower width, text width]` and `mm_soft_emb_norm`'s weight,
/// `PaliGemmaMultiModalProjector.linear`'s weight and bias.
fn projector_grads(v: &Vision, num: Numerics, trains: bool) -> u64 {
    let h = v.tower.hidden;
    let round = super::round_size;
    match v.projector {
        _ if !trains => 0,
        Projector::Gemma3 { out } => round(h * out * num.param) + round(h * num.param),
        Projector::PaliGemma { out } => round(h * out * num.param) + round(out * num.param),
        _ => 0,
    }
}

/// The tower's backward at its fullest, over what the walk holds as it begins (every layer's
/// kept bytes and the projector's, no tower gradient yet), read off the block's autograd
/// sequence (`BlockEvents::backward_peak`) as `alloc_events/tower.rs` runs it: the merge's
/// text gradient takes the decoder's incoming one's place (the same bytes); the projector's
/// backward has made its gradients and released what it kept and the last layer's output
/// (which the walk keeps: the last layer's kept bytes, or the tower's end under
/// checkpointing); layers run newest first,
/// each keeping its linears' weight gradients (`weight_grads`) and releasing what it kept, so
/// with `i` layers done the tower holds `i · (weight gradients − released)` more, and the layer
/// running its own backward's scratch (the incoming gradient, activation gradients, its weight
/// gradients so far) beside its saved tensors — replayed first under checkpointing
/// (`torch.utils.checkpoint`; the replayed output dropped), which the walk's kept bytes (its
/// input alone) do not hold. Linear in `i`: the first or the last layer is the fullest.
fn backward_top(b: &crate::estimate::tape::BlockEvents, l: Layers) -> u64 {
    let round = super::round_size;
    let replay = if l.checkpointed {
        l.saved.saturating_sub(l.output)
    } else {
        0
    };
    let gone = l.projector + l.output;
    let scratch = b.backward_peak(round).net() + replay + l.projector_grads;
    let grads: u64 = b
        .weight_grads
        .iter()
        .map(|&w| round(b.sizes[w as usize]))
        .sum();
    let done = u64::from(l.count.saturating_sub(1));
    let last = (done * grads + scratch).saturating_sub(done * l.released);
    scratch.max(last).saturating_sub(gone)
}

/// Towers the stream writes: Gemma 3's and PaliGemma's — SigLIP (no class token, no pre-norm,
/// every layer's output used, no windows) under their projectors — trained whole or with parts
/// frozen, without adapters (a LoRA'd tower's adapters are not written), under no or full
/// checkpointing.
pub fn written(v: &Vision, job: &ResolvedJob) -> bool {
    let t = &v.tower;
    t.kind == TowerKind::Siglip
        && matches!(
            v.projector,
            Projector::Gemma3 { .. } | Projector::PaliGemma { .. }
        )
        && t.window_patches.is_none()
        && t.layers_used == t.layers
        && job.peft.is_none()
        && job.checkpointing != Checkpointing::Selective
}
