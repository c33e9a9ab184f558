//! `analyze`'s `allocator` field: a snapshot's allocation trace replayed through the
//! caching-allocator model ([`crate::alloc_replay`]), and the same allocations under other
//! settings — what `PYTORCH_CUDA_ALLOC_CONF` would have changed about reserved memory.
//!
//! The what-ifs, each on top of the record's own settings:
//! - `expandable_segments`: `expandable_segments:True` — segments grow and shrink by pages
//!   (c10/cuda/CUDACachingAllocator.cpp `ExpandableSegment`), so freed room at a segment's end
//!   serves the next request of any size instead of waiting for one that fits;
//! - `max_split_size_mb:128` and `max_split_size_mb:512`: blocks above N MiB are never split
//!   (`get_free_block` / `should_split` with `max_split_size`), so a large cached block is not
//!   carved up by small requests and stays whole for the next large one. 128 MiB is below the
//!   transient blocks that dominate a training step's churn (the loss's logits and their
//!   gradient: batch × seq × vocab × 4 B, hundreds of MiB at modest sizes, e.g. 393 MiB for
//!   GPT-2 at 4 × 512), 512 MiB above most of them — the two values people try after
//!   PyTorch's OOM message suggests the setting, one on each side of those blocks.
//!
//! Every what-if and its baseline (the record's own settings) run by the same method
//! ([`AllocReplay::peak_reserved_under`]: the model's own addresses, unlimited memory), so a
//! saving is the setting's, not the method's.

use crate::alloc_replay::{replay_device, traced_devices, AllocReplay};
use crate::snapshot::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;
use vramscope_core::allocator::AllocatorConfig;

/// The `max_split_size_mb` values tried (see the module doc).
pub const MAX_SPLIT_WHATIF_MB: [u64; 2] = [128, 512];

/// `analyze --json`'s `allocator`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorSection {
    /// The model's `max_memory_reserved` over the trace, under the record's settings.
    pub replayed_peak_reserved: u64,
    /// 1 − peak allocated / peak reserved, both as replayed.
    pub fragmentation: f64,
    /// Peak reserved bytes the same allocations need under each setting.
    pub whatif: BTreeMap<String, u64>,
    /// The record's own peak reserved (its segment events), when it knows it.
    pub recorded_peak_reserved: Option<u64>,
    /// Every segment event came out as recorded (same point, kind, address, size).
    pub exact: bool,
    /// The trace starts with nothing reserved: every segment and block is in it.
    pub complete_history: bool,
    /// The settings replayed, in `PYTORCH_CUDA_ALLOC_CONF` syntax ("" = PyTorch's defaults).
    pub alloc_conf: String,
    /// What was assumed or is unknown (a trace that starts mid-run says what).
    pub notes: Vec<String>,
    /// Of the what-ifs, the baseline they are measured against: the same calls under the
    /// record's own settings, by the what-ifs' method.
    pub whatif_baseline: u64,
}

impl AllocatorSection {
    /// Bytes `expandable_segments:True` would have saved against the baseline; `None` when it
    /// would not have saved any.
    pub fn expandable_saving(&self) -> Option<u64> {
        let with = *self.whatif.get("expandable_segments")?;
        Some(self.whatif_baseline.saturating_sub(with)).filter(|&s| s > 0)
    }
}

/// The section for device `device` of a snapshot, or `None` when its trace has no
/// allocation calls (a `state`-only snapshot, a dump without history).
pub fn section(snap: &Snapshot, device: usize) -> Option<AllocatorSection> {
    if !traced_devices(snap).contains(&device) {
        return None;
    }
    Some(from_replay(&replay_device(snap, device)?))
}

/// The section of a trace already replayed.
pub fn from_replay(replay: &AllocReplay) -> AllocatorSection {
    let r = &replay.result;
    let own = AllocatorConfig::parse(&r.alloc_conf).unwrap_or_default();
    let mut notes = r.notes.clone();
    if !r.complete_history {
        notes.push(
            "what-ifs start from the blocks live when the trace began, not from the segments \
             cached then (unknown before the trace): compare them with whatif_baseline, not \
             with the peak reserved"
                .into(),
        );
    }
    if r.recorded_ooms > 0 {
        notes.push(
            "what-ifs run with unlimited device memory: the run's releases of cached blocks at \
             its OOMs (release-and-retry) are not in them"
                .into(),
        );
    }
    AllocatorSection {
        replayed_peak_reserved: r.replayed_peak_reserved,
        fragmentation: r.fragmentation,
        whatif: whatifs(replay, &own),
        recorded_peak_reserved: r.recorded_peak_reserved,
        exact: r.first_mismatch.is_none(),
        complete_history: r.complete_history,
        alloc_conf: r.alloc_conf.clone(),
        notes,
        whatif_baseline: replay.peak_reserved_under(&own),
    }
}

/// Peak reserved under `expandable_segments:True` and each `max_split_size_mb` of
/// [`MAX_SPLIT_WHATIF_MB`], each on top of `own`.
fn whatifs(replay: &AllocReplay, own: &AllocatorConfig) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let expandable = AllocatorConfig {
        expandable_segments: true,
        ..own.clone()
    };
    out.insert(
        "expandable_segments".to_string(),
        replay.peak_reserved_under(&expandable),
    );
    for mb in MAX_SPLIT_WHATIF_MB {
        let c = AllocatorConfig {
            max_split_size_mb: Some(mb),
            ..own.clone()
        };
        if c.validate().is_ok() {
            out.insert(
                format!("max_split_size_mb:{mb}"),
                replay.peak_reserved_under(&c),
            );
        }
    }
    out
}
