//! The snapshot's `allocator_settings` dict, typed: what `torch.cuda.memory._snapshot()` writes
//! from `CUDAAllocatorConfig` (`THCPModule_memorySnapshot`, `torch/csrc/cuda/Module.cpp`):
//! the variable as set, and the values the allocator ran with.

use crate::pickle::{Id, Node, Tree};

/// `allocator_settings` (torch ≥ 2.1); each field absent when the file lacks it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as the process read it.
    pub conf: Option<String>,
    pub expandable_segments: Option<bool>,
    /// `max_split_size` in bytes; the file writes −1 (`SIZE_MAX` as a signed value) when unset.
    pub max_split_size: Option<i64>,
    /// 0 when unset.
    pub garbage_collection_threshold: Option<f64>,
    /// `roundup_power2_divisions` as written: (interval start in MiB, divisions), in the file's
    /// order.
    pub roundup_power2_divisions: Vec<(u64, u64)>,
}

/// Reads `allocator_settings` from the snapshot's root dict.
pub(super) fn read(t: Tree<'_>, root: Id) -> Option<AllocatorSettings> {
    let s = t.get(root, "allocator_settings")?;
    let divisions = match t.get(s, "roundup_power2_divisions").map(|d| t.node(d)) {
        Some(Node::Dict(items)) => items
            .iter()
            .filter_map(|&(k, v)| {
                let interval = t.as_str(k)?.parse::<u64>().ok()?;
                Some((interval, t.as_u64(v)?))
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(AllocatorSettings {
        conf: t
            .get(s, "PYTORCH_CUDA_ALLOC_CONF")
            .and_then(|v| t.as_str(v))
            .map(str::to_string),
        expandable_segments: t.get(s, "expandable_segments").and_then(|v| t.as_bool(v)),
        max_split_size: t.get(s, "max_split_size").and_then(|v| t.as_i64(v)),
        garbage_collection_threshold: t
            .get(s, "garbage_collection_threshold")
            .and_then(|v| t.as_f64(v)),
        roundup_power2_divisions: divisions,
    })
}
