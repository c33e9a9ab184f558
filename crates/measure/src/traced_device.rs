//! The device bytes of a CUDA step traced on fake tensors (`vramscope.trace`): the record has
//! the step's full alloc/free history but no allocator segments, so the history is replayed
//! through the caching-allocator model (`vramscope_core::allocator`, PyTorch's
//! `DeviceCachingAllocator` in c10/cuda/CUDACachingAllocator.cpp) under the record's allocator
//! settings (PyTorch's defaults when it names none): the reserved bytes are the model's
//! `max_memory_reserved`. The CUDA context comes from the estimator's model of the GPU
//! the trace emulated (`"traced": {"gpu": ...}`), and the cuBLAS workspaces the step's GEMMs
//! would hold on it are allocated in a second replay, where the step's phases say their
//! handles were first used.

use crate::snapshot::{Action, TraceEntry};
use std::collections::HashMap;
use vramscope_core::allocator::{Allocator, AllocatorConfig, BlockId};
use vramscope_core::estimate::overhead;
use vramscope_core::job::CudaModuleLoading;

/// What a CUDA trace's device holds at its peak, beyond the allocated bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedDevice {
    /// The model's `max_memory_allocated` over the trace (blocks, not requests).
    pub peak_allocated: u64,
    /// The model's `max_memory_reserved` over the trace's own blocks.
    pub peak_reserved: u64,
    /// The CUDA context of the emulated GPU (the estimator's model, lazy module loading as
    /// PyTorch sets it since 2.1); None when the record names no GPU the catalog knows.
    pub cuda_context: Option<u64>,
    /// The cuBLAS workspaces the step's GEMMs would hold on that GPU under today's PyTorch (the
    /// estimator's `cublas_workspace_bytes` per handle: one for a forward, one more for the
    /// autograd thread's backward); 0 without a known GPU.
    pub workspaces: u64,
    /// What the device holds at the peak: the model's `max_memory_reserved` over the traced
    /// blocks and the workspaces together, plus the context; None without a known GPU.
    pub device_total: Option<u64>,
    /// Per trace entry, the block the model gave the allocation made there (0 for other
    /// entries).
    pub block_sizes: Vec<u64>,
}

/// One replay of the trace's calls: `alloc` → `malloc(size, stream)`, `free_completed` →
/// `free` (the block goes back to its pool there, `free_block`; `free_requested` only marks
/// the user's release). `workspaces` are (trace entry, bytes): a block allocated, and kept,
/// just before that entry. Returns the model and each allocation's block size.
fn replay(
    trace: &[TraceEntry],
    config: &AllocatorConfig,
    workspaces: &[(usize, u64)],
) -> (Allocator, Vec<u64>) {
    let mut model = Allocator::new(config, u64::MAX);
    let mut live: HashMap<u64, BlockId> = HashMap::new();
    let mut sizes = vec![0u64; trace.len()];
    for (i, e) in trace.iter().enumerate() {
        for &(_, bytes) in workspaces.iter().filter(|w| w.0 == i) {
            // Unlimited memory: a malloc cannot fail.
            let _ = model.malloc(bytes, e.stream);
        }
        match e.action {
            Action::Alloc => {
                if let Ok(id) = model.malloc(e.size, e.stream) {
                    sizes[i] = model.block(id).map_or(0, |b| b.1);
                    if let Some(old) = live.insert(e.addr, id) {
                        // The record reused a live address: the older block is gone.
                        model.free(old);
                    }
                }
            }
            Action::FreeCompleted => {
                if let Some(id) = live.remove(&e.addr) {
                    model.free(id);
                }
            }
            _ => {}
        }
    }
    (model, sizes)
}

