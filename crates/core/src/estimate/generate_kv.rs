//! The KV cache of an HF `generate` call at the moments the step's walk marks (`simulate.rs`):
//! the prefill, the first decode step and the last one.
//!
//! The cache classes are transformers 5.24's (`cache_utils.py`). `DynamicCache` (the default)
//! builds per layer type a `DynamicLayer` (full attention: each `update` concatenates the new
//! keys onto the old, `torch.cat`, a new tensor, the old one freed when the name is rebound) or
//! a `DynamicSlidingWindowLayer` (`"sliding_attention"` and `"chunked_attention"`,
//! `DYNAMIC_LAYER_TYPE_MAPPING`): its `update` makes the same `torch.cat` of its kept keys and
//! the new ones, returns it whole to the attention, and keeps
//! `full_key_states[:, :, -sliding_window + 1:, :]` — a view, which holds the whole
//! concatenation alive. So after the prefill a sliding layer holds the entire prompt; its first
//! decode `update` concatenates the view's `window − 1` tokens with the new one (a new tensor
//! of `window` tokens) and rebinding `self.keys` frees the prompt's storage — layer by layer,
//! during that first decode forward. From then on each step holds `window` tokens. Measured on
//! the CPU (`validation/cpu-measured-generate-swa.json`: a 1,024-token prompt and a window of
//! 128: 4,194,304 B of keys storage per layer after the prefill, 524,288 B after a decode step).
//!
//! `StaticCache` (`engine.cache: "static"`) builds `StaticSlidingWindowLayer`s of
//! `min(window, max_cache_len)` tokens allocated once (`StaticSlidingWindowLayer.__init__`,
//! `StaticLayer.lazy_initialization`) and copied into in place: no view, the window is all it
//! keeps (a prompt past the window reaches the attention as the projected keys themselves, the
//! block's own tensors).

use super::kv::{self, GenerateLayer};
use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// The cache's bytes at the walk's marks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenerateKv {
    /// Through the prefill and at its end: every layer's keys and values of the whole prompt
    /// (`DynamicLayer` and `DynamicSlidingWindowLayer` alike,
    /// [`kv::generate_prefill_bytes_per_gpu`]), or the whole `max_cache_len` capped at each
    /// sliding layer's window (`StaticCache`: `torch.zeros` at the first `update`).
    pub prefill: u64,
    /// At the end of the call: at the last decode step prompt + new tokens − 1
    /// (`kv::generate_cache_tokens`), at most the window on a sliding layer; with one new token
    /// (no decode forward) what the prefill left.
    pub full: u64,
    /// What the last decode step's `torch.cat`s add for one layer while they run (made before
    /// the old ones are freed, [`GenerateLayer::update_transient`]: the largest layer's); the static
    /// cache's masked attention copies a layer's keys and values to every query head
    /// (`repeat_kv`, `alloc_events/static_cache.rs`).
    pub decode_transient: u64,
    /// The first decode step's fullest moment where a sliding layer still holds the prompt
    /// (`None` where no layer's storage shrinks: the last step is the fuller).
    pub first_step: Option<FirstStep>,
}

/// The fullest moment of the first decode forward of a dynamic cache whose sliding layers
/// give back the prompt's storage one layer at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstStep {
    /// Cache storage then (the prefill's less what earlier layers gave back).
    pub cache: u64,
    /// The layer's new keys (and values, on a sliding layer), made while old ones live.
    pub transient: u64,
}

/// [`GenerateKv`] of `job` on `spec`.
pub fn generate_kv(spec: &ModelSpec, job: &ResolvedJob) -> Result<GenerateKv, CoreError> {
    let windowed = kv::kv_cache_bytes_per_gpu(spec, job, kv::generate_cache_tokens(job))?;
    if job.engine.static_cache() {
        let layers = spec.num_layers().max(1);
        return Ok(GenerateKv {
            prefill: windowed,
            full: windowed,
            decode_transient: windowed / layers * repeat(spec),
            first_step: None,
        });
    }
    let prefill = kv::generate_prefill_bytes_per_gpu(spec, job)?;
    if job.new_tokens <= 1 {
        return Ok(GenerateKv {
            prefill,
            full: prefill,
            ..GenerateKv::default()
        });
    }
    let layers = kv::generate_layers(spec, job);
    let last = job.new_tokens - 1;
    let decode_transient = layers
        .iter()
        .map(|l| l.update_transient(job.seq, last))
        .max()
        .unwrap_or(0);
    Ok(GenerateKv {
        prefill,
        full: windowed,
        decode_transient,
        first_step: first_step(&layers, job.seq, prefill),
    })
}

/// `repeat_kv`'s `n_rep` of the first layer (query heads per key/value head), 0 without
/// grouped-query attention (`modeling_llama.py` `num_key_value_groups`).
fn repeat(spec: &ModelSpec) -> u64 {
    spec.decoder
        .layers
        .first()
        .and_then(|l| match l.attention.kind {
            crate::model::AttentionKind::Standard {
                heads, kv_heads, ..
            } if kv_heads > 0 && heads > kv_heads => Some(heads / kv_heads),
            _ => None,
        })
        .unwrap_or(0)
}

/// The first decode step's fullest moment, layers updated in order: before layer `l`'s update
/// the earlier layers hold their one-step storage `a_i` per keys (or values) and the rest the
/// prompt's `p_i`. A sliding layer's update makes its new keys and values (`2·a_l`) while the
/// old ones live; a full layer's makes its new keys while the old keys and values live, then
/// its new values while the new keys and old values live (`p_l + 2·a_l` then, the fuller, as
/// `a_l > p_l`) — [`GenerateLayer::update_transient`]. `None` when no layer shrinks (a full
/// cache's last step is fuller than its first). `prefill`: the whole cache after the prefill
/// (states and cross-attention caches included, which the step leaves alone).
fn first_step(layers: &[GenerateLayer], prompt: u64, prefill: u64) -> Option<FirstStep> {
    let sizes: Vec<(u64, u64, bool)> = layers
        .iter()
        .map(|l| {
            (
                l.bytes_after(prompt, 0),
                l.bytes_after(prompt, 1),
                l.window.is_some(),
            )
        })
        .collect();
    if sizes.iter().all(|&(p, a, _)| a >= p) {
        return None;
    }
    let mut given_back: i128 = 0;
    let mut best: Option<(i128, FirstStep)> = None;
    for &(p, a, sliding) in &sizes {
        let before = i128::from(prefill) - given_back;
        let (cache, transient) = if sliding {
            (before, 2 * i128::from(a))
        } else {
            (before - i128::from(p) + i128::from(a), i128::from(a))
        };
        let total = cache + transient;
        if best.is_none_or(|(t, _)| total > t) {
            let to_u64 = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
            best = Some((
                total,
                FirstStep {
                    cache: to_u64(cache),
                    transient: to_u64(transient),
                },
            ));
        }
        given_back += 2 * (i128::from(p) - i128::from(a));
    }
    best.map(|(_, f)| f)
}
