//! The walk's recorder: live bytes per category, each event a timeline point, the peak kept;
//! and the layer labels every walk shares.

use crate::report::{Category, CategoryBytes, Components, TimelinePoint};
use std::borrow::Cow;

/// Live bytes per category at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Live {
    pub(super) c: Components,
}

/// Records the step's events and keeps the peak.
pub(super) struct Walk {
    pub(super) live: Live,
    pub(super) points: Vec<TimelinePoint>,
    /// The highest total so far, what was live then, and its event's index in `points`
    /// (remembered by index so a new peak copies no strings).
    pub(super) peak: (u64, Components, Option<usize>),
}

impl Walk {
    /// A walk with room for `events` points (one growth of the vector is one allocation).
    pub(super) fn new(events: usize) -> Self {
        Walk {
            live: Live::default(),
            points: Vec::with_capacity(events),
            peak: (0, Components::default(), None),
        }
    }

    pub(super) fn add(&mut self, cat: Category, bytes: u64) {
        if let Some(v) = self.live.c.get_mut(cat) {
            *v = v.saturating_add(bytes);
        }
    }

    pub(super) fn sub(&mut self, cat: Category, bytes: u64) {
        if let Some(v) = self.live.c.get_mut(cat) {
            *v = v.saturating_sub(bytes);
        }
    }

    /// Records the current state as an event; `transient` bytes (temporaries) exist only at this
    /// moment.
    pub(super) fn mark(&mut self, phase: &'static str, label: Cow<'static, str>, transient: u64) {
        let mut c = self.live.c;
        c.temporaries = c.temporaries.saturating_add(transient);
        let total = c.allocated();
        if total > self.peak.0 {
            self.peak = (total, c, Some(self.points.len()));
        }
        let mut by_category = CategoryBytes::default();
        for k in Category::ALLOCATED {
            by_category.set(k, c.get(k));
        }
        self.points.push(TimelinePoint {
            phase: Cow::Borrowed(phase),
            label,
            allocated: total,
            by_category,
        });
    }
}

/// "layer {i}", made once for the first [`LAYER_LABELS`] layers and shared by every estimate
/// (a walk labels each block twice, forward and backward).
pub(super) fn layer_label(i: usize) -> Cow<'static, str> {
    static LABELS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let labels = LABELS.get_or_init(|| (0..LAYER_LABELS).map(|i| format!("layer {i}")).collect());
    match labels.get(i) {
        Some(l) => Cow::Borrowed(l.as_str()),
        None => Cow::Owned(format!("layer {i}")),
    }
}

/// How many layer labels [`layer_label`] keeps made.
const LAYER_LABELS: usize = 256;

/// FSDP2's buffers in the walk (`alloc_events/fsdp.rs`), where the stream writes the job.
pub(super) type Fsdp<'a> = Option<&'a crate::estimate::alloc_events::fsdp::WalkBuffers>;
