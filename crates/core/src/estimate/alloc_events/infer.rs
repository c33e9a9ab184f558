//! An inference process's allocator events: Hugging Face `generate` (greedy) as
//! `validation/gpu/run_one.py` runs it — the weights, `empty_cache()`, the prompt, then calls of
//! `model.generate` (a warm-up and a measured one): the prefill forward, then one decode
//! forward per new token, with transformers' `DynamicCache` (the default): each layer's keys
//! and values are the prefill's, then grown by `torch.cat` per decode step — a new tensor one
//! token longer, the old one freed (`cache_utils.py` `DynamicLayer.update`); a sliding-window
//! or chunked layer (`DynamicSlidingWindowLayer`) holds the whole prompt after the prefill
//! (a view of its `torch.cat`) and `min(prompt + step, window)` tokens after each decode step
//! (`kv::GenerateLayer::bytes_after`, `estimate/generate_kv.rs`). A layer's recurrent state
//! is made at the prefill and kept. With
//! `cache_implementation="static"` the cache is transformers' `StaticCache` instead
//! (`static_cache.rs`). The blocks' tensors live as transformers' Python names hold them under
//! `no_grad` (`blocks/mod.rs` `Prog::hold`, [`prefill`]).

use super::infer_inputs::InferInputs;
use super::{reserve_block, run_block, Phase, Sink};
use crate::estimate::kv::GenerateLayer;

/// One layer's cache in the stream: what it grows by, and its keys', values' and recurrent
/// state's ids.
struct LayerCache {
    layer: GenerateLayer,
    ids: [u32; 3],
}

/// Everything the inference stream is made from.
/// The process's events into `s`.
pub fn infer_into<S: Sink>(s: &mut S, inp: &InferInputs) {
    s.phase(Phase::Context);
    s.alloc(inp.workspace);
    s.phase(Phase::Load);
    for &p in inp.params {
        s.alloc(p);
    }
    s.empty_cache();
    let b = inp.batch;
    // input_ids and attention_mask (int64), held by the caller.
    s.alloc(b * inp.prompt * 8);
    s.alloc(b * inp.prompt * 8);
    for call in 0..inp.calls {
        s.phase(Phase::Forward(call));
        generate(s, inp);
    }
}

/// One `generate` call: prefill, decode steps, the output ids kept by the caller until the
/// next call.
fn generate<S: Sink>(s: &mut S, inp: &InferInputs) {
    let layers = inp.events.layer_block.len();
    let mut cache: Vec<LayerCache> = Vec::with_capacity(layers);
    prefill(s, inp, &mut cache);
    let mut ids = u32::MAX;
    let mut mask = u32::MAX;
    let b = inp.batch;
    for t in decode_steps(inp.new_tokens) {
        // Sampling after each forward: the last position's logits copied to fp32
        // (`outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)`), the argmax, the
        // ids and mask grown by one token (`torch.cat`: new tensors, the old ones freed).
        let logits = s.alloc(b * inp.vocab * inp.logits_width);
        let scores = s.alloc(b * inp.vocab * 4);
        s.free(logits);
        let next = s.alloc(b * 8);
        let len = inp.prompt + t;
        let new_ids = s.alloc(b * len * 8);
        let new_mask = s.alloc(b * len * 8);
        s.free(ids);
        s.free(mask);
        s.free(next);
        s.free(scores);
        ids = new_ids;
        mask = new_mask;
        if t == inp.new_tokens {
            break;
        }
        // One decode forward: per layer the cache grows by one token (dynamic) or the whole
        // static cache is read through `repeat_kv` (`static_cache::decode`); the blocks' own
        // tensors for one token are small-pool blocks left out here.
        if let Some(sc) = inp.static_cache {
            super::static_cache::decode(s, inp, sc, cache.len());
            continue;
        }
        for c in cache.iter_mut() {
            grow(s, c, inp.prompt, t);
        }
    }
    s.free(mask);
    for c in cache {
        for id in c.ids {
            s.free(id);
        }
    }
    // The returned ids live until the caller drops them (`del out` after the call).
    s.free(ids);
}

/// One layer's `update` on decode step `t` (`cache_utils.py`, transformers 5.24): a
/// `DynamicLayer` rebinds `self.keys` to the keys' `torch.cat` (the old keys freed) before the
/// values' cat; a `DynamicSlidingWindowLayer` makes both cats, then rebinds both
/// (`kv::GenerateLayer::update_transient`).
fn grow<S: Sink>(s: &mut S, c: &mut LayerCache, prompt: u64, t: u64) {
    let bytes = c.layer.bytes_after(prompt, t);
    if c.layer.window.is_some() {
        let grown = [s.alloc(bytes), s.alloc(bytes)];
        s.free(c.ids[0]);
        s.free(c.ids[1]);
        c.ids[..2].copy_from_slice(&grown);
        return;
    }
    for slot in c.ids[..2].iter_mut() {
        let grown = s.alloc(bytes);
        s.free(*slot);
        *slot = grown;
    }
}

