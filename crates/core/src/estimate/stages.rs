//! The parts of a forward pass outside the blocks: embeddings, the final norm and head, and the
//! loss — written on the same [`Tape`] as the blocks.

use super::blocks::Numerics;
use super::overhead::round_size;
use super::tape::{RmsWeight, Tape};
use crate::model::{Head, ModelSpec, Naming, NormKind, Positions};

/// Bytes a stage leaves kept and its transient top.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageMemory {
    pub kept: u64,
    pub peak: u64,
    /// Autocast 16-bit weight copies (the head's matmul weight).
    pub weight_copies: u64,
}

/// Token (and position, token-type) embeddings up to the first block's input, plus the
/// tensors every block shares: rotary cos/sin (`LlamaRotaryEmbedding`: `[b, s, head_dim]` in the
/// hidden dtype, saved by the rotary multiplies) and, for eager attention, the additive mask
/// `[b, 1, s, s]` (kept only while the forward runs, or saved by checkpointed blocks).
/// `train`: the step builds autograd's graph (Gemma 3n's multimodal embedders save nothing
/// otherwise).
pub fn embeddings(
    spec: &ModelSpec,
    (batch, seq): (u64, u64),
    num: Numerics,
    dropout: f64,
    train: bool,
) -> StageMemory {
    let t = batch * seq;
    let h = spec.hidden_size;
    let mut tape = Tape::new();
    let p = num.param;
    let ids = tape.external(t, 8);
    let mut x = tape.op(&[ids], &[], t * spec.embedding.dim, p);
    if (spec.naming == Naming::Llama && spec.model_type.starts_with("gemma"))
        || matches!(spec.naming, Naming::Gemma4 | Naming::Gemma3n)
    {
        // Gemma multiplies the embedding by √hidden (a new tensor).
        x = tape.op(&[x], &[], t * h, p);
    }
    if let Some(g) = spec.gemma3n {
        // `Gemma3nModel.forward` merges the embedders' outputs before the language model
        // projects the per-layer inputs from them.
        x = super::gemma3n_stages::multimodal_embedders(&mut tape, x, (t, h), g, (num, train));
    }
    if !train && gemma4_wrapper(spec) {
        gemma4_wrapper_locals(&mut tape, x, spec, t, p);
    }
    if let Some(ple) = spec.embedding.per_layer_inputs {
        per_layer_inputs(&mut tape, x, spec, (t, ple.width), (num, train));
    }
    let mut copies = 0;
    if let Some(g) = spec.gemma3n {
        x = super::gemma3n_stages::altup_streams(
            &mut tape,
            x,
            (t, h),
            g.altup_inputs,
            (num, train),
        );
        copies = super::gemma3n_stages::embedding_weight_copies(spec, g, num);
    }
    if spec.model_type == "falcon_h1" {
        // Falcon-H1: `embed_tokens(ids) · embedding_multiplier` (`FalconH1Model.forward`).
        x = tape.op(&[x], &[], t * h, p);
    }
    if spec.embedding.projection {
        let w = if num.autocast { 2 } else { num.compute };
        let xin = if num.autocast {
            tape.op(&[x], &[], t * spec.embedding.dim, 2)
        } else {
            x
        };
        x = tape.op(&[xin], &[xin], t * h, w);
    }
    if let Positions::Learned { .. } = spec.embedding.positions {
        let pos = tape.op(&[], &[], t * h, p);
        x = tape.op(&[x, pos], &[], t * h, p);
    }
    if spec.embedding.token_types > 0 {
        let tt = tape.op(&[], &[], t * h, p);
        x = tape.op(&[x, tt], &[], t * h, p);
    }
    if let Some(n) = spec.embedding.norm {
        let out = tape.op(&[x], &[x], t * n.dim, p);
        let mean = tape.op(&[x], &[], t, 4);
        let rstd = tape.op(&[x], &[], t, 4);
        tape.keep(mean);
        tape.keep(rstd);
        let _ = NormKind::RmsNorm;
        x = out;
    }
    if dropout > 0.0 {
        let out = tape.op(&[x], &[], t * h, p);
        let mask = tape.op(&[x], &[], t * h, 1);
        tape.keep(mask);
        x = out;
    }
    if let Positions::Rotary { .. } = spec.embedding.positions {
        for head_dim in rotary_widths(spec) {
            for _ in 0..2 {
                let c = tape.op(&[], &[], t * head_dim, p);
                tape.keep(c);
            }
        }
    }
    let mem = tape.memory(Some(x), round_size);
    StageMemory {
        kept: mem.kept + copies,
        peak: mem.peak + copies,
        weight_copies: 0,
    }
}

