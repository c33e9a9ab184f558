//! The device bytes of a CUDA step traced on fake tensors (`vramscope.trace`): the record has
//! the step's blocks (rounded as the caching allocator rounds them) but no allocator segments,
//! so the reserved bytes come from the estimator's model of the caching allocator
//! (`vramscope_core::estimate::overhead::reserved_estimate_with_hole`: 2 MiB / 20 MiB
//! segments, c10/cuda/CUDACachingAllocator.cpp) over the blocks live at the traced peak, and
//! the CUDA context from its model of the GPU the trace emulated (`"traced": {"gpu": ...}`).

use crate::snapshot::{Action, TraceEntry};
use std::collections::HashMap;
use vramscope_core::estimate::overhead;
use vramscope_core::job::CudaModuleLoading;

/// What a CUDA trace's device holds at its peak, beyond the allocated bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracedDevice {
    pub peak_allocated: u64,
    /// The allocator's reserved bytes at the peak (the estimator's model).
    pub peak_reserved: u64,
    /// The CUDA context of the emulated GPU (the estimator's model, lazy module loading as
    /// PyTorch sets it since 2.1); None when the record names no GPU the catalog knows.
    pub cuda_context: Option<u64>,
    /// The cuBLAS workspaces the step's GEMMs would hold on that GPU under today's PyTorch (the
    /// estimator's `blas_workspaces_bytes`: one handle for a forward, two with a backward);
    /// 0 without a known GPU.
    pub workspaces: u64,
    /// What the device holds at the peak: the reserved bytes of the traced blocks and the
    /// workspaces together, plus the context; None without a known GPU.
    pub device_total: Option<u64>,
}

/// The blocks at the allocated peak of a trace: (peak bytes, sizes live then, the largest block
/// freed before the peak whose size is not allocated again before it — its cached block stays
/// reserved beside the live ones).
fn peak_blocks(trace: &[TraceEntry]) -> (u64, Vec<u64>, u64) {
    let (mut now, mut peak, mut peak_at) = (0u64, 0u64, 0usize);
    let mut live: HashMap<u64, u64> = HashMap::new();
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                live.insert(e.addr, e.size);
                now = now.saturating_add(e.size);
            }
            Action::FreeCompleted => now = now.saturating_sub(live.remove(&e.addr).unwrap_or(0)),
            _ => continue,
        }
        if now > peak {
            (peak, peak_at) = (now, i + 1);
        }
    }
    live.clear();
    let mut last_alloc: HashMap<u64, usize> = HashMap::new();
    let mut freed: Vec<(usize, u64)> = Vec::new();
    for (i, e) in trace[..peak_at].iter().enumerate() {
        match e.action {
            Action::Alloc => {
                live.insert(e.addr, e.size);
                last_alloc.insert(e.size, i);
            }
            Action::FreeCompleted => {
                if let Some(size) = live.remove(&e.addr) {
                    freed.push((i, size));
                }
            }
            _ => {}
        }
    }
    let hole = freed
        .iter()
        .filter(|(at, size)| last_alloc.get(size).is_none_or(|&a| a < *at))
        .map(|&(_, size)| size)
        .max()
        .unwrap_or(0);
    (peak, live.into_values().collect(), hole)
}

/// The reserved bytes, CUDA context and device total of a CUDA trace; `gpu` is the catalog id
/// it names, `training` whether the step ran a backward.
pub fn traced_device(trace: &[TraceEntry], gpu: Option<&str>, training: bool) -> TracedDevice {
    let (peak_allocated, mut live, hole) = peak_blocks(trace);
    let peak_reserved =
        overhead::reserved_estimate_with_hole(peak_allocated, &live, hole).max(peak_allocated);
    let Some(g) = gpu.and_then(|id| vramscope_core::gpu::find(id).ok()) else {
        return TracedDevice {
            peak_allocated,
            peak_reserved,
            cuda_context: None,
            workspaces: 0,
            device_total: None,
        };
    };
    let context = overhead::cuda_context_bytes_with(Some(g), CudaModuleLoading::Lazy);
    let handles = if training { 2 } else { 1 };
    let one = overhead::cublas_workspace_bytes(Some(g));
    live.extend(std::iter::repeat_n(one, handles));
    let workspaces = one * handles as u64;
    let with_ws = peak_allocated + workspaces;
    let reserved = overhead::reserved_estimate_with_hole(with_ws, &live, hole).max(with_ws);
    TracedDevice {
        peak_allocated,
        peak_reserved,
        cuda_context: Some(context),
        workspaces,
        device_total: Some(reserved + context),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: Action, addr: u64, size: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            device_free: None,
            time_us: None,
            stack: 0,
            category: None,
            user_metadata: 0,
        }
    }

    #[test]
    fn large_blocks_get_their_own_segments_and_a_freed_one_stays_cached() {
        const MIB: u64 = 1 << 20;
        // 100 MiB allocated and freed, then 64 MiB + 64 MiB live: the peak is 128 MiB. Blocks
        // of 10 MiB or more get segments of their size rounded to 2 MiB (CUDACachingAllocator
        // `get_allocation_size`), and the 100 MiB block, never asked for again, stays cached:
        // reserved = 64 + 64 + 100 = 228 MiB.
        let t = [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
        ];
        let d = traced_device(&t, None, true);
        assert_eq!(d.peak_allocated, 128 * MIB);
        assert_eq!(d.peak_reserved, 228 * MIB);
        assert_eq!(d.cuda_context, None);
    }

    #[test]
    fn a_size_allocated_again_reuses_its_cached_block() {
        const MIB: u64 = 1 << 20;
        // 64 MiB freed then 64 MiB asked for again: the cached block serves it, no hole:
        // reserved = the two live 64 MiB blocks = 128 MiB.
        let t = [
            entry(Action::Alloc, 1, 64 * MIB),
            entry(Action::FreeCompleted, 1, 64 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
        ];
        assert_eq!(traced_device(&t, None, true).peak_reserved, 128 * MIB);
    }

    #[test]
    fn the_named_gpu_brings_its_context_and_workspaces() {
        const MIB: u64 = 1 << 20;
        // One 64 MiB block on an H100 in a training step: the estimator's Hopper context is
        // the H200's measured 794,820,608 B = 758 MiB (overhead.rs), and each of the two cuBLAS
        // handles (forward, backward) holds 32 MiB of workspace (cuBLAS's recommended size on
        // sm90; today's cuBLASLt shares it), each a block of 10 MiB or more in its own segment
        // of its size: 64 + 2 × 32 + 758 = 886 MiB.
        let t = [entry(Action::Alloc, 1, 64 * MIB)];
        let d = traced_device(&t, Some("h100-80gb"), true);
        assert_eq!(d.cuda_context, Some(758 * MIB));
        assert_eq!(d.workspaces, 64 * MIB);
        assert_eq!(d.peak_reserved, 64 * MIB);
        assert_eq!(d.device_total, Some(886 * MIB));
        // Inference: one handle, 64 + 32 + 758 = 854 MiB.
        let d = traced_device(&t, Some("h100-80gb"), false);
        assert_eq!(d.device_total, Some(854 * MIB));
        let d = traced_device(&t, Some("no-such-gpu"), true);
        assert_eq!((d.cuda_context, d.device_total), (None, None));
    }
}
