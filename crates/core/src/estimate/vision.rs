//! A vision-language model's step: the images' tokens lengthen each sequence, and the vision
//! tower runs before the language model's embeddings are complete — its blocks are the same
//! block programs as the language model's (`blocks`), at the tower's width over its own
//! sequence (patches per image, or per window), non-causal. In transformers the tower runs
//! inside the model's forward before the decoder (`get_image_features` in
//! `modeling_qwen2_vl.py`, `modeling_llava.py`, `modeling_gemma3.py`), so what it saves is
//! kept from the start of the forward to the end of the backward, with the embeddings'.

use super::blocks::{
    block_memory, qwen_merger_memory, qwen_vision_block_memory, qwen_vision_stream_width, BlockCtx,
    Numerics,
};
use super::overhead::round_size;
use super::stages::StageMemory;
use crate::error::CoreError;
use crate::job::{AttentionKernel, Checkpointing, ResolvedJob, Task};
use crate::model::*;
use crate::vision::{ImageCost, Part, Projector, TowerKind, Vision};
use std::borrow::Cow;

/// The job as the language model sees it: each sequence longer by its images' tokens
/// (`image_tokens` records how many). A job without images, or a model without a vision side,
/// is unchanged; images given to a text-only model are an error.
pub fn with_images<'a>(
    spec: Option<&ModelSpec>,
    job: &'a ResolvedJob,
) -> Result<Cow<'a, ResolvedJob>, CoreError> {
    let Some(images) = job.images else {
        return Ok(Cow::Borrowed(job));
    };
    if job.image_tokens > 0 {
        return Ok(Cow::Borrowed(job));
    }
    // The `gemma3n` wrapper holds its towers as idle tensors (`ModelSpec::idle_tensors`).
    if spec.is_some_and(|s| s.gemma3n.is_some() && !s.idle_tensors.is_empty()) {
        return Err(CoreError::field(
            "images",
            "gemma3n's vision tower (timm's MobileNetV5) is counted but its activations are not \
             modelled; estimate a text-only job (no images)",
        ));
    }
    let Some(v) = spec.and_then(|s| s.vision.as_ref()) else {
        return Err(CoreError::field(
            "images",
            "the model has no vision tower (images need a vision-language model)",
        ));
    };
    let per_image = image_cost(v, job)?.tokens;
    let tokens = per_image.saturating_mul(images.count);
    let mut j = job.clone();
    j.seq = j.seq.saturating_add(tokens);
    j.image_tokens = tokens;
    Ok(Cow::Owned(j))
}

/// The cost of one of the job's images under the model's rule.
pub fn image_cost(v: &Vision, job: &ResolvedJob) -> Result<ImageCost, CoreError> {
    let Some(i) = job.images else {
        return Ok(ImageCost {
            tokens: 0,
            tower_images: 0,
            tower_seq: 0,
        });
    };
    v.tokens
        .cost_for(i.count, i.width, i.height)
        .map_err(|e| CoreError::field("images", e))
}

/// The tower images of one micro-batch (`batch · count · tower_images`) and one image's cost.
pub(super) fn tower_images(
    v: &Vision,
    job: &ResolvedJob,
    count: u64,
) -> Result<(u64, ImageCost), CoreError> {
    let cost = image_cost(v, job)?;
    let n = job
        .batch
        .saturating_mul(count)
        .saturating_mul(cost.tower_images);
    Ok((n, cost))
}

/// Whether any of the tower's weights train: not frozen, and in a PEFT job only when a LoRA
/// target reaches into the tower.
pub(super) fn tower_trains(v: &Vision, job: &ResolvedJob) -> bool {
    if job.task != Task::Train || job.freeze.contains(&Part::Vision) {
        return false;
    }
    match &job.peft {
        None => true,
        Some(p) => p.targets.iter().any(|t| {
            let (part, m) = crate::vision::split_target(t);
            part.is_none_or(|p| p == Part::Vision) && tower_modules(v).contains(&m)
        }),
    }
}