/// The head widths of the rotary tables the model keeps: the first layer's, or with Gemma 4 one
/// per layer type (`Gemma4TextModel.forward` computes `position_embeddings[layer_type]` for each
/// of `unique_layer_types`: `head_dim` on sliding layers, `global_head_dim` on full ones, the
/// proportional rope of full layers as wide as the head).
fn rotary_widths(spec: &ModelSpec) -> Vec<u64> {
    let width = |l: &crate::model::Layer| match l.attention.kind {
        crate::model::AttentionKind::Latent {
            qk_rope_head_dim, ..
        } => qk_rope_head_dim,
        k => k.qk_head_dim(),
    };
    let gemma3 = spec.model_type.starts_with("gemma3") && !spec.model_type.starts_with("gemma3n");
    if spec.naming == Naming::Gemma3n || gemma3 {
        // Gemma-3 (`Gemma3TextModel.forward`: `position_embeddings[layer_type] =
        // self.rotary_emb(hidden_states, position_ids, layer_type)` for each of
        // `set(config.layer_types)`, a local `rope_local_base_freq` pair and a global one) and
        // Gemma 3n (`Gemma3nTextModel.forward`, the same): one table per layer type present,
        // each as wide as the head.
        let sliding = spec
            .all_layers()
            .filter(|l| l.attention.sliding_window.is_some())
            .count();
        let full = spec.all_layers().count() - sliding;
        let w = spec.all_layers().next().map_or(0, width);
        return vec![w; usize::from(sliding > 0) + usize::from(full > 0)];
    }
    if spec.naming != Naming::Gemma4 {
        return vec![spec.all_layers().next().map_or(0, width)];
    }
    let mut dims: Vec<u64> = spec.all_layers().map(width).collect();
    dims.sort_unstable();
    dims.dedup();
    dims
}

/// Gemma 4's per-layer inputs (`Gemma4TextModel.get_per_layer_inputs` and
/// `project_per_layer_inputs`): the scaled lookup in `embed_tokens_per_layer` (`[t, layers ·
/// width]` in the parameters' dtype), `per_layer_model_projection` of the token embedding
/// (saving it), `· hidden^-0.5`, `per_layer_projection_norm` (`Gemma4RMSNorm`: the fp32 input,
/// rstd and normed tensor saved), the sum with the lookup and `· 2^-0.5`. That last tensor
/// (fp32 unless the parameters are 16-bit) is kept: every layer's gate product saves a view of
/// its slice. Gemma 3n's conditional-generation model looks the table up itself
/// (`Gemma3nModel.forward`: `per_layer_inputs = self.language_model.get_per_layer_inputs(...)`)
/// and holds that local while the language model runs: under `no_grad` it lives to the end.
/// Gemma 4 and Gemma 3n under `no_grad` (inference, `generate`) save nothing on the way: the
/// lookup, the projection, its scaled copy (Gemma 3n's is in place) and the norm's fp32 input
/// and rstd die as `project_per_layer_inputs` rebinds its names, so only the combined tensor
/// is held (measured by `scripts/measure_gemma4audio_prefill.py`'s profile: after the stage
/// the text model holds `inputs_embeds`, the `[t, layers, width]` per-layer inputs and the
/// rotary tables, nothing else; for Gemma 3n's tiny text model `scripts/generate_live_at_peak.py`
/// on `measure_generate_gemma3n_cpu.py` finds one `[512, 6 · 64]` fp32 tensor, 786,432 B,
/// from `project_per_layer_inputs` live at the prefill's peak; the saved set a training tape
/// keeps here is 2 · `[t, layers · width]` fp32 + the rstd).
fn per_layer_inputs(
    tape: &mut Tape,
    x: super::tape::Id,
    spec: &ModelSpec,
    (t, width): (u64, u64),
    (num, train): (Numerics, bool),
) {
    let p = num.param;
    let n = t * spec.num_layers() * width;
    let was = tape.set_no_grad(!train && matches!(spec.naming, Naming::Gemma4 | Naming::Gemma3n));
    let ids = tape.external(t, 8);
    let looked_up = tape.op(&[ids], &[], n, p);
    let token_part = tape.op(&[looked_up], &[], n, p);
    let xin = if num.autocast && tape.width(x) == 4 {
        tape.fused_op(&[x], &[], t * spec.hidden_size, 2)
    } else {
        x
    };
    let mm_w = if num.autocast { 2 } else { num.compute };
    let proj = tape.op(&[xin], &[xin], n, mm_w);
    // Gemma 3n scales in place (`per_layer_projection *= ...`, `modeling_gemma3n.py`
    // `Gemma3nTextModel.project_per_layer_inputs`); Gemma 4 makes a new tensor.
    let scaled = if spec.naming == Naming::Gemma3n {
        proj
    } else {
        tape.op(&[proj], &[], n, mm_w)
    };
    let normed = tape.rms_norm(scaled, width, p, RmsWeight::InFp32, false);
    let sum = tape.fused_op(&[normed, token_part], &[], n, p.max(mm_w));
    let out = tape.fused_op(&[sum], &[], n, p.max(mm_w));
    tape.set_no_grad(was);
    tape.keep(out);
    // A conditional-generation model's forward holds the lookup in its own local while the
    // language model runs (Gemma 3n's embedders, Gemma 4's wrapper: `gemma4_wrapper_locals`).
    if !train && (spec.gemma3n.is_some_and(|g| g.embedders.is_some()) || gemma4_wrapper(spec)) {
        tape.keep(token_part);
    }
}