/// Tokens whose sampling (and the decode forward after it) the stream writes: all up to
/// [`DECODE_KEPT`], else the first and last `DECODE_KEPT / 2` — the middle steps only repeat
/// the cache's one-token growth, and one `torch.cat` from the last kept length to the next
/// stands for them (bounding the events of a long generation; on the H200 dynamic-cache run
/// the decode steps added 2 MiB of reserve after the prefill's 2.3 GiB).
fn decode_steps(n: u64) -> impl Iterator<Item = u64> {
    let half = DECODE_KEPT / 2;
    (1..=n).filter(move |&t| n <= DECODE_KEPT || t <= half || t > n - half)
}

/// Decode steps written in full (see [`decode_steps`]).
const DECODE_KEPT: u64 = 32;

/// The prefill forward as transformers 5.x runs it under `torch.no_grad()`, where a tensor
/// lives as long as a Python name holds it (`modeling_llama.py`): `LlamaModel.forward` makes
/// `inputs_embeds` and the rotary `cos`/`sin` and holds both to its end; its loop
/// (`hidden_states = decoder_layer(hidden_states, ...)`) holds each layer's input until the
/// layer returns (the block's events free it last, `blocks/mod.rs`), and the first layer's
/// input is `inputs_embeds` itself, freed after the final norm (Gemma 3n's is the stack of its
/// AltUp streams, `ForwardPlan::first_input`). Each layer's cache is made at
/// its first `update`, between the rotary embedding and the attention kernel, in both cache
/// modes ([`prefill_block`]). The attention masks are made after the embeddings and die when
/// the model's forward returns. Then the final norm and the head on the last position.
fn prefill<S: Sink>(s: &mut S, inp: &InferInputs, cache: &mut Vec<LayerCache>) {
    let plan = inp.plan;
    let tokens = inp.batch * inp.prompt;
    let e = &plan.embedding;
    let embeds = s.alloc(inp.hidden_per_token * tokens);
    let first = plan.first_input;
    let extra = s.alloc(e.kept.saturating_sub(inp.hidden_per_token * tokens + first));
    // The forward's attention masks (`attention_masks::forward_masks`): eager's float masks
    // filled from a bool pattern that dies once filled; SDPA's bool sliding/chunked masks.
    let pattern = s.alloc(plan.masks.pattern * u64::from(plan.masks.bytes > 0));
    let masks = s.alloc(plan.masks.bytes);
    s.free(pattern);
    let cache_len = inp.static_cache.map_or(inp.prompt, |sc| sc.len);
    // A first layer's input made after the masks (Gemma 3n's AltUp stack), freed by the
    // first block as any layer's input.
    let mut input = if first > 0 { s.alloc(first) } else { embeds };
    for (i, &bi) in inp.events.layer_block.iter().enumerate() {
        let Some(b) = inp.events.blocks.get(bi as usize) else {
            continue;
        };
        let layer = inp.kv_layers.get(i).copied().unwrap_or(GenerateLayer {
            per_token: inp.kv_per_token,
            ..GenerateLayer::default()
        });
        let ids = reserve_block(s, b, input);
        let kv = prefill_block(
            s,
            b,
            ids,
            [layer.per_token * cache_len, layer.state],
            input == embeds,
        );
        cache.push(LayerCache { layer, ids: kv });
        for &c in &b.copies {
            s.free(ids.id(b, c));
        }
        input = ids.output(b);
    }
    // `LlamaModel.forward` returns: its mask dict dies before the head runs.
    s.free(masks);
    let head = s.alloc(plan.head.peak);
    s.free(head);
    s.free(input);
    s.free(embeds);
    s.free(extra);
}

/// One prefill block: its events up to the attention kernel (projections, rotary), the layer's
/// keys and values made by the cache's first `update` (`cache_utils.py`:
/// `DynamicLayer.update` and `DynamicSlidingWindowLayer.update` concatenate the rotated keys
/// onto an empty tensor, `torch.cat`, a new tensor of the prompt's length, the sliding layer
/// keeping a view of it; `StaticLayer.lazy_initialization` makes `torch.zeros`
/// of `max_cache_len` and `update` copies into them in place) — `sizes[0]` bytes each — and
/// its recurrent state (`sizes[1]`), then the projected keys and
/// values die (`key_states, value_states = cache.update(...)` rebinds the names to the cache's
/// tensors), the kernel and the rest of the block. A static cache's keys reach the kernel
/// sliced to the prompt (a view), with no mask and no `repeat_kv` (`static_cache.rs`), so both
/// modes run the same kernel. `keep_input`: the input is `inputs_embeds`, which
/// `LlamaModel.forward` frees itself. Returns the ids of the layer's keys, values and state.
fn prefill_block<S: Sink>(
    s: &mut S,
    b: &crate::estimate::tape::BlockEvents,
    ids: super::BlockIds,
    sizes: [u64; 2],
    keep_input: bool,
) -> [u32; 3] {
    let evs = &b.forward_no_save;
    let at = b
        .attention_at
        .map_or(evs.len(), |a| a as usize)
        .min(evs.len());
    run_block(s, b, &evs[..at], ids, keep_input);
    let k = s.alloc(sizes[0]);
    let v = s.alloc(sizes[0]);
    let state = s.alloc(sizes[1]);
    for slot in b.attention_kv.into_iter().flatten() {
        if slot != b.input {
            s.free(ids.id(b, slot));
        }
    }
    run_block(s, b, &evs[at..], ids, keep_input);
    [k, v, state]
}