/// The tower's module names LoRA can target.
fn tower_modules(v: &Vision) -> &'static [&'static str] {
    match (v.tower.kind, v.tower.gated) {
        (crate::vision::TowerKind::Qwen, true) => {
            &["qkv", "proj", "gate_proj", "up_proj", "down_proj"]
        }
        (crate::vision::TowerKind::Qwen, false) => &["qkv", "proj", "fc1", "fc2"],
        (crate::vision::TowerKind::Qwen3, _) => &["qkv", "proj", "linear_fc1", "linear_fc2"],
        (crate::vision::TowerKind::InternVit { .. }, _) => &[
            "q_proj",
            "k_proj",
            "v_proj",
            "projection_layer",
            "fc1",
            "fc2",
        ],
        (crate::vision::TowerKind::Mllama { .. } | crate::vision::TowerKind::Llama4 { .. }, _) => {
            &["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"]
        }
        // Pixtral's layers are Llama's (`PixtralAttention`, `PixtralMLP`); Gemma 4's clippable
        // linears are named the same (`Gemma4VisionAttention`, `Gemma4VisionMLP`).
        (crate::vision::TowerKind::Pixtral | crate::vision::TowerKind::Gemma4 { .. }, _) => {
            &crate::job::LLAMA_LINEARS
        }
        _ => &["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
    }
}

/// The tower as a stack of pre-norm blocks the block programs can run: its width, one layer
/// of its shape (`plain` attention with biases; the MLP as the config names it).
pub(super) fn tower_spec(spec: &ModelSpec, v: &Vision) -> ModelSpec {
    let t = &v.tower;
    let norm = Norm {
        kind: t.norm,
        dim: t.hidden,
    };
    let layer = Layer::new(
        Attention::new(
            AttentionKind::Standard {
                heads: t.heads,
                kv_heads: t.heads,
                head_dim: t.hidden / t.heads.max(1),
            },
            ProjBias::all(t.kind.biased()),
        ),
        Mlp::Dense(DenseMlp {
            ffn: t.ffn,
            gated: t.gated,
            bias: t.kind.biased(),
            activation: t.activation.clone(),
            gaussian_topk: false,
        }),
        vec![(NormSlot::PreAttention, norm), (NormSlot::PreMlp, norm)],
    );
    let positions = if t.position_rows == 0 {
        Positions::Rotary { theta: None }
    } else {
        Positions::Learned {
            rows: t.position_rows,
        }
    };
    ModelSpec {
        model_type: format!("{}_vision", v.family),
        naming: Naming::Llama,
        hidden_size: t.hidden,
        embedding: Embedding::plain(t.hidden, positions),
        encoder: None,
        decoder: Stack {
            layers: vec![layer],
            final_norm: None,
        },
        head: Head::None { pooler: false },
        dropout: Dropout::default(),
        quantization: None,
        softcapping: Default::default(),
        vision: None,
        gemma3n: None,
        idle_tensors: Vec::new(),
        ..spec.clone()
    }
}

/// What the tower and projector keep and their top, for the job's images of one micro-batch:
/// the pixels' 16-bit copy and the rotary tables (`tower_inputs`; the pixels themselves are
/// the step's input, `pixel_input_bytes`), the blocks (`tower_blocks`), the
/// projector. The tower's residual stream between blocks is kept or not as each block's
/// program says; the projector reads the last one.
pub fn tower_forward(
    spec: &ModelSpec,
    job: &ResolvedJob,
    num: Numerics,
) -> Result<StageMemory, CoreError> {
    let (Some(v), Some(images)) = (spec.vision.as_ref(), job.images) else {
        return Ok(StageMemory::default());
    };
    let (n, cost) = tower_images(v, job, images.count)?;
    let trains = tower_trains(v, job);
    let tspec = tower_spec(spec, v);
    let (batch, seq, mask) = joined_sequence(v, job, n, cost, num);
    let ctx = tower_ctx(&tspec, job, num, (batch, seq), trains);
    if let TowerKind::Mllama { .. } = v.tower.kind {
        let proj_trains = trains || projector_trains(job);
        let layer = &tspec.decoder.layers[0];
        let mut m = super::mllama::tower_forward(v, ctx, layer, trains, proj_trains, job);
        if job.task != Task::Train {
            m.peak += pixel_input_bytes(spec, job)?;
        }
        return Ok(m);
    }
    if let TowerKind::Gemma4 { .. } = v.tower.kind {
        let ckpt = trains && job.checkpointing != Checkpointing::None;
        let flags = (trains, trains || projector_trains(job), ckpt);
        let run = super::vision_gemma4::Run { images: n, cost };
        let mut m = super::vision_gemma4::tower_forward(v, num, run, flags, spec.hidden_size);
        if job.task != Task::Train {
            m.peak += pixel_input_bytes(spec, job)?;
        }
        return Ok(m);
    }
    let (mut inputs_kept, mut inputs_live) = tower_inputs(v, n, cost, num, trains);
    if let TowerKind::Siglip2 { .. } = v.tower.kind {
        let (k, l) = super::vision_siglip2::extras(v, job, n, cost, num, trains)?;
        inputs_kept += k;
        inputs_live += l;
    }
    inputs_live += mask;
    if trains && job.attention == AttentionKernel::Sdpa {
        inputs_kept += mask;
    }
    // In training the pixels are counted with the step's inputs (`pixel_input_bytes`);
    // otherwise they are live while the tower runs.
    if job.task != Task::Train {
        inputs_live += pixel_input_bytes(spec, job)?;
    }
    let ckpt = trains && job.checkpointing != Checkpointing::None;
    let run = tower_blocks(v, ctx, &tspec.decoder.layers[0], ckpt);
    let proj_trains = trains || projector_trains(job);
    let (proj_kept, proj_peak) = projector_memory(v, ctx, run.stream, (n, cost), proj_trains);
    let base = inputs_live + run.saved + run.stream;
    let kept = inputs_kept + run.saved + proj_kept + siglip_tower_kept(v, n, cost, num, trains);
    Ok(StageMemory {
        kept,
        peak: run.top.max(base + proj_peak).max(kept),
        weight_copies: 0,
    })
}

/// The tower's blocks' context: the tower's width over `(batch, seq)` (images, patches per
/// image, or Pixtral's joined sequence), bidirectional, no dropout, under `no_grad` when the
/// tower is frozen; LoRA where a target reaches into a training tower.
pub(super) fn tower_ctx<'a>(
    tspec: &'a ModelSpec,
    job: &'a ResolvedJob,
    num: Numerics,
    (batch, seq): (u64, u64),
    trains: bool,
) -> BlockCtx<'a> {
    BlockCtx {
        spec: tspec,
        batch,
        seq,
        kv_seq: seq,
        num,
        kernel: job.attention,
        attn_dropout: 0.0,
        hidden_dropout: 0.0,
        causal: false,
        no_grad: !trains,
        python_holds: !trains
            && job.task == crate::job::Task::Infer
            && job.framework == crate::job::Framework::Pytorch,
        lora: job
            .peft
            .as_ref()
            .filter(|_| trains)
            .map(super::blocks::Lora::of),
        dequant: None,
        part: Part::Vision,
    }
}