/// Gemma 4 as `Gemma4ForConditionalGeneration` (a `gemma4` config: the text model under its
/// vision tower), not the text model alone (`Gemma4ForCausalLM`).
fn gemma4_wrapper(spec: &ModelSpec) -> bool {
    spec.naming == Naming::Gemma4 && spec.vision.is_some()
}

/// What `Gemma4Model.forward` (transformers 5.24 `modeling_gemma4.py`) holds in its own locals
/// beyond the text model's tensors, under `no_grad` until the language model returns (in
/// training the forward's locals are gone before the backward's peak, so nothing here):
/// `get_placeholder_mask`'s three bool `[b, s]` masks (`input_ids == image_token_id`, video,
/// audio) and `multimodal_mask`, their `|` (the first `|`'s result dies as the second is
/// made); `llm_input_ids`, `torch.where` over a clone of the ids (int64, the clone dies at the
/// rebinding); with per-layer inputs `llm_inputs_embeds`, `torch.where(multimodal_mask[...,
/// None], pad_embedding, inputs_embeds)` (`[b, s, h]`, the embeddings' dtype) — and the
/// per-layer lookup it passes down ([`per_layer_inputs`]). Per token at fp32 with hidden 256
/// and 6 layers of 64: 4 · 1 + 8 + 1,024 + 1,536 = 2,572 B, the measured difference between
/// the wrapper and its text model alone (`validation/cpu-measured-gemma4audio-prefill.json`).
fn gemma4_wrapper_locals(tape: &mut Tape, x: super::tape::Id, spec: &ModelSpec, t: u64, p: u64) {
    let ids = tape.external(t, 8);
    let masks: Vec<_> = (0..3).map(|_| tape.op(&[ids], &[], t, 1)).collect();
    let either = tape.op(&[masks[0], masks[1]], &[], t, 1);
    let multimodal = tape.op(&[either, masks[2]], &[], t, 1);
    let clone = tape.op(&[ids], &[], t, 8);
    let llm_ids = tape.op(&[multimodal, clone], &[], t, 8);
    let mut held = vec![multimodal, llm_ids];
    held.extend(masks);
    if spec.embedding.per_layer_inputs.is_some() {
        held.push(tape.op(&[multimodal, x], &[], t * spec.hidden_size, p));
    }
    for id in held {
        tape.keep(id);
    }
}

