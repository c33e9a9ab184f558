//! Gemma 3n's model-level AltUp steps around the blocks (`models/gemma3n/modeling_gemma3n.py`,
//! `Gemma3nTextModel.forward`, transformers 5.24): the embedding widened to
//! `altup_num_inputs` streams before the first layer, and the streams projected back and
//! averaged before the final norm. Written on the stages' [`Tape`].

use super::blocks::Numerics;
use super::overhead::round_size;
use super::tape::{Id, RmsWeight, Tape};
use crate::model::{Gemma3nParts, ModelSpec, MultimodalEmbedder};

/// Autocast's 16-bit copies of the fp32 weights the embedding side multiplies by (each cast
/// once and cached for the forward, then saved by its linear for backward): the
/// `altup_num_inputs - 1` `[h, h]` `altup_projections` and `per_layer_model_projection`
/// `[layers · width, h]`. Nothing under fp32 or pure 16-bit training.
pub fn embedding_weight_copies(spec: &ModelSpec, g: Gemma3nParts, num: Numerics) -> u64 {
    if !num.autocast || num.param != 4 {
        return 0;
    }
    let h = spec.hidden_size;
    let ple = spec
        .embedding
        .per_layer_inputs
        .map_or(0, |p| p.width * spec.num_layers());
    round_size((g.altup_inputs - 1) * 2 * h * h) + round_size(2 * h * ple)
}

/// `mean(x ** 2, -1, keepdim=True) ** 0.5` of a `[t, h]` view of `src`, in `src`'s dtype (the
/// streams are in the parameters' dtype, fp32 under autocast, where `pow` is on the fp32 list
/// anyway): `pow` saves the view (keeping `src`), the mean makes `[t, 1]`, the second `pow`
/// saves it.
fn magnitude(tape: &mut Tape, src: Id, (t, h): (u64, u64)) -> Id {
    let w = tape.width(src);
    let sq = tape.fused_op(&[src], &[src], t * h, w);
    let mean = tape.op(&[sq], &[], t, w);
    tape.fused_op(&[mean], &[mean], t, w)
}

/// One projected stream, rescaled to the first stream's magnitude: the `[h, h]` projection of
/// `src` (saving its input, under autocast a 16-bit copy), `.to(dtype)` back to the
/// parameters' dtype (a copy under autocast), its own magnitude (`pow` saving it; the clamp
/// and `sqrt` on `[t, 1]`), `· target` (saving both) and `/ new_magnitude` (saving both).
/// Returns the rescaled stream and the two locals the loop's names hold until they are
/// rebound: `altup_proj` (the projection's output) and `new_magnitude`.
fn rescaled_projection(
    tape: &mut Tape,
    src: Id,
    target: Id,
    (t, h): (u64, u64),
    num: Numerics,
) -> (Id, [Id; 2]) {
    let xin = if num.autocast && tape.width(src) == 4 {
        tape.fused_op(&[src], &[], t * h, 2)
    } else {
        src
    };
    let mm_w = if num.autocast { 2 } else { num.compute };
    let proj = tape.op(&[xin], &[xin], t * h, mm_w);
    let cur = tape.cast(proj, num.param);
    let w = num.param;
    let sq = tape.fused_op(&[cur], &[cur], t * h, w);
    let mean = tape.op(&[sq], &[], t, w);
    let clamped = tape.fused_op(&[mean], &[mean], t, w);
    let new_mag = tape.fused_op(&[clamped], &[], t, w);
    tape.keep(new_mag);
    let prod = tape.fused_op(&[cur, target], &[cur, target], t * h, w);
    let out = tape.fused_op(&[prod, new_mag], &[prod, new_mag], t * h, w);
    (out, [proj, new_mag])
}