/// The projector's kept bytes and its top: Qwen's patch merger through its own tape (it frees
/// the tower's last stream when it trains), any other projector's output as kept
/// (`projector_kept`). `stream_in` is the tower's last residual stream.
pub(super) fn projector_memory(
    v: &Vision,
    ctx: BlockCtx,
    stream_in: u64,
    (n, cost): (u64, ImageCost),
    proj_trains: bool,
) -> (u64, u64) {
    let num = ctx.num;
    match v.projector {
        Projector::QwenMerger { merge, norm, out } => {
            let m = qwen_merger_memory(
                BlockCtx {
                    no_grad: !proj_trains,
                    lora: None,
                    part: Part::Projector,
                    ..ctx
                },
                norm,
                merge,
                out,
            );
            let stream = if proj_trains {
                stream_in.saturating_sub(m.input_freed)
            } else {
                0
            };
            (m.kept + m.weight_copies + stream, m.peak)
        }
        _ => {
            let k = projector_kept(v, n, cost, num, proj_trains);
            (k, k)
        }
    }
}

/// What a SigLIP tower under Gemma 3's or PaliGemma's projector keeps beyond its blocks and
/// the projector's saved inputs when it trains (transformers 5.24, `modeling_siglip.py`): the
/// embeddings' output `patch_embeds.flatten(2).transpose(1, 2) + position_embedding(...)` (at
/// the residual width: the fp32 position table promotes the 16-bit convolution output under
/// autocast), which the first layer's `layer_norm1` saves; `post_layernorm`'s fp32 mean and
/// rstd (one per patch row); and under `Gemma3MultiModalProjector` its `transpose(1,
/// 2).reshape(...)` copy of the tower's output, which `avg_pool` saves (`avg_pool2d_backward`
/// reads `self`; PaliGemma's projector is one linear, `modeling_paligemma.py`). Returns (the
/// embeddings' output, the rest). Measured on the CPU (`validation/cpu-measured-gemma3vis.json`,
/// `cpu-measured-vlm-season.json`).
pub(super) fn siglip_tower_parts(
    v: &Vision,
    images: u64,
    cost: ImageCost,
    num: Numerics,
    trains: bool,
) -> (u64, u64) {
    let gemma3 = matches!(v.projector, Projector::Gemma3 { .. });
    let paligemma = matches!(v.projector, Projector::PaliGemma { .. });
    if !trains || v.tower.kind != TowerKind::Siglip || !(gemma3 || paligemma) {
        return (0, 0);
    }
    let rows = images.saturating_mul(cost.tower_seq);
    let stream = round_size(
        rows.saturating_mul(v.tower.hidden)
            .saturating_mul(num.param),
    );
    let copy = if gemma3 { stream } else { 0 };
    (stream, 2 * round_size(rows.saturating_mul(4)) + copy)
}

