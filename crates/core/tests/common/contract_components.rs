//! The contract's `per_gpu.components` keys (`../shared/contract.md`, the Report JSON and its
//! category table), written once for the tests that check a report's shape; shared with the
//! measure and vramscope tests by `#[path]`.

/// What PyTorch's allocator hands out, by category: in a measured report they sum to
/// `per_gpu.peaks.peak_allocated` (`unattributed`: what `analyze` could not place).
pub const ALLOCATED: [&str; 8] = [
    "parameters",
    "gradients",
    "optimizer_states",
    "master_weights",
    "activations",
    "kv_cache",
    "temporaries",
    "unattributed",
];

/// The components outside what the allocator hands out: the CUDA context and the allocator's
/// reserve.
pub const OUTSIDE: [&str; 2] = ["cuda_context", "allocator_reserve"];
