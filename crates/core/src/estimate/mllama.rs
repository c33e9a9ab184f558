//! Llama-3.2-Vision's step around the blocks (transformers 5.x `modeling_mllama.py`): the
//! tower (`MllamaVisionModel.forward`) over every tile of each image as one sequence, the
//! projector, the vision states the cross-attention layers read, and the masks the model
//! builds once per forward. The blocks themselves are `blocks/mllama.rs` and the generic
//! programs.

use super::blocks::{block_memory, BlockCtx, BlockMemory};
use super::overhead::round_size;
use super::stages::StageMemory;
use crate::job::{ResolvedJob, Task};
use crate::model::{Layer, ModelSpec};
use crate::vision::{Part, Projector, TowerKind, Vision};

/// Vision tokens of one sequence the cross-attention layers attend over (`images · tiles ·
/// 1601`), 0 without images: then transformers skips the cross-attention layers entirely
/// (`MllamaTextModel.forward`: `continue` when there are no cross-attention states and
/// nothing cached).
pub fn cross_tokens(spec: &ModelSpec, job: &ResolvedJob) -> u64 {
    match (spec.vision.as_ref(), job.images) {
        (Some(v), Some(i)) => v.cross_tokens_per_image().saturating_mul(i.count),
        _ => 0,
    }
}

/// `pixel_values` values of `images` images: `[images, max_num_tiles, channels, tile, tile]`,
/// padding tiles included (`pad_batches_and_tiles` stacks every image at `max_image_tiles`).
pub fn pixel_values(v: &Vision, images: u64) -> u64 {
    let TowerKind::Mllama { tiles, .. } = v.tower.kind else {
        return 0;
    };
    let side = (v.tower.position_rows.saturating_sub(1) as f64).sqrt() as u64 * v.tower.patch;
    images
        .saturating_mul(tiles)
        .saturating_mul(v.tower.channels)
        .saturating_mul(side.saturating_mul(side))
}

/// What the tower and the projector keep and their top for `ctx.batch` images (one sequence
/// of `ctx.seq = tiles · 1608` positions each):
///
/// - before the encoders: the patch convolution's 16-bit copy of the pixels (autocast or
///   16-bit weights; saved when the tower trains), then the tile and position embeddings
///   (`x + emb · gate.tanh()`, promoted to the parameters' width), the class token's `cat`,
///   `layernorm_pre` and `F.pad`: a few stream-sized tensors at once;
/// - the aspect-ratio mask (`_prepare_aspect_ratio_attention_mask`: `m @ mᵀ · finfo.min`,
///   `[images, 1, L, L]` in the model's dtype, two while it is made), saved by SDPA when the
///   tower trains;
/// - the local encoder's layers; `MllamaVisionEncoder` keeps every layer's output in a
///   tuple (`encoder_states`) until the tower returns, so a tower without a graph still holds
///   all of them; then `layernorm_post`, the post-tile embedding and the gated global layers
///   (each gate's product promoted to the parameters' width, saving the branch output when
///   the tower trains);
/// - `torch.stack` of the `intermediate_layers_indices` outputs and the `torch.cat` with the
///   last hidden state: `(K + 1) · hidden` wide at 1601 positions per tile;
/// - the projector (one linear to the text width, its 16-bit input copy saved under
///   autocast when it trains) and its output, the vision states every cross-attention layer
///   reads: kept through the step when the language model trains in full (k_proj/v_proj
///   save them).
pub(super) fn tower_forward(
    v: &Vision,
    ctx: BlockCtx,
    layer: &Layer,
    trains: bool,
    proj_trains: bool,
    job: &ResolvedJob,
) -> StageMemory {
    let TowerKind::Mllama {
        global_layers,
        tiles,
        intermediate,
        ..
    } = v.tower.kind
    else {
        return StageMemory::default();
    };
    let (n, l, h, wp) = (ctx.batch, ctx.seq, v.tower.hidden, ctx.num.param);
    let stream = round_size(n * l * h * wp);
    let unpadded = n * tiles * v.tower.position_rows;
    let mask = round_size(n * l * l * wp);
    let sixteen = ctx.num.autocast || wp == 2;
    let px = if sixteen {
        round_size(pixel_values(v, n) * 2)
    } else {
        0
    };
    // Saved before the encoders when the tower trains: the pixels' 16-bit copy, the gated
    // tile-position embedding (`gate.tanh() * tile_position_embedding` saves the looked-up
    // `[images, tiles, 1601, h]` rows for the gate's gradient) and `layernorm_pre`'s input.
    let at_tiles = round_size(unpadded * h * wp);
    let pre_kept = if trains { px + 2 * at_tiles } else { 0 };
    // SDPA saves the mask it is given: the one shared mask in the model's dtype, or under
    // autocast with fp32 weights each layer's 16-bit copy (`blocks/mllama.rs`).
    let mask_kept = if trains && !(ctx.num.autocast && wp == 4) {
        mask
    } else {
        0
    };
    let mut top = px + 3 * stream + mask;
    let base = pre_kept + mask;
    let (layers_top, held) = encoder_layers(v, ctx, layer, trains, stream, global_layers);
    top = top.max(base + layers_top);
    let stacked = round_size(n * l * h * intermediate * wp);
    let concat_w = h * (intermediate + 1);
    let concat = round_size(unpadded * concat_w * wp);
    top = top.max(base + held + stream + stacked + concat);
    let out = match v.projector {
        Projector::Mllama { out, .. } => out,
        _ => 0,
    };
    let cw = if ctx.num.autocast { 2 } else { ctx.num.compute };
    let copy = if ctx.num.autocast && wp == 4 {
        round_size(unpadded * concat_w * 2)
    } else {
        0
    };
    let states = round_size(unpadded * out * cw);
    let tower_kept = if trains { held } else { 0 };
    top = top.max(base + tower_kept + concat + copy + states);
    let proj_kept = if proj_trains {
        if copy > 0 {
            copy
        } else {
            concat
        }
    } else {
        0
    };
    let lm_trains =
        job.task == Task::Train && job.peft.is_none() && !job.freeze.contains(&Part::Language);
    let states_kept = if lm_trains || proj_trains || trains {
        states
    } else {
        0
    };
    StageMemory {
        kept: tower_kept + pre_kept + mask_kept + proj_kept + states_kept,
        peak: top,
        weight_copies: 0,
    }
}