fn siglip_tower_kept(v: &Vision, images: u64, cost: ImageCost, num: Numerics, trains: bool) -> u64 {
    let (embeddings, rest) = siglip_tower_parts(v, images, cost, num, trains);
    embeddings + rest
}

/// The tower's attention batch and sequence, and the bytes of a block-diagonal mask. Pixtral
/// (`modeling_pixtral.py` `PixtralVisionModel.forward`) concatenates all the micro-batch's
/// images into one sequence; with `sdpa` or `eager` it attends over it under the float mask of
/// `generate_block_attention_mask` (`[N, N]` in the patch embeddings' dtype, made once for all
/// layers; CUDA's memory-efficient SDPA kernel saves it as `attn_bias` for backward, eager's
/// add does not), and eager's scores span the whole sequence. `flash_attention_2` passes
/// `cu_seqlens` instead: per image, no mask. Other towers attend per image.
fn joined_sequence(
    v: &Vision,
    job: &ResolvedJob,
    images: u64,
    cost: ImageCost,
    num: Numerics,
) -> (u64, u64, u64) {
    if v.tower.kind != TowerKind::Pixtral || job.attention == AttentionKernel::Flash {
        return (images, cost.tower_seq, 0);
    }
    let n = images.saturating_mul(cost.tower_seq);
    let width = if num.autocast { 2 } else { num.param };
    (1, n, round_size(n.saturating_mul(n).saturating_mul(width)))
}

/// The tower's blocks, one after another: the bytes they leave saved (besides the stream
/// tensor between blocks), the stream tensor's bytes and the top of the blocks' forward
/// (without the tower's inputs).
struct TowerRun {
    saved: u64,
    stream: u64,
    top: u64,
}