/// The final norm and the head up to the logits. Returns the stage memory and the logits'
/// element width. `frozen`: the base weights train no gradient (LoRA), so the final norm's
/// weight saves nothing for one. `project` false: the loss projects the hidden state itself
/// (torchtune's `LinearCrossEntropyLoss`, `linear_ce.rs`): the stage ends at the final norm.
pub fn head(
    spec: &ModelSpec,
    (batch, seq): (u64, u64),
    num: Numerics,
    frozen: bool,
    project: bool,
) -> (StageMemory, u64) {
    let t = batch * seq;
    let (h, v) = (spec.hidden_size, spec.vocab_size);
    let mut tape = Tape::new();
    let mut x = tape.external(t * h, num.param);
    let mm_w = if num.autocast { 2 } else { num.compute };
    // Autocast casts a weight only where its dtype is not the region's (`aten/src/ATen/
    // autocast_mode.cpp` `cached_cast`, torch 2.15: `arg.scalar_type() != to_type`): fp32
    // weights get 16-bit copies; a 16-bit base (a PEFT job's frozen bf16 weights) is read as
    // it is. Measured: `validation/cpu-measured-lora-autocast.json` (no copy of the bf16
    // `lm_head` among the tensors live at the peak).
    let copies = num.autocast && num.param == 4;
    let mut weight_copies = 0;
    if let Some(g) = spec.gemma3n {
        let last = tape.external(t * h * g.altup_inputs, num.param);
        x = super::gemma3n_stages::unembed_streams(&mut tape, last, (t, h), g.altup_inputs, num);
        if copies {
            weight_copies += (g.altup_inputs - 1) * 2 * h * h;
        }
    }
    if let Some(n) = spec.decoder.final_norm {
        x = final_norm(&mut tape, x, n, t, num.param, spec, frozen);
    }
    if let Head::MaskedLm { .. } = spec.head {
        x = masked_lm_transform(&mut tape, x, t, h, num);
        if copies {
            weight_copies += 2 * h * h;
        }
    }
    let lm = matches!(
        spec.head,
        Head::LanguageModel { .. } | Head::MaskedLm { .. }
    );
    if !lm || !project {
        // Pooler / classifier on one token per sequence (or the last): negligible. The loss's
        // own projection: its weight copy under autocast is the head's, made in the loss.
        let mem = tape.memory(None, round_size);
        let copies = match (lm, copies) {
            (false, _) => 0,
            (true, c) => weight_copies + if c { 2 * h * v } else { 0 },
        };
        return (
            StageMemory {
                kept: mem.kept,
                peak: mem.peak,
                weight_copies: copies,
            },
            mm_w,
        );
    }
    let xin = if num.autocast && tape.width(x) == 4 {
        tape.op(&[x], &[], t * h, 2)
    } else {
        x
    };
    if copies {
        weight_copies += 2 * h * v;
    }
    let logits = tape.op(&[xin], &[xin], t * v, mm_w);
    // Gemma-2's final soft-capping: `/ cap`, `tanh` (its output saved), `* cap`.
    if spec.softcapping.final_logits.is_some() {
        let d = tape.op(&[logits], &[], t * v, mm_w);
        let th = tape.op(&[d], &[], t * v, mm_w);
        tape.keep(th);
        tape.op(&[th], &[], t * v, mm_w);
    }
    if spec.model_type == "falcon_h1" {
        // Falcon-H1: `lm_head(h) · lm_head_multiplier` (`FalconH1ForCausalLM.forward`): a
        // second logits tensor while the first is read.
        tape.op(&[logits], &[], t * v, mm_w);
    }
    // The logits are returned, not saved: kept only until the loss has read them.
    let mem = tape.memory(None, round_size);
    (
        StageMemory {
            kept: mem.kept,
            peak: mem.peak.max(mem.kept + round_size(t * v * mm_w)),
            weight_copies,
        },
        mm_w,
    )
}

/// The decoder's final norm over `t` tokens: LayerNorm saves its input and fp32 mean and
/// rstd; RMSNorm as [`Tape::rms_norm`] models it.
fn final_norm(
    tape: &mut Tape,
    x: super::tape::Id,
    n: crate::model::Norm,
    t: u64,
    p: u64,
    spec: &ModelSpec,
    frozen: bool,
) -> super::tape::Id {
    match n.kind {
        NormKind::LayerNorm { .. } => {
            let out = tape.op(&[x], &[x], t * n.dim, p);
            for _ in 0..2 {
                let s = tape.op(&[x], &[], t, 4);
                tape.keep(s);
            }
            out
        }
        NormKind::RmsNorm => tape.rms_norm(x, n.dim, p, super::blocks::rms_weight(spec), frozen),
    }
}

/// BERT's prediction head transform before the decoder: dense → GELU → LayerNorm.
fn masked_lm_transform(
    tape: &mut Tape,
    x: super::tape::Id,
    t: u64,
    h: u64,
    num: Numerics,
) -> super::tape::Id {
    let mm_w = if num.autocast { 2 } else { num.compute };
    let xin = if num.autocast {
        tape.op(&[x], &[], t * h, 2)
    } else {
        x
    };
    let d = tape.op(&[xin], &[xin], t * h, mm_w);
    let a = tape.op(&[d], &[d], t * h, mm_w);
    let a32 = if num.autocast {
        tape.op(&[a], &[], t * h, 4)
    } else {
        a
    };
    let out = tape.op(&[a32], &[a32], t * h, a32_width(num));
    for _ in 0..2 {
        let s = tape.op(&[a32], &[], t, 4);
        tape.keep(s);
    }
    out
}