/// The reserved bytes, CUDA context and device total of a CUDA trace under `config`; `gpu` is
/// the catalog id it names, `handles_at` the trace entries before which a cuBLAS handle first
/// runs a GEMM (its workspace is allocated there and kept: `CublasHandlePool.cpp`
/// `getCurrentCUDABlasHandle`), one per handle.
pub fn traced_device(
    trace: &[TraceEntry],
    config: &AllocatorConfig,
    gpu: Option<&str>,
    handles_at: &[usize],
) -> TracedDevice {
    let (model, block_sizes) = replay(trace, config, &[]);
    let stats = model.stats();
    let mut d = TracedDevice {
        peak_allocated: stats.allocated_bytes.peak,
        peak_reserved: stats.reserved_bytes.peak,
        cuda_context: None,
        workspaces: 0,
        device_total: None,
        block_sizes,
    };
    let Some(g) = gpu.and_then(|id| vramscope_core::gpu::find(id).ok()) else {
        return d;
    };
    let one = overhead::cublas_workspace_bytes(Some(g));
    let workspaces: Vec<(usize, u64)> = handles_at.iter().map(|&at| (at, one)).collect();
    let (with_ws, _) = replay(trace, config, &workspaces);
    let context = overhead::cuda_context_bytes_with(Some(g), CudaModuleLoading::Lazy);
    d.cuda_context = Some(context);
    d.workspaces = one * handles_at.len() as u64;
    d.device_total = Some(with_ws.stats().reserved_bytes.peak + context);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

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

    fn defaults() -> AllocatorConfig {
        AllocatorConfig::default()
    }

    #[test]
    fn a_freed_large_block_is_split_for_the_next_request() {
        // CUDACachingAllocator.cpp, default settings. 100 MiB: large pool, ≥ 10 MiB, so
        // `get_allocation_size` rounds it to 2 MiB: a 100 MiB segment. Freed, it is cached.
        // 64 MiB: `get_free_block` takes the cached 100 MiB block (best fit, no
        // max_split_size), and `should_split` splits it (36 MiB left > kSmallSize = 1 MiB):
        // a 64 MiB block, 36 MiB free. The next 64 MiB finds nothing that large: a new 64 MiB
        // segment. Reserved = 100 + 64 = 164 MiB; allocated peak = 128 MiB.
        let t = [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
        ];
        let d = traced_device(&t, &defaults(), None, &[]);
        assert_eq!(d.peak_allocated, 128 * MIB);
        assert_eq!(d.peak_reserved, 164 * MIB);
        assert_eq!(d.block_sizes, [100 * MIB, 0, 64 * MIB, 64 * MIB]);
        assert_eq!((d.cuda_context, d.device_total), (None, None));
    }

    #[test]
    fn an_unsplit_remainder_counts_as_allocated() {
        // 100 MiB freed, then 99.5 MiB asked for: the cached 100 MiB block serves it, and the
        // 0.5 MiB left is ≤ kSmallSize, so `should_split` keeps it in the block: the block is
        // 100 MiB, and allocated (block->size) is 100 MiB, not 99.5.
        let t = [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 99 * MIB + MIB / 2),
        ];
        let d = traced_device(&t, &defaults(), None, &[]);
        assert_eq!(d.block_sizes[2], 100 * MIB);
        assert_eq!((d.peak_allocated, d.peak_reserved), (100 * MIB, 100 * MIB));
    }

    #[test]
    fn small_blocks_share_a_two_mib_segment() {
        // 1024 B, 512 B, 512 B: the small pool (≤ 1 MiB); the first takes a kSmallBuffer =
        // 2 MiB segment and splits it (small pool: split when ≥ kMinBlockSize = 512 B is left),
        // the others are carved from what is left. Reserved 2 MiB, allocated 2,048 B.
        let t = [
            entry(Action::Alloc, 1, 1024),
            entry(Action::Alloc, 2, 512),
            entry(Action::Alloc, 3, 512),
        ];
        let d = traced_device(&t, &defaults(), None, &[]);
        assert_eq!((d.peak_allocated, d.peak_reserved), (2048, 2 * MIB));
    }

    #[test]
    fn the_named_gpu_brings_its_context_and_workspaces() {
        // One 64 MiB block on an H100 in a training step: the estimator's Hopper context is
        // the H200's measured 794,820,608 B = 758 MiB (overhead.rs), and each of the two cuBLAS
        // handles (forward, backward) holds 32 MiB of workspace (cuBLAS's recommended size on
        // sm90; today's cuBLASLt shares it). Nothing is cached when they are allocated: each a
        // new 32 MiB segment (≥ 10 MiB: its size rounded to 2 MiB). 64 + 2 × 32 + 758 = 886 MiB.
        let t = [entry(Action::Alloc, 1, 64 * MIB)];
        let d = traced_device(&t, &defaults(), Some("h100-80gb"), &[0, 0]);
        assert_eq!(d.cuda_context, Some(758 * MIB));
        assert_eq!(d.workspaces, 64 * MIB);
        assert_eq!(d.peak_reserved, 64 * MIB);
        assert_eq!(d.device_total, Some(886 * MIB));
        // Inference: one handle, 64 + 32 + 758 = 854 MiB.
        let d = traced_device(&t, &defaults(), Some("h100-80gb"), &[0]);
        assert_eq!(d.device_total, Some(854 * MIB));
        let d = traced_device(&t, &defaults(), Some("no-such-gpu"), &[0, 0]);
        assert_eq!((d.cuda_context, d.device_total), (None, None));
    }

    #[test]
    fn a_workspace_allocated_late_reuses_a_cached_block() {
        // 100 MiB allocated and freed; the backward's handle first runs at entry 2, when the
        // cached 100 MiB block serves its 32 MiB (split: 68 MiB free); then 64 MiB fits in the
        // 68 MiB block (split again, 4 MiB left > 1 MiB). Nothing new is reserved: the device
        // holds the 100 MiB segment alone, plus the forward handle's 32 MiB taken at entry 0
        // (nothing cached then: a segment of its own). 100 + 32 + 758 = 890 MiB.
        let t = [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
        ];
        let d = traced_device(&t, &defaults(), Some("h100-80gb"), &[0, 2]);
        assert_eq!(d.peak_reserved, 100 * MIB);
        assert_eq!(d.device_total, Some(890 * MIB));
    }

    #[test]
    fn the_record_settings_change_the_reserve() {
        // expandable_segments:True: one segment per (stream, pool) mapped in 20 MiB pages for
        // the large pool (`ExpandableSegment`). 100 MiB maps 5 pages; freed, its pages stay
        // mapped (no empty_cache); 64 MiB and 64 MiB: the first takes the front of the free
        // 100 MiB, the second needs 28 MiB more at the end: 2 more pages (40 MiB). Reserved
        // 140 MiB, against 164 MiB with fixed segments (the first test).
        let t = [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
        ];
        let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
        let d = traced_device(&t, &config, None, &[]);
        assert_eq!(d.peak_reserved, 140 * MIB);
    }
}
