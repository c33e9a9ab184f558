//! A vision-language training step's vision tower as allocator events (issue 30): what the
//! stream (`alloc_events/tower.rs`) writes between the text embeddings and the decoder, read
//! off the same pieces the walk's `vision::tower_forward` sums — the tower's inputs
//! (`vision::tower_inputs`), one block program run per layer (`blocks::block_program`, the
//! walk's `block_memory` with its events), the projector (`vision::projector_memory`) — and
//! the merge of the image features into the text embeddings.
//!
//! Written for Gemma 3 (transformers 5.24 `models/gemma3/modeling_gemma3.py`): a SigLIP tower
//! (`SiglipVisionTransformer`: patch embedding, pre-norm encoder layers, `post_layernorm`) and
//! `Gemma3MultiModalProjector`. `Gemma3Model.forward` runs, in order: the text embeddings
//! (`get_input_embeddings()(llm_input_ids)`), `get_image_features` (the tower, then the
//! projector on its last hidden state), `pooler_output.to(inputs_embeds.device,
//! inputs_embeds.dtype)`, `get_placeholder_mask` (`input_ids == image_token_id`, a `[b, s]`
//! bool, `unsqueeze(-1)`: a view) and `inputs_embeds.masked_scatter(special_image_mask,
//! image_features)`. Other towers keep the walk's figures and the packing heuristic.

use super::alloc_events::plan_events::TowerEvents;
use super::blocks::{block_program, Numerics};
use super::stages::StageMemory;
use super::vision::{
    gemma3_tower_parts, projector_memory, projector_trains, tower_ctx, tower_images, tower_inputs,
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
    let (_, block) = block_program(ctx, &tspec.decoder.layers[0]);
    let (kept, live) = tower_inputs(v, n, cost, num, trains);
    let embeddings = n
        .saturating_mul(cost.tower_seq)
        .saturating_mul(v.tower.hidden)
        .saturating_mul(num.param);
    let stream = super::overhead::round_size(embeddings);
    let (proj_kept, proj_peak) = projector_memory(v, ctx, stream, (n, cost), proj_trains);
    // The embeddings' output is the first block's input here; the rest joins the projector.
    let (_, tail) = gemma3_tower_parts(v, n, cost, num, trains);
    let proj_kept = proj_kept + tail;
    let proj_peak = proj_peak + tail;
    // The image tokens of the micro-batch, each a row of the text width in the embeddings'
    // dtype (`.to(inputs_embeds.dtype)`).
    let tokens = job.batch.saturating_mul(job.image_tokens);
    Ok(Some(TowerEvents {
        inputs_kept: kept,
        inputs_transient: live.saturating_sub(kept),
        embeddings,
        block,
        layers: u32::try_from(v.tower.layers).unwrap_or(u32::MAX),
        trains,
        checkpointed: trains && job.checkpointing == Checkpointing::Full,
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
    }))
}

/// Towers the stream writes: Gemma 3's — SigLIP (no class token, no pre-norm, every layer's
/// output used, no windows) under `Gemma3MultiModalProjector` — trained whole or with parts
/// frozen, without adapters (a LoRA'd tower's adapters are not written), under no or full
/// checkpointing.
pub fn written(v: &Vision, job: &ResolvedJob) -> bool {
    let t = &v.tower;
    t.kind == TowerKind::Siglip
        && matches!(v.projector, Projector::Gemma3 { .. })
        && t.window_patches.is_none()
        && t.layers_used == t.layers
        && job.peft.is_none()
        && job.checkpointing != Checkpointing::Selective
}