fn a32_width(num: Numerics) -> u64 {
    if num.autocast {
        4
    } else {
        num.param
    }
}

/// The loss of transformers' heads (`ForCausalLMLoss`, BERT's `CrossEntropyLoss`): `log_softmax`
/// saved for backward (t·V, fp32 where `loss_width` says so), labels shifted into a new int64
/// tensor for a causal LM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossMemory {
    /// The saved log-softmax.
    pub saved: u64,
    /// Logits (and their fp32 copy) live while the loss runs, on top of `saved`.
    pub forward_transient: u64,
    /// At the start of backward: the gradient of the log-softmax and dlogits, both fp32 t·V.
    pub backward_transient: u64,
    /// dlogits in the logits' dtype, live while the head's backward runs.
    pub dlogits: u64,
}

pub use super::liger::{liger_grad_weight_scratch, loss_chunked};

/// The head's module names (`lm_head`, GPT-NeoX's `embed_out`), matched on a
/// `modules_to_save` entry's last dotted part as PEFT matches module keys.
const HEAD_MODULES: &[&str] = &["lm_head", "embed_out"];

/// Whether the head's weight requires grad in training: always without PEFT (a full
/// fine-tune); under LoRA/QLoRA only when `modules_to_save` names the head's module. PEFT
/// turns `requires_grad` off for every base parameter
/// (`peft/tuners/lora/model.py`, `_mark_only_adapters_as_trainable`) and gives each module
/// `modules_to_save` names a trainable `copy.deepcopy` (`peft/utils/other.py`,
/// `ModulesToSaveWrapper`). A tied head is no exception: the copy of `lm_head` gets a weight of
/// its own that trains, while a copy of the input embedding leaves the head's (original,
/// frozen) weight as it was.
pub fn head_trains(peft: Option<&crate::job::Peft>) -> bool {
    let Some(p) = peft else {
        return true;
    };
    p.modules_to_save.iter().any(|m| {
        let last = m.rsplit('.').next().unwrap_or(m);
        HEAD_MODULES.contains(&last)
    })
}

/// torchtune's chunks of output (`TransformerDecoder.chunked_output`,
/// `CEWithChunkedOutputLoss(num_output_chunks=8)`).
pub const OUTPUT_CHUNKS: u64 = 8;

/// torchtune's `CEWithChunkedOutputLoss` (`torchtune/modules/loss/ce_chunked_output_loss.py`)
/// on the chunks of `TransformerDecoder.chunked_output` (`torchtune/modules/transformer.py`):
/// the output projection makes the logits in [`OUTPUT_CHUNKS`] chunks along the sequence, in the
/// model's dtype, all kept in a list until the recipe's `del logits` after the loss
/// (`recipes/full_finetune_single_device.py`); each chunk is upcast to fp32 and
/// cross-entropied in turn, its log-softmax saved (fp32) and its upcast copy freed. Labels: the
/// recipe's left shift (`torch.hstack`, a new int64 `[b, s]`) and each chunk flattened (a copy
/// of a strided chunk). Backward runs the chunks' losses before any chunk's projection (their
/// autograd nodes are newer): the first chunk's `nll_loss` and `log_softmax` gradients (fp32)
/// are live together beside all the saved log-softmax; each chunk then leaves its 16-bit
/// gradient, so when the projections' backward begins all of `dlogits` (the logits' size) is
/// live.
pub fn loss_chunked_output(
    spec: &ModelSpec,
    batch: u64,
    seq: u64,
    logits_width: u64,
) -> LossMemory {
    let v = spec.vocab_size;
    let n = OUTPUT_CHUNKS.min(seq.max(1));
    // torch.chunk: chunks of ⌈s / n⌉ positions, the last one the rest.
    let per = seq.div_ceil(n);
    let chunks: Vec<u64> = (0..n)
        .map(|i| seq.saturating_sub(i * per).min(per))
        .filter(|&c| c > 0)
        .collect();
    let fp32 = |c: u64| round_size(batch * c * v * 4);
    let largest = chunks.iter().copied().max().unwrap_or(0);
    let saved: u64 = chunks.iter().map(|&c| fp32(c)).sum();
    let labels = round_size(batch * seq * 8)
        + chunks
            .iter()
            .map(|&c| round_size(batch * c * 8))
            .sum::<u64>();
    let logits: u64 = chunks
        .iter()
        .map(|&c| round_size(batch * c * v * logits_width))
        .sum();
    // The upcast is a copy only when the logits are not fp32 already (`.float()`).
    let upcast = if logits_width == 4 { 0 } else { fp32(largest) };
    // Backward, last chunk first: its two fp32 gradients on top of what is live then (each
    // earlier-run chunk has released its saved log-softmax and left its 16-bit gradient).
    let mut done: i128 = 0;
    let mut top: i128 = 0;
    for &c in chunks.iter().rev() {
        top = top.max(done + 2 * fp32(c) as i128);
        done += round_size(batch * c * v * logits_width) as i128 - fp32(c) as i128;
    }
    LossMemory {
        saved: saved + labels,
        forward_transient: logits + upcast,
        backward_transient: top.max(0) as u64,
        dlogits: logits,
    }
}

