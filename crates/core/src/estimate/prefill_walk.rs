//! The prefill's KV cache in the step's walk (`simulate.rs`), layer by layer, as HF `generate`
//! makes it: transformers 5.24's `DynamicCache` starts empty (`cache_utils.py`
//! `DynamicCache.__init__`: lazily initialised layers) and each layer's first `update`, called
//! from its attention module between the rotary embedding and the attention interface, makes
//! that layer's keys and values (`DynamicLayer.update` / `DynamicSlidingWindowLayer.update`:
//! `torch.cat` onto an empty tensor, a new tensor of the prompt's length) and rebinds the
//! module's `key_states, value_states` to them, so the projected keys and values die there.
//! Layer `i`'s fullest moment therefore holds the caches of layers `0..=i` — not the whole
//! prompt's cache of every layer — and never both a layer's projected keys and its cached
//! copy. The inference stream writes the same (`alloc_events/infer.rs` `prefill_block`);
//! this gives the walk each layer's cache and its block's top with that cache in it.
//!
//! Measured on the CPU (`validation/cpu-measured-gemma4audio-prefill.json`, a profiler hook
//! on each layer of the tiny Gemma 4 text model, 2 × 256): the cache grows by each layer's
//! own keys and values as the layer runs (524,288 B on a sliding layer, 1,048,576 B on the
//! full one), and the full-attention layer 2, whose wider head the walk had made the call's
//! top with all four layers' caches beside it, is not the measured peak (layer 3's MLP is).

use super::alloc_events::inputs::expressible_infer;
use super::forward_plan::ForwardPlan;
use super::overhead::round_size;
use super::tape::BlockEvents;
use crate::job::{ResolvedJob, Task};
use crate::model::ModelSpec;

/// One layer of the prefill in the walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefillLayer {
    /// Bytes of the layer's cache once its first `update` has run (keys, values and any
    /// recurrent state).
    pub cache: u64,
    /// The block's fullest moment with its own cache in it, counted from the block's
    /// events (`forward_no_save`): its tensors live at that moment plus the cache once made.
    pub top: u64,
}

/// The prefill's layers in the walk, and the bytes of cache they make between them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefill {
    pub layers: Vec<PrefillLayer>,
    /// The sum of the layers' caches (what the walk no longer holds from the call's start).
    pub made: u64,
}

/// Each of `plan`'s layers in the prefill, where the walk can place the cache layer by layer:
/// an HF `generate` job the inference stream writes (`expressible_infer`: one GPU, a
/// decoder-only LM, no images), with transformers' dynamic cache (a `StaticCache` is made
/// whole at its first `update`, `static_cache.rs`), one block per decoder layer. Empty
/// otherwise: the walk then holds the whole prefill's cache from the call's start.
pub fn prefill_layers(
    spec: Option<&ModelSpec>,
    job: &ResolvedJob,
    plan: Option<&ForwardPlan>,
) -> Prefill {
    let layers = match (spec, plan) {
        (Some(spec), Some(plan)) => layers_of(spec, job, plan).unwrap_or_default(),
        _ => Vec::new(),
    };
    Prefill {
        made: layers.iter().map(|l| l.cache).sum(),
        layers,
    }
}

/// [`prefill_layers`] of a model with an architecture and a plan.
fn layers_of(spec: &ModelSpec, job: &ResolvedJob, plan: &ForwardPlan) -> Option<Vec<PrefillLayer>> {
    if job.task != Task::Infer || job.engine.static_cache() || !expressible_infer(job, spec, plan) {
        return None;
    }
    let events = plan.events.as_deref()?;
    let kv = super::kv::generate_layers(spec, job);
    if kv.len() != plan.layers.len() || events.layer_block.len() != plan.layers.len() {
        return None;
    }
    kv.iter()
        .zip(&events.layer_block)
        .map(|(l, &bi)| {
            let b = events.blocks.get(bi as usize)?;
            let keys = l.per_token.saturating_mul(job.seq);
            let cache = keys.saturating_mul(2).saturating_add(l.state);
            Some(PrefillLayer {
                cache,
                top: top_with_cache(b, cache),
            })
        })
        .collect()
}

/// The most bytes `b`'s no-grad forward holds at once (each tensor 512-rounded, as the
/// block's `Tape::memory`), with `cache` bytes made where the attention module's
/// `cache.update` runs (`attention_at`; after the block's last event where none is marked)
/// and the keys and values the kernel reads (`attention_kv`) freed there, rebound to it.
fn top_with_cache(b: &BlockEvents, cache: u64) -> u64 {
    let evs = &b.forward_no_save;
    let at = b
        .attention_at
        .map_or(evs.len(), |a| a as usize)
        .min(evs.len());
    let size = |slot: u32| round_size(b.sizes.get(slot as usize).copied().unwrap_or(0));
    let mut live = vec![false; b.sizes.len()];
    let (mut cur, mut top) = (0u64, 0u64);
    for (i, e) in evs.iter().map(Some).chain([None]).enumerate() {
        if i == at {
            cur += cache;
            top = top.max(cur);
            for slot in b.attention_kv.into_iter().flatten() {
                if std::mem::take(&mut live[slot as usize]) {
                    cur -= size(slot);
                }
            }
        }
        let Some(e) = e else { break };
        let slot = e.slot();
        if e.is_free() {
            if std::mem::take(&mut live[slot as usize]) {
                cur -= size(slot);
            }
        } else if !std::mem::replace(&mut live[slot as usize], true) {
            cur += size(slot);
            top = top.max(cur);
        }
    }
    top
}