/// The local encoder's layers then the gated global ones, in turn (`MllamaVisionEncoder`, see
/// [`tower_forward`]): every layer's output stays in `encoder_states` (a graph's saved set when
/// the tower trains, the bare output when it does not); `layernorm_post` and the post-tile
/// embedding add two streams after the local layers; a global layer's gated products two
/// more at its peak and, when it trains, its two gate outputs saved. Returns the highest
/// moment over the bytes already held before the encoders, and what is held when they return.
fn encoder_layers(
    v: &Vision,
    ctx: BlockCtx,
    layer: &Layer,
    trains: bool,
    stream: u64,
    global_layers: u64,
) -> (u64, u64) {
    let (n, l, h) = (ctx.batch, ctx.seq, v.tower.hidden);
    let m: BlockMemory = block_memory(ctx, layer);
    let per_layer = (m.kept + m.weight_copies).saturating_sub(m.input_freed);
    let gate_saved = if trains {
        2 * round_size(n * l * h * ctx.num.compute)
    } else {
        0
    };
    let (mut top, mut held) = (0u64, 0u64);
    for i in 0..v.tower.layers + global_layers {
        let global = i >= v.tower.layers;
        top = top.max(held + stream + m.peak + if global { 2 * stream } else { 0 });
        held += if trains {
            per_layer + if global { gate_saved } else { 0 }
        } else {
            stream
        };
        if i + 1 == v.tower.layers {
            held += 2 * stream;
        }
    }
    (top, held)
}

/// The language model's cross-attention mask, made once per forward
/// (`_prepare_cross_attention_mask`): the processor's int64 `[b, s, images, tiles]` mask
/// `repeat_interleave`d to every vision token (int64), `1.0 - mask` (fp32) cast to the model's
/// dtype, a boolean of it, `masked_fill` to `finfo.min`: `[b, 1, s, V]` in the model's dtype
/// stays (SDPA reads it in every cross-attention layer). Returns (kept, peak while made);
/// nothing without images.
pub(super) fn cross_mask(spec: &ModelSpec, job: &ResolvedJob, param_w: u64) -> (u64, u64) {
    let v = cross_tokens(spec, job);
    if v == 0 {
        return (0, 0);
    }
    let n = job.batch.saturating_mul(job.seq).saturating_mul(v);
    let kept = round_size(n * param_w);
    let peak = round_size(n * 8) + round_size(n * 4).max(2 * kept) + round_size(n);
    (kept, peak)
}
