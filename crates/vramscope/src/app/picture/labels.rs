//! The words and order every rendering shares: the categories shown and their order, a
//! category's label in a report, the fit verdict (the application's, `app::verdict`) and the
//! headroom called tight. The picture and the terminal both read them (`render` re-exports).

use vramscope_core::report::{Category, Fit, Report};

/// Headroom below which a fit is called tight (allocator fragmentation, another process or a
/// longer batch can take it).
pub const TIGHT_HEADROOM: i64 = 1 << 30;

/// The categories an estimate reports, in the order of every table and picture
/// (`vramscope_core::report::Category`; `unattributed` belongs to measurements only).
pub const SHOWN: [Category; 9] = Category::ESTIMATED;

/// The fit verdict every renderer draws: the application's (`app::verdict`), never decided
/// here.
pub fn fit_of(report: &Report) -> Option<Fit> {
    super::super::verdict(report)
}

/// A category's label in this report: a serving engine's preallocated KV pool shows as the
/// reserved-but-unallocated bytes, so for vLLM the allocator reserve is labelled as the pool's
/// free blocks (the same words in the bar, the table and the picture).
pub fn label_in(report: &Report, c: Category) -> &'static str {
    if c == Category::AllocatorReserve && report.per_gpu.kv_pool.is_some() {
        "KV pool (free blocks)"
    } else if c == Category::KvCache && report.model.state_space_layers.is_some() {
        // State-space layers cache a recurrent state per sequence, not K/V per token.
        // Falcon-H1's layers hold both (heads read: attention beside every mixer).
        if report.model.state_space_layers == report.model.layers && report.model.heads.is_none() {
            "recurrent state (constant in context)"
        } else {
            "KV cache + recurrent state (constant)"
        }
    } else {
        c.label()
    }
}