/// The largest of [`loss_chunked_output`]'s chunks of logits in `width` bytes: the first,
/// ⌈s / n⌉ positions (`torch.chunk`).
pub fn largest_output_chunk(batch: u64, seq: u64, vocab: u64, width: u64) -> u64 {
    let n = OUTPUT_CHUNKS.min(seq.max(1));
    round_size(batch * seq.div_ceil(n) * vocab * width)
}

/// Masked-LM classes whose loss is transformers' `ForMaskedLMLoss` (`loss/loss_utils.py`:
/// `logits = logits.float()` first), read off transformers 5.24's `models/*/modeling_*.py`:
/// the other 43 `...ForMaskedLM` classes (BERT, RoBERTa, ALBERT, DeBERTa, ELECTRA, ...) call
/// `CrossEntropyLoss()(prediction_scores.view(-1, V), labels.view(-1))` on the logits as they
/// are.
const MLM_LOSS_UPCASTS: &[&str] = &["modernbert", "eurobert", "esmc", "neomme", "ultrabert"];

/// The width `log_softmax` runs in: fp32 for causal LMs (`ForCausalLMLoss` upcasts with
/// `.float()`), under autocast (`log_softmax` is on its fp32 list) and for the masked-LM classes
/// that upcast; otherwise the logits' own width (a BERT-style head trained in pure fp16/bf16).
pub fn loss_width(spec: &ModelSpec, num: Numerics, logits_width: u64) -> u64 {
    let upcasts = match spec.head {
        Head::MaskedLm { .. } => MLM_LOSS_UPCASTS
            .iter()
            .any(|m| spec.model_type.eq_ignore_ascii_case(m)),
        _ => true,
    };
    if upcasts || num.autocast {
        4
    } else {
        logits_width
    }
}

/// The loss on t·V logits of `logits_width` bytes computed in `width` bytes (`loss_width`):
/// the upcast copy when the two differ, the saved log-softmax, and at the start of backward
/// the log-softmax's gradient (`nll_loss_backward`) and dlogits (`_log_softmax_backward_data`),
/// then dlogits cast back to the logits' dtype. Labels: a causal LM's are padded and shifted
/// into two new int64 tensors (`ForCausalLMLoss`); a masked LM's are a view. With
/// `saves_input` (PyTorch before 1.11, `job::TorchVersion::softmax_saves_input`) `log_softmax`
/// also keeps its input — the upcast copy, or the logits themselves — until its backward.
pub fn loss(
    spec: &ModelSpec,
    batch: u64,
    seq: u64,
    logits_width: u64,
    width: u64,
    saves_input: bool,
) -> LossMemory {
    let t = batch * seq;
    let v = spec.vocab_size;
    let tv = round_size(t * v * width);
    let logits = round_size(t * v * logits_width);
    let upcast = if logits_width == width { 0 } else { tv };
    let labels = match spec.head {
        Head::MaskedLm { .. } => 0,
        _ => round_size(batch * (seq + 1) * 8) + round_size(t * 8),
    };
    // The input log_softmax read: the upcast copy when there is one, else the logits.
    let input = if upcast > 0 { upcast } else { logits };
    let kept_input = if saves_input { input } else { 0 };
    LossMemory {
        saved: tv + labels + kept_input,
        forward_transient: logits + upcast - kept_input,
        backward_transient: 2 * tv,
        dlogits: if logits_width == width { 0 } else { logits },
    }
}