fn tower_blocks(v: &Vision, ctx: BlockCtx, layer: &Layer, ckpt: bool) -> TowerRun {
    let qwen = v.tower.kind == TowerKind::Qwen;
    let run = |c: BlockCtx| {
        if qwen {
            qwen_vision_block_memory(c, layer)
        } else {
            block_memory(c, layer)
        }
    };
    let full = run(ctx);
    let windowed = v.tower.window_patches.map(|w| {
        let windows = ctx.seq.div_ceil(w.max(1));
        run(BlockCtx {
            batch: ctx.batch.saturating_mul(windows),
            seq: w.min(ctx.seq),
            kv_seq: w.min(ctx.seq),
            ..ctx
        })
    });
    let width = if qwen {
        qwen_vision_stream_width(ctx.num)
    } else {
        ctx.num.param
    };
    let stream = round_size(ctx.batch * ctx.seq * v.tower.hidden * width);
    let (mut saved, mut top) = (0u64, 0u64);
    for i in 0..v.tower.layers {
        let m = match windowed {
            Some(w) if !v.tower.full_attention_layers.contains(&i) => w,
            _ => full,
        };
        top = top.max(saved + stream + m.peak);
        if !ctx.no_grad && i < v.tower.layers_used {
            // Checkpointed: the block's input only. Otherwise the input when the block saved
            // it (`input_freed` when not) and what the block saved; `m.kept` counts the
            // block's output, the same size as its input, which is the next stream tensor.
            saved += if ckpt {
                stream
            } else {
                (m.kept + m.weight_copies).saturating_sub(m.input_freed)
            };
        }
    }
    TowerRun { saved, stream, top }
}

/// Patches the tower embeds for the job's images of one micro-batch (CLIP's class token is
/// not a patch) and the values of one patch (`channels · temporal_patch · patch²`).
fn patches(v: &Vision, images: u64, cost: ImageCost) -> (u64, u64) {
    let t = &v.tower;
    // Llama 4 appends its class token after the patches (`Llama4VisionModel.forward`).
    let class_token = u64::from(matches!(t.kind, TowerKind::Clip | TowerKind::Llama4 { .. }));
    let n = images.saturating_mul(cost.tower_seq.saturating_sub(class_token));
    (n, t.channels * t.temporal_patch * t.patch * t.patch)
}

/// The images' `pixel_values` of one micro-batch: they arrive in fp32 (the image processors
/// return float32 and the Trainer moves them to the device as they are), one row per patch,
/// and are the step's input, live from its start to the end of the backward beside the token
/// ids (`ForwardPlan::inputs`).
pub fn pixel_input_bytes(spec: &ModelSpec, job: &ResolvedJob) -> Result<u64, CoreError> {
    let (Some(v), Some(images)) = (spec.vision.as_ref(), job.images) else {
        return Ok(0);
    };
    let cost = image_cost(v, job)?;
    let n = job
        .batch
        .saturating_mul(images.count)
        .saturating_mul(cost.tower_images);
    if let TowerKind::Mllama { .. } = v.tower.kind {
        return Ok(round_size(
            super::mllama::pixel_values(v, n).saturating_mul(4),
        ));
    }
    let (patches, px) = patches(v, n, cost);
    // Gemma 4's `image_position_ids` `[images, patches, 2]` int64 come with the pixels.
    let positions = if let TowerKind::Gemma4 { .. } = v.tower.kind {
        round_size(patches.saturating_mul(16))
    } else {
        0
    };
    Ok(round_size(patches.saturating_mul(px) * 4) + positions)
}

