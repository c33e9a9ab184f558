//! The device bytes of a CUDA step traced on fake tensors (`vramscope.trace`): the record has
//! the step's full alloc/free history but no allocator segments, so the history is replayed
//! through the caching-allocator model (`vramscope_core::allocator`, PyTorch's
//! `DeviceCachingAllocator` in c10/cuda/CUDACachingAllocator.cpp) under the record's allocator
//! settings (PyTorch's defaults when it names none): the reserved bytes are the model's
//! `max_memory_reserved`. The CUDA context comes from the estimator's model of the GPU
//! the trace emulated (`"traced": {"gpu": ...}`), and the cuBLAS workspaces the step's GEMMs
//! would hold on it are allocated in a second replay, where the step's phases say their
//! handles were first used.

use crate::snapshot::{Action, TraceEntry, WarmupCall};
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
    /// entries; an entry of what was alive when the step began has the warm-up's block).
    pub block_sizes: Vec<u64>,
}

/// One call of a replay: an allocation of `size` bytes at `addr`, a free of `addr`, or
/// nothing (a trace entry that is neither).
#[derive(Debug, Clone, Copy)]
enum Call {
    Alloc { addr: u64, size: u64, stream: u64 },
    Free { addr: u64 },
    Nothing,
}

/// The calls of a traced record: its warm-up steps, then its own entries (`alloc` → malloc,
/// `free_completed` → free: the block goes back to its pool there, `free_block`;
/// `free_requested` only marks the user's release). A call's position in this sequence is
/// what `handles_at` counts.
fn calls(warmup: &[WarmupCall], trace: &[TraceEntry]) -> Vec<Call> {
    let w = warmup.iter().map(|c| match c.alloc {
        true => Call::Alloc {
            addr: c.addr,
            size: c.size,
            stream: 0,
        },
        false => Call::Free { addr: c.addr },
    });
    let t = trace.iter().map(|e| match e.action {
        Action::Alloc => Call::Alloc {
            addr: e.addr,
            size: e.size,
            stream: e.stream,
        },
        Action::FreeCompleted => Call::Free { addr: e.addr },
        _ => Call::Nothing,
    });
    w.chain(t).collect()
}

/// One replay of `calls`; `workspaces` are (position, bytes): a block allocated, and kept,
/// just before that call. An allocation at an address already live is that block (the record
/// lists what was alive when its step began, which the warm-up allocated). Returns the model
/// and each call's block size (0 for other calls).
fn replay(
    calls: &[Call],
    config: &AllocatorConfig,
    workspaces: &[(usize, u64)],
) -> (Allocator, Vec<u64>) {
    let mut model = Allocator::new(config, u64::MAX);
    let mut live: HashMap<u64, BlockId> = HashMap::new();
    let mut sizes = vec![0u64; calls.len()];
    for (i, call) in calls.iter().enumerate() {
        for &(_, bytes) in workspaces.iter().filter(|w| w.0 == i) {
            // Unlimited memory: a malloc cannot fail.
            let _ = model.malloc(bytes, 0);
        }
        match *call {
            Call::Alloc { addr, size, stream } => {
                if let Some(&id) = live.get(&addr) {
                    sizes[i] = model.block(id).map_or(0, |b| b.1);
                    continue;
                }
                if let Ok(id) = model.malloc(size, stream) {
                    sizes[i] = model.block(id).map_or(0, |b| b.1);
                    live.insert(addr, id);
                }
            }
            Call::Free { addr } => {
                if let Some(id) = live.remove(&addr) {
                    model.free(id);
                }
            }
            Call::Nothing => {}
        }
    }
    (model, sizes)
}