/// Before the first layer: the embedding `x` and `altup_projections[i - 1](x)` for each
/// further stream, each rescaled to `x`'s magnitude, stacked into the `[n, b, s, h]` tensor
/// the first layer reads (`torch.stack`: a new tensor that saves nothing).
///
/// Under `no_grad` (`train` false: HF `generate`) nothing is saved, and what
/// `Gemma3nTextModel.forward`'s names hold lives until it returns, past every layer (the
/// stage keeps it): `target_magnitude` (`[t, 1]`), the list `temp_hidden_states` (the
/// embedding itself and the `n - 1` rescaled streams, `[t, h]` each), and the last loop
/// iteration's `altup_proj` (`[t, h]`) and `new_magnitude` (`[t, 1]`); the squares, means and
/// products die as their names are rebound. At fp32, `n` = 4, `h` = 256 that is, per token,
/// 4 + 4 · 1,024 + 1,024 + 4 = 5,128 B, the embedding's 1,024 among them (measured at the
/// tiny text model's prefill peak, `scripts/generate_live_at_peak.py`, 2 × 256: 524,288 +
/// 2,048 + 3 · 524,288 + 524,288 + 2,048 B live from the stage). The stack itself is the
/// first layer's input, freed as the loop rebinds `hidden_states`.
pub fn altup_streams(
    tape: &mut Tape,
    x: Id,
    (t, h): (u64, u64),
    n: u64,
    (num, train): (Numerics, bool),
) -> Id {
    let was = tape.set_no_grad(!train);
    let target = magnitude(tape, x, (t, h));
    let (mut streams, mut last) = (vec![x], Vec::new());
    for _ in 1..n {
        let (stream, locals) = rescaled_projection(tape, x, target, (t, h), num);
        streams.push(stream);
        last = locals.to_vec();
    }
    let out = tape.op(&streams, &[], n * t * h, num.param);
    tape.set_no_grad(was);
    if !train {
        for &held in streams.iter().chain(&last).chain([&target]) {
            tape.keep(held);
        }
    }
    out
}

/// After the last layer (`last`: the stacked streams): stream 0's magnitude, each further
/// stream through its `altup_unembed_projections` rescaled to it, the stack of all `n`
/// (nothing saved) and its mean over the streams: the `[b, s, h]` tensor the final norm
/// reads.
pub fn unembed_streams(tape: &mut Tape, last: Id, (t, h): (u64, u64), n: u64, num: Numerics) -> Id {
    let target = magnitude(tape, last, (t, h));
    let mut streams = vec![last];
    for _ in 1..n {
        streams.push(rescaled_projection(tape, last, target, (t, h), num).0);
    }
    let stacked = tape.op(&streams, &[], n * t * h, num.param);
    tape.op(&[stacked], &[], t * h, num.param)
}

/// `Gemma3nModel.forward` from `input_ids` (the conditional-generation model): each
/// multimodal embedder, `embed_vision` then `embed_audio`, runs on every position, and
/// `torch.where` puts its output where the ids are its modality's (nowhere, in a text-only
/// job) — so on every forward, and both train. Per embedder
/// (`Gemma3nMultimodalEmbedder.forward`): the `[t]` bool mask, the `torch.where` of the ids
/// and the dummy id and the `- vocab_offset` (int64, the last saved by the embedding's
/// backward), the lookup `[t, width]` in the parameters' dtype, `hard_embedding_norm`
/// (`Gemma3nRMSNorm`: weight in fp32), `embedding_projection` to `[t, h]` (saving its input,
/// a 16-bit copy under autocast), the weightless `embedding_post_projection_norm`, `.to` the
/// embeddings' dtype, the unsqueezed mask and `torch.where(mask, embeds, x)` (a new `[t, h]`
/// tensor; its backward saves the mask). `train`: autograd records the ops (else nothing is
/// saved). Returns the merged embeddings.
pub fn multimodal_embedders(
    tape: &mut Tape,
    mut x: Id,
    (t, h): (u64, u64),
    g: Gemma3nParts,
    (num, train): (Numerics, bool),
) -> Id {
    let p = num.param;
    let mm_w = if num.autocast { 2 } else { num.compute };
    let ids = tape.external(t, 8);
    for e in g.embedders.iter().flatten() {
        let MultimodalEmbedder { width, .. } = *e;
        let was = tape.set_no_grad(!train);
        let mask = tape.op(&[ids], &[], t, 1);
        let chosen = tape.op(&[mask, ids], &[], t, 8);
        let shifted = tape.op(&[chosen], &[], t, 8);
        let looked_up = tape.op(&[shifted], &[shifted], t * width, p);
        let normed = tape.rms_norm(looked_up, width, p, RmsWeight::InFp32, false);
        let xin = if num.autocast && tape.width(normed) == 4 {
            tape.fused_op(&[normed], &[], t * width, 2)
        } else {
            normed
        };
        let proj = tape.op(&[xin], &[xin], t * h, mm_w);
        let out = tape.rms_norm(proj, h, p, RmsWeight::Without, false);
        let out = tape.cast(out, p);
        tape.set_no_grad(was);
        if !train {
            // `vision_embeds` / `audio_embeds` are locals of `Gemma3nModel.forward`: under
            // `no_grad` they live until it returns (in training, past the forward's peak).
            tape.keep(out);
        }
        x = tape.op(&[mask, out, x], &[mask], t * h, p);
    }
    x
}