/// What the tower makes before its blocks: (kept through the step, live during the tower's
/// forward besides the pixels). With 16-bit compute the patch embedding reads a 16-bit copy
/// of the pixels — pure 16 bit: `pixel_values.type(self.visual.dtype)`
/// (`Qwen2VLModel.get_image_features`), CLIP/SigLIP `patch_embedding(pixel_values.to(
/// dtype=target_dtype))`; autocast: the convolution's own cast, with a 16-bit copy of its
/// weight — saved when the weight trains. Qwen's rotary tables, `cos` and `sin` of
/// `[patches, head_dim]` in fp32 (`Qwen2VLVisionRotaryEmbedding.forward`), are made once
/// and saved by every block's rotary multiplies.
pub(super) fn tower_inputs(
    v: &Vision,
    images: u64,
    cost: ImageCost,
    num: Numerics,
    trains: bool,
) -> (u64, u64) {
    let t = &v.tower;
    let (patches, patch_px) = patches(v, images, cost);
    let sixteen = num.autocast || num.param == 2;
    let copy = if sixteen {
        round_size(patches.saturating_mul(patch_px) * 2)
    } else {
        0
    };
    let weight_copy = if num.autocast && num.param == 4 && trains {
        round_size(2 * t.hidden * patch_px)
    } else {
        0
    };
    let rope = if t.kind == TowerKind::Qwen {
        let tokens = images.saturating_mul(cost.tower_seq);
        2 * round_size(tokens.saturating_mul(t.hidden / t.heads.max(1)) * 4)
    } else {
        0
    };
    // Llama 4's `Llama4UnfoldConvolution`: `nn.Unfold` then `permute(0, 2, 1)` hands the linear
    // a non-contiguous input, which it reshapes into a contiguous copy and saves; in fp32 that
    // copy is one more pixels-sized tensor (in 16 bit the 16-bit copy above is the one).
    let unfold = if matches!(t.kind, TowerKind::Llama4 { .. }) && !sixteen {
        round_size(patches.saturating_mul(patch_px) * 4)
    } else {
        0
    };
    let live = copy + weight_copy + rope + unfold + clip_pre_norm(v, images, cost, num);
    (if trains { live } else { 0 }, live)
}

/// CLIP's `pre_layrnorm` (`modeling_clip.py` `CLIPVisionTransformer.forward`): the embeddings
/// (`torch.cat` of the class embedding and the patches, plus the position embedding) are a
/// tensor of their own that the LayerNorm saves, with its fp32 mean and rstd; its output is the
/// first block's input. The class embedding and positions are parameters, so the sum is in
/// their dtype (fp32 under autocast: `cat` promotes the 16-bit patches).
///
/// Llama 4's `layernorm_pre` (`Llama4VisionModel.forward`: the class embedding concatenated
/// after the patches, plus `positional_embedding_vlm`) saves the same.
fn clip_pre_norm(v: &Vision, images: u64, cost: ImageCost, num: Numerics) -> u64 {
    if !matches!(v.tower.kind, TowerKind::Clip | TowerKind::Llama4 { .. }) {
        return 0;
    }
    let rows = images.saturating_mul(cost.tower_seq);
    round_size(rows.saturating_mul(v.tower.hidden) * num.param) + 2 * round_size(rows * 4)
}

pub(super) fn projector_trains(job: &ResolvedJob) -> bool {
    job.task == Task::Train && job.peft.is_none() && !job.freeze.contains(&Part::Projector)
}

/// What the projector saves for backward when it (or the tower below it) trains: each linear
/// its input, the GELU its input, the norm its input and statistics
/// (`LlavaMultiModalProjector`, `Gemma3MultiModalProjector`; Qwen's merger runs on the tape).
fn projector_kept(v: &Vision, images: u64, cost: ImageCost, num: Numerics, trains: bool) -> u64 {
    let seq = cost.tower_seq;
    if !trains {
        return 0;
    }
    let h = v.tower.hidden;
    let w = if num.autocast { 2 } else { num.compute };
    match v.projector {
        // Run on the tape by `qwen_merger_memory`.
        Projector::QwenMerger { .. } => 0,
        Projector::LlavaMlp { out, .. } => {
            let rows = images * seq;
            round_size(rows * h * w) + 2 * round_size(rows * out * w)
        }
        Projector::Gemma3 { .. } => {
            let rows = images * cost.tokens;
            2 * round_size(rows * h * num.param)
        }
        _ => super::vision_projectors::projector_kept(v, images, cost, num),
    }
}