/// The reserved bytes, CUDA context and device total of a CUDA trace, its `warmup` steps
/// replayed before it, under `config`; `gpu` is the catalog id it names, `handles_at` the
/// positions (warm-up calls first, then trace entries) before which a cuBLAS handle first runs
/// a GEMM (its workspace is allocated there and kept: `CublasHandlePool.cpp`
/// `getCurrentCUDABlasHandle`), one per handle.
pub fn traced_device(
    trace: &[TraceEntry],
    warmup: &[WarmupCall],
    config: &AllocatorConfig,
    gpu: Option<&str>,
    handles_at: &[usize],
) -> TracedDevice {
    let calls = calls(warmup, trace);
    let (model, mut block_sizes) = replay(&calls, config, &[]);
    block_sizes.drain(..warmup.len());
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
    let (with_ws, _) = replay(&calls, config, &workspaces);
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
        TraceEntry::bare(action, addr, size)
    }

    /// 100 MiB allocated and freed, then two allocations of 64 MiB.
    fn hundred_freed_then_two_64() -> [TraceEntry; 4] {
        [
            entry(Action::Alloc, 1, 100 * MIB),
            entry(Action::FreeCompleted, 1, 100 * MIB),
            entry(Action::Alloc, 2, 64 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
        ]
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
        let t = hundred_freed_then_two_64();
        let d = traced_device(&t, &[], &defaults(), None, &[]);
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
        let d = traced_device(&t, &[], &defaults(), None, &[]);
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
        let d = traced_device(&t, &[], &defaults(), None, &[]);
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
        let d = traced_device(&t, &[], &defaults(), Some("h100-80gb"), &[0, 0]);
        assert_eq!(d.cuda_context, Some(758 * MIB));
        assert_eq!(d.workspaces, 64 * MIB);
        assert_eq!(d.peak_reserved, 64 * MIB);
        assert_eq!(d.device_total, Some(886 * MIB));
        // Inference: one handle, 64 + 32 + 758 = 854 MiB.
        let d = traced_device(&t, &[], &defaults(), Some("h100-80gb"), &[0]);
        assert_eq!(d.device_total, Some(854 * MIB));
        let d = traced_device(&t, &[], &defaults(), Some("no-such-gpu"), &[0, 0]);
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
        let d = traced_device(&t, &[], &defaults(), Some("h100-80gb"), &[0, 2]);
        assert_eq!(d.peak_reserved, 100 * MIB);
        assert_eq!(d.device_total, Some(890 * MIB));
    }

    fn warm(alloc: bool, addr: u64, size: u64, phase: &str) -> WarmupCall {
        WarmupCall {
            alloc,
            addr,
            size,
            phase: phase.to_string(),
        }
    }

    #[test]
    fn the_warm_up_leaves_its_cache_to_the_step() {
        // Warm-up: a 30 MiB weight (setup), a 100 MiB transient of the forward, freed. The
        // step's record lists the weight again (alive when it began), then 64 MiB and 64 MiB.
        // The weight keeps its warm-up block (30 MiB: ≥ 10 MiB, a segment of its size); the
        // first 64 MiB splits the cached 100 MiB block (36 MiB left > 1 MiB), the second finds
        // nothing that large: a new segment. Reserved 30 + 100 + 64 = 194 MiB; allocated peak
        // max(30 + 100, 30 + 64 + 64) = 158 MiB. Without the warm-up the step would start
        // with nothing cached: 30 + 64 + 64 = 158 MiB reserved.
        let warmup = [
            warm(true, 1, 30 * MIB, "setup"),
            warm(true, 2, 100 * MIB, "forward"),
            warm(false, 2, 100 * MIB, "forward"),
        ];
        let t = [
            entry(Action::Alloc, 1, 30 * MIB),
            entry(Action::Alloc, 3, 64 * MIB),
            entry(Action::Alloc, 4, 64 * MIB),
        ];
        let d = traced_device(&t, &warmup, &defaults(), None, &[]);
        assert_eq!((d.peak_allocated, d.peak_reserved), (158 * MIB, 194 * MIB));
        assert_eq!(d.block_sizes, [30 * MIB, 64 * MIB, 64 * MIB]);
        assert_eq!(
            traced_device(&t, &[], &defaults(), None, &[]).peak_reserved,
            158 * MIB
        );
        // The forward's handle first runs at the warm-up's position 1, nothing cached then: a
        // 32 MiB segment of its own. 194 + 32 + 758 = 984 MiB.
        let d = traced_device(&t, &warmup, &defaults(), Some("h100-80gb"), &[1]);
        assert_eq!(d.device_total, Some(984 * MIB));
    }

    #[test]
    fn the_record_settings_change_the_reserve() {
        // expandable_segments:True: one segment per (stream, pool) mapped in 20 MiB pages for
        // the large pool (`ExpandableSegment`). 100 MiB maps 5 pages; freed, its pages stay
        // mapped (no empty_cache); 64 MiB and 64 MiB: the first takes the front of the free
        // 100 MiB, the second needs 28 MiB more at the end: 2 more pages (40 MiB). Reserved
        // 140 MiB, against 164 MiB with fixed segments (the first test).
        let t = hundred_freed_then_two_64();
        let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
        let d = traced_device(&t, &[], &config, None, &[]);
        assert_eq!(d.peak_reserved, 140 * MIB);
    }
}
