//! What every linear weight format's byte count is made of: the weight's shape as a stack of
//! matrices, and the overflow-checked sum of the parts (values, scales, zero points). Shared
//! by `linear` (the dispatch) and the formats it dispatches to.

/// A weight's shape as the linear formats see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Matrix {
    /// All elements.
    pub n: u64,
    /// Stacked matrices (experts), 1 for a plain weight.
    pub batch: u64,
    pub out: u64,
    pub inp: u64,
}

/// Sums byte counts, each `None` when it overflowed; `None` if any did or the sum does.
pub(super) fn sum(parts: &[Option<u64>]) -> Option<u64> {
    parts.iter().try_fold(0u64, |a, p| a.checked_add((*p)?))
}
