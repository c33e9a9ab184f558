//! Memory a GPU process holds beyond its live tensors: the PyTorch caching allocator's rounding
//! and reserve (`max_memory_reserved` − `max_memory_allocated`), the cuBLAS workspaces that go
//! through that allocator, and what sits outside it (CUDA context, loaded kernels, NCCL buffers).
//!
//! Every constant names its source; `docs/overheads.md` gives the measured cases behind the
//! context and fragmentation figures.

use crate::allocator::size as alloc_size;
use crate::gpu::Gpu;
use crate::job::{CudaModuleLoading, TorchVersion};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Caching-allocator constants, `c10/cuda/CUDACachingAllocator.cpp` (pytorch/pytorch; the same
// values in 1.x and 2.x; `kLargeBuffer` moved to `c10/core/AllocatorConfig.h` in 2.8+).
// ---------------------------------------------------------------------------------------------

// The constants are the allocator model's (`crate::allocator::size`), named here as the
// estimator has always read them.

/// `kMinBlockSize`: every block is a multiple of 512 bytes.
pub const MIN_BLOCK_SIZE: u64 = alloc_size::MIN_BLOCK_SIZE;
/// `kSmallSize`: requests up to 1 MiB go to the small pool.
pub const SMALL_SIZE: u64 = alloc_size::SMALL_SIZE;
/// `kSmallBuffer`: the small pool cudaMallocs 2 MiB segments.
pub const SMALL_BUFFER: u64 = alloc_size::SMALL_BUFFER;
/// `kLargeBuffer`: requests between 1 MiB and 10 MiB cudaMalloc a 20 MiB segment.
pub const LARGE_BUFFER: u64 = alloc_size::LARGE_BUFFER;
/// `kMinLargeAlloc`: from 10 MiB on, a request gets a segment of its own size.
pub const MIN_LARGE_ALLOC: u64 = alloc_size::MIN_LARGE_ALLOC;
/// `kRoundLarge`: such a segment is rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = alloc_size::ROUND_LARGE;

/// Pools larger than this are packed by their byte sum instead of first-fit (bounds the work).
const MAX_PACKED_ITEMS: usize = 4096;

/// The block size the allocator gives a request: `round_size` in `CUDACachingAllocator.cpp`
/// (multiple of 512, at least 512). `allocate(0)` returns an empty pointer there without
/// reaching `round_size`, so 0 stays 0 here. The estimator's one rounding function: every
/// tensor it counts as `max_memory_allocated` goes through it (re-exported as
/// `estimate::round_size`).
pub fn round_size(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        alloc_size::round_size(bytes, &[0; crate::allocator::config::ROUNDUP_INTERVALS])
    }
}

/// The cudaMalloc size for a block of `rounded` bytes when no cached block fits:
/// `get_allocation_size` (≤ 1 MiB → 2 MiB segment, < 10 MiB → 20 MiB, else rounded up to 2 MiB).
pub fn segment_size(rounded: u64) -> u64 {
    if rounded == 0 {
        0
    } else {
        alloc_size::allocation_size(rounded)
    }
}

/// What `max_memory_allocated` counts for one request served from a fresh segment. The stat adds
/// `block->size`, and a large-pool block is split only when more than 1 MiB would remain
/// (`should_split`: `remaining > kSmallSize`), so an 11 MiB request keeps its whole 12 MiB
/// segment while a 10.5 MiB one is split from it.
pub fn block_size(bytes: u64) -> u64 {
    let rounded = round_size(bytes);
    if rounded < MIN_LARGE_ALLOC {
        // A fresh 2 MiB or 20 MiB segment always leaves ≥ 1 MiB, so the block is split.
        return rounded;
    }
    let segment = segment_size(rounded);
    if segment - rounded > SMALL_SIZE {
        rounded
    } else {
        segment
    }
}

fn round_up(value: u64, multiple: u64) -> u64 {
    value.div_ceil(multiple).saturating_mul(multiple)
}

// ---------------------------------------------------------------------------------------------
// CUDA context and runtime state outside the allocator.
// ---------------------------------------------------------------------------------------------

/// The device assumed when the job names no GPU: the A100 80GB (Ampere), the contract's example
/// device and the one most published PyTorch measurements were taken on.
pub const DEFAULT_ARCH: &str = "ampere";

/// Context size and where the figure comes from, for one architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextFigure {
    /// Architecture the figure is for (`DEFAULT_ARCH` when no GPU was given).
    pub arch: &'static str,
    pub bytes: u64,
    /// One line naming the measurements behind the figure.
    pub source: &'static str,
}

/// Hopper's context after a step, lazy loading: on one H200 (torch 2.11.0+cu130, driver
/// 580.159.04; `../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl`) each run's NVML
/// process figure minus `memory_reserved` at the end of its last step (`outside_allocator`):
/// 794,820,608 B in 10 runs (training with SDPA), 778,043,392 B in 5 (eager attention or
/// fp32), 731,906,048 and 2 × 719,323,136 B in the three generate runs; the median of the 18
/// is 794,820,608 B. The same processes read 708,837,376 B after the context probe's first
/// matmuls: what a step adds (66–82 MiB) are the kernels it loads on first use, so the figure
/// for `device_total` is the one after a step.
pub const HOPPER_LAZY_AFTER_STEP: u64 = 794_820_608;

/// Hopper's context after a step with `CUDA_MODULE_LOADING=EAGER` (the results file's
/// `qwen0.5b-eager-loading-bf16mix-adamw-sdpa-b4s1024`, the one eager run): 1,944,059,904 B
/// after its steps, 1,853,882,368 B after the first matmuls (1.73 GiB), 1,310,720,000 B at
/// `torch.cuda.init()`.
pub const HOPPER_EAGER_AFTER_STEP: u64 = 1_944_059_904;

/// Per-architecture context after a training step with lazy module loading (CUDA ≥ 11.7 and
/// PyTorch ≥ 1.13 set `CUDA_MODULE_LOADING=LAZY`, pytorch/pytorch#86509). Kernels load on first
/// use, so the figure includes the cuBLAS/cuDNN/ATen kernels a step touches. With eager loading
/// (older stacks) it was 1.0–1.3 GiB: 1343 MiB on a V100 in the HF "model memory anatomy" guide
/// (driver 460, CUDA 11.2).
const CONTEXTS: &[ContextFigure] = &[
    ContextFigure {
        arch: "volta",
        bytes: 450 * MIB,
        source: "no lazy-loading V100 printout found; bare context ~256 MiB on 80-SM parts \
                 (RTX 3090, invoke-ai/InvokeAI#9413) plus kernels loaded by a step",
    },
    ContextFigure {
        arch: "turing",
        bytes: 300 * MIB,
        source: "T4 OOM report: 164 MiB outside PyTorch mid-training (meta-llama/llama-cookbook#949); \
                 ptrblck ~300 MB lazy context (pytorch/pytorch#107667)",
    },
    ContextFigure {
        arch: "ampere",
        bytes: 500 * MIB,
        source: "A100 80GB OOM reports: 0.49 GiB (zjunlp/EasyEdit#563) and 0.50 GiB \
                 (Kwai-Keye/Keye#11) outside PyTorch; bare context 256 MiB (RTX 3090)",
    },
    ContextFigure {
        arch: "ada",
        bytes: 500 * MIB,
        source: "L40S HF Trainer OOM: 0.50 GiB outside PyTorch (huggingface/sentence-transformers#3214); \
                 RTX 4090 0.49 GiB (3DTopia/Phidias-Diffusion#8); bare RTX 6000 Ada 426 MiB \
                 (unslothai/unsloth-zoo#1053)",
    },
    ContextFigure {
        arch: "hopper",
        bytes: HOPPER_LAZY_AFTER_STEP,
        source: "H200, torch 2.11.0+cu130, driver 580.159.04: NVML process used − reserved \
                 after the steps, median of the 18 lazy-loading runs of \
                 ../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl (758 MiB; 676 MiB \
                 after the first matmuls, the rest kernels the step loads)",
    },
    ContextFigure {
        arch: "blackwell",
        bytes: 800 * MIB,
        source: "no measurement found; Hopper figure plus the larger SM count (148 on B200)",
    },
    ContextFigure {
        arch: "cdna2",
        bytes: 500 * MIB,
        source: "no ROCm measurement found; Ampere figure assumed",
    },
    ContextFigure {
        arch: "cdna3",
        bytes: 500 * MIB,
        source: "no ROCm measurement found; Ampere figure assumed",
    },
];

/// The context figure for `gpu` (its `arch`), or for `DEFAULT_ARCH` without one. Unknown or
/// older architectures (kepler, maxwell, pascal) take the Volta figure.
pub fn cuda_context(gpu: Option<&Gpu>) -> ContextFigure {
    let arch = gpu.map_or(DEFAULT_ARCH, |g| g.arch.as_str());
    let find = |a: &str| CONTEXTS.iter().find(|c| c.arch.eq_ignore_ascii_case(a));
    find(arch)
        .or_else(|| find("volta"))
        .copied()
        .unwrap_or(ContextFigure {
            arch: "volta",
            bytes: 450 * MIB,
            source: "fallback",
        })
}

/// Per-architecture context with eager module loading (`CUDA_MODULE_LOADING=EAGER`, and every
/// stack before CUDA 11.7 / PyTorch 1.13): every kernel of PyTorch's CUDA library is loaded into
/// the context when it is created, so the figure is what the first tensor costs. "Before CUDA
/// 11.7, *all* kernels were loaded into the context once the library was loaded, which took
/// more than 1000MB" (ptrblck, paraphrased from pytorch/pytorch#107667). Figures are nvidia-smi after the first tensor,
/// minus that tensor (Hopper's: after a step, measured); only the generations that ran eager
/// stacks in numbers, and Hopper, have one.
const EAGER_CONTEXTS: &[ContextFigure] = &[
    ContextFigure {
        arch: "hopper",
        bytes: HOPPER_EAGER_AFTER_STEP,
        source: "H200, torch 2.11.0+cu130, driver 580.159.04, CUDA_MODULE_LOADING=EAGER: NVML \
                 process used − reserved after the steps (1.81 GiB; 1.73 GiB after the first \
                 matmuls), ../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl",
    },
    ContextFigure {
        arch: "volta",
        bytes: 1343 * MIB,
        source: "V100 16GB, driver 460 / CUDA 11.2, torch 1.x: 1343 MiB after a 1×1 tensor (HF \
                 \"model memory anatomy\" guide); Titan V, torch 1.3: 1008 MiB \
                 (pytorch/pytorch#28394)",
    },
    ContextFigure {
        arch: "turing",
        bytes: 879 * MIB,
        source: "RTX 2080 Ti, torch 1.6 + CUDA 10.1: 1035 MiB with a 156 MiB tensor = 879 MiB \
                 (pytorch/pytorch#49877)",
    },
    ContextFigure {
        arch: "ampere",
        // The two RTX 3090 readings, 1687 and 1488 MiB, averaged.
        bytes: 1588 * MIB,
        source: "RTX 3090, torch 1.8.2+cu111: 1687 MiB after a 1-element tensor \
                 (pytorch/pytorch#55277); torch 1.7.1+cu110: 1644 MiB with a 156 MiB tensor = \
                 1488 MiB (pytorch/pytorch#49877); mean 1588 MiB",
    },
];

/// What eager loading adds where no eager reading exists for the architecture: the same command
/// on one machine under CUDA 11.7 read 666,632,192 B with `CUDA_MODULE_LOADING=DEFAULT` (eager
/// in 11.7) and 287,047,680 B with `LAZY` (pytorch/pytorch#86509), 379,584,512 B apart.
pub const EAGER_EXTRA_DEFAULT: u64 = 666_632_192 - 287_047_680;

/// The context figure for `gpu` under `loading`: the lazy figure, or the eager one (the
/// architecture's eager reading; else the lazy figure plus `EAGER_EXTRA_DEFAULT`).
pub fn cuda_context_with(gpu: Option<&Gpu>, loading: CudaModuleLoading) -> ContextFigure {
    let lazy = cuda_context(gpu);
    if loading == CudaModuleLoading::Lazy {
        return lazy;
    }
    let arch = gpu.map_or(DEFAULT_ARCH, |g| g.arch.as_str());
    EAGER_CONTEXTS
        .iter()
        .find(|c| c.arch.eq_ignore_ascii_case(arch))
        .copied()
        .unwrap_or(ContextFigure {
            bytes: lazy.bytes + EAGER_EXTRA_DEFAULT,
            source: "no eager reading for this architecture: the lazy figure plus the \
                     379,584,512 B eager loading added in pytorch/pytorch#86509",
            ..lazy
        })
}

/// nvidia-smi's per-process figure minus `max_memory_reserved` for a process that has run a
/// step: CUDA context, loaded kernels, cuDNN/cuBLAS handles (not their workspaces, which the
/// allocator holds). NCCL is separate (`nccl_bytes`). Lazy module loading.
pub fn cuda_context_bytes(gpu: Option<&Gpu>) -> u64 {
    cuda_context(gpu).bytes
}

/// `cuda_context_bytes` under the job's module loading.
pub fn cuda_context_bytes_with(gpu: Option<&Gpu>, loading: CudaModuleLoading) -> u64 {
    cuda_context_with(gpu, loading).bytes
}

/// The measurements behind `cuda_context_bytes` for this GPU, in one line.
pub fn cuda_context_source(gpu: Option<&Gpu>) -> &'static str {
    cuda_context(gpu).source
}

// ---------------------------------------------------------------------------------------------
// cuBLAS / cuBLASLt workspaces (through the caching allocator: they count in allocated).
// `aten/src/ATen/cuda/CublasHandlePool.cpp`, pytorch/pytorch.
// ---------------------------------------------------------------------------------------------

/// `CUBLAS_WORKSPACE_CONFIG` default `:4096:2:16:8` = 2 × 4096 KiB + 8 × 16 KiB (before Hopper).
/// pytorch/pytorch#95668 measured exactly this (8,519,680 B allocated after one Linear, A10G).
pub const CUBLAS_WORKSPACE_DEFAULT: u64 = 2 * 4096 * KIB + 8 * 16 * KIB;
/// 32 MiB when `major` is 9, 10, 11 or 12 (Hopper, Blackwell), as cuBLAS recommends. Measured:
/// 33,554,432 B allocated by the first matmul on an H200, torch 2.11
/// (`../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl`, `context.workspace_allocated_after_matmul`).
pub const CUBLAS_WORKSPACE_SM90: u64 = 32 * MIB;
/// `CUBLASLT_WORKSPACE_SIZE` default 1024 KiB on CUDA, while cuBLASLt kept its own workspace.
/// Measured: 1,048,576 B from `getCUDABlasLtWorkspace()` under GPT-2's first `addmm` on an H200,
/// torch 2.11 (`../shared/fixtures/gpu-h200/snapshot-gpt2-snap-fp32-adamw-eager-b4s512.pickle`).
pub const CUBLASLT_WORKSPACE_CUDA: u64 = MIB;
/// ROCm: hipBLAS 32 MiB, 128 MiB on gfx942/gfx950 (MI300 series, `cdna3`+).
pub const HIPBLAS_WORKSPACE_DEFAULT: u64 = 32 * MIB;
pub const HIPBLAS_WORKSPACE_GFX94: u64 = 128 * MIB;
/// ROCm: hipBLASLt 76 MiB ("Use 76 MB for hipBLASLt"), its own handle pool.
pub const HIPBLASLT_WORKSPACE: u64 = 76 * MIB;
/// (handle, stream) pairs in a training step: handles are per thread, and autograd runs the
/// backward on its own device thread, so forward and backward each get a workspace (both H200
/// snapshots: a second 32 MiB from `getCurrentCUDABlasHandle()` under `MmBackward0` on the
/// autograd thread).
pub const TRAIN_BLAS_HANDLES: u64 = 2;

/// The first release whose cuBLASLt workspace persists per (handle, stream)
/// (`CublasHandlePool.cpp` `getCUDABlasLtWorkspace`, pytorch/pytorch#156495, merged 2025-06-27,
/// after the 2.8 branch cut): before it each cuBLASLt call (`CUDABlas.cpp` `gemm_and_bias`)
/// allocated its workspace and freed it on return, so none stays allocated.
pub const PERSISTENT_LT_WORKSPACE_FROM: TorchVersion = TorchVersion::new(2, 9);
/// The first release whose CUDA build reuses the cuBLAS workspace for cuBLASLt
/// (`TORCH_CUBLASLT_UNIFIED_WORKSPACE`, on by default for open-source builds by
/// pytorch/pytorch#168175; the 2.11 build still allocated a separate one — measured above — until
/// pytorch/pytorch#175879 "Fix unified workspace env var handling" and #173002 (cuBLASLt takes
/// cuBLAS's size), merged 2026-03-02/03, after the 2.11 branch cut): from then on cuBLASLt's
/// workspace is the same allocation, keyed by the same (handle, stream).
pub const UNIFIED_LT_WORKSPACE_FROM: TorchVersion = TorchVersion::new(2, 12);

fn arch_of(gpu: Option<&Gpu>) -> String {
    gpu.map_or(DEFAULT_ARCH, |g| g.arch.as_str())
        .to_ascii_lowercase()
}

fn is_rocm(arch: &str) -> bool {
    arch.starts_with("cdna") || arch.starts_with("rdna")
}

/// BLAS workspace bytes for one (handle, stream) pair on `gpu` (default device without one)
/// under today's PyTorch: cuBLAS's (`CublasHandlePool.cpp` `getChosenWorkspaceSize`), which
/// cuBLASLt shares on CUDA; on ROCm hipBLAS's plus hipBLASLt's own pool. Allocated once per
/// pair and kept, so they count in `max_memory_allocated`.
pub fn cublas_workspace_bytes(gpu: Option<&Gpu>) -> u64 {
    let arch = arch_of(gpu);
    match arch.as_str() {
        "hopper" | "blackwell" => CUBLAS_WORKSPACE_SM90,
        a if is_rocm(a) && !matches!(a, "cdna" | "cdna1" | "cdna2") => {
            HIPBLAS_WORKSPACE_GFX94 + HIPBLASLT_WORKSPACE
        }
        a if is_rocm(a) => HIPBLAS_WORKSPACE_DEFAULT + HIPBLASLT_WORKSPACE,
        _ => CUBLAS_WORKSPACE_DEFAULT,
    }
}

/// cuBLASLt's own workspace on CUDA for one (handle, stream) pair that runs a cuBLASLt GEMM,
/// under PyTorch `torch` (None: today's): 1 MiB from 2.9 until 2.12 unified it with cuBLAS's,
/// none before 2.9 (freed after each call) or after. ROCm's hipBLASLt pool is in
/// `cublas_workspace_bytes`.
pub fn cublaslt_workspace_bytes(gpu: Option<&Gpu>, torch: Option<TorchVersion>) -> u64 {
    let separate =
        torch.is_some_and(|t| t >= PERSISTENT_LT_WORKSPACE_FROM && t < UNIFIED_LT_WORKSPACE_FROM);
    if separate && !is_rocm(&arch_of(gpu)) {
        CUBLASLT_WORKSPACE_CUDA
    } else {
        0
    }
}

/// All BLAS workspaces of a step under today's PyTorch: one pair for inference,
/// `TRAIN_BLAS_HANDLES` for training.
pub fn blas_workspaces_bytes(gpu: Option<&Gpu>, training: bool) -> u64 {
    blas_workspaces_bytes_for(gpu, training, None, false)
}

/// All BLAS workspaces of a step under PyTorch `torch` (None: today's): cuBLAS's per
/// (handle, stream) pair — the forward thread's, and in training autograd's backward thread's —
/// plus cuBLASLt's own where that release keeps one and the forward runs a cuBLASLt GEMM
/// (`lt_gemm`: a Linear with a bias, `addmm` with a 1-D bias, `Blas.cpp`
/// `addmm_out_cuda_impl`'s `useLtInterface`; its backward runs `mm`, on cuBLAS — as both H200
/// snapshots show).
pub fn blas_workspaces_bytes_for(
    gpu: Option<&Gpu>,
    training: bool,
    torch: Option<TorchVersion>,
    lt_gemm: bool,
) -> u64 {
    let handles = if training { TRAIN_BLAS_HANDLES } else { 1 };
    let lt = if lt_gemm {
        cublaslt_workspace_bytes(gpu, torch)
    } else {
        0
    };
    cublas_workspace_bytes(gpu) * handles + lt
}

// ---------------------------------------------------------------------------------------------
// NCCL (outside the allocator: in device_total, not in reserved). NVIDIA/nccl `src/init.cc`.
// ---------------------------------------------------------------------------------------------

/// Per connection buffers of the three protocols: LL 8 × 512 × 8 × 16 B = 512 KiB, LL128
/// 120 × 640 × 8 × 8 B = 4,915,200 B, Simple `DEFAULT_BUFFSIZE` 4 MiB (`NCCL_BUFFSIZE`).
pub const NCCL_BYTES_PER_CONNECTION: u64 = 512 * KIB + 4_915_200 + 4 * MIB;
/// Channels assumed (NVLink/NVSwitch nodes run 16–32, PCIe boxes 2–4).
pub const NCCL_CHANNELS: u64 = 16;
/// Connections per channel holding buffers on a rank (ring send and receive).
pub const NCCL_CONNECTIONS_PER_CHANNEL: u64 = 2;

/// NCCL buffers on one rank of a job on `gpus` GPUs: 16 × 2 × 9,633,792 B = 294 MiB, none alone.
pub fn nccl_bytes(gpus: u64) -> u64 {
    if gpus <= 1 {
        0
    } else {
        NCCL_CHANNELS * NCCL_CONNECTIONS_PER_CHANNEL * NCCL_BYTES_PER_CONNECTION
    }
}

/// What nvidia-smi shows for the process: reserved + context + NCCL.
pub fn device_total_bytes(peak_reserved: u64, gpu: Option<&Gpu>, gpus: u64) -> u64 {
    peak_reserved
        .saturating_add(cuda_context_bytes(gpu))
        .saturating_add(nccl_bytes(gpus))
}

// ---------------------------------------------------------------------------------------------
// Reserved memory at the peak.
// ---------------------------------------------------------------------------------------------

/// The parts of a `max_memory_reserved` prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservedEstimate {
    /// 2 MiB segments holding the ≤ 1 MiB blocks.
    pub small_pool: u64,
    /// 20 MiB segments for 1–10 MiB blocks plus one 2 MiB-rounded segment per larger block.
    pub large_pool: u64,
    /// `peak_allocated` not covered by the listed blocks, as one large segment.
    pub unlisted: u64,
    /// The cached block left free by the largest allocation released before the peak.
    pub freed_hole: u64,
}

impl ReservedEstimate {
    pub fn total(&self) -> u64 {
        self.small_pool
            .saturating_add(self.large_pool)
            .saturating_add(self.unlisted)
            .saturating_add(self.freed_hole)
    }
}

/// Predicted `max_memory_reserved` from the peak allocated bytes and request sizes of the step
/// (`allocations`, bytes as requested): those live at the peak, and any freed earlier whose
/// size is not requested again (their cached blocks stay reserved, so listing them is right).
/// Bytes of `peak_allocated` the list does not cover are one 2 MiB-rounded segment.
///
/// Mechanism: blocks are packed first-fit-decreasing into 2 MiB small-pool segments and 20 MiB
/// segments; blocks ≥ 10 MiB get their own 2 MiB-rounded segment. It assumes one stream and a
/// steady step (freed blocks of recurring sizes are reused), and does not capture: blocks held
/// by other streams (FSDP/DDP communication streams, `record_stream`: measured reserved/allocated
/// up to 1.5 for FSDP), sizes that change between steps (dynamic padding), many distinct
/// transient sizes (QLoRA dequantization), CUDA-graph private pools, `expandable_segments`
/// (which brings reserved close to allocated), `max_split_size_mb`, and the allocator freeing
/// its cache and retrying before an OOM.
pub fn reserved_estimate(peak_allocated: u64, allocations: &[u64]) -> u64 {
    reserved_breakdown(peak_allocated, allocations, 0).total()
}

/// `reserved_estimate` with the live set alone in `live_at_peak` and, apart, the largest block
/// freed before the peak whose size does not recur (its cached block stays reserved).
pub fn reserved_estimate_with_hole(
    peak_allocated: u64,
    live_at_peak: &[u64],
    largest_freed_before_peak: u64,
) -> u64 {
    reserved_breakdown(peak_allocated, live_at_peak, largest_freed_before_peak).total()
}

/// `reserved_estimate`, part by part.
pub fn reserved_breakdown(
    peak_allocated: u64,
    live_at_peak: &[u64],
    largest_freed_before_peak: u64,
) -> ReservedEstimate {
    let mut small = Vec::new();
    let mut medium = Vec::new();
    let mut large_pool = 0u64;
    let mut counted = 0u64;
    for &bytes in live_at_peak {
        let rounded = round_size(bytes);
        if rounded == 0 {
            continue;
        }
        counted = counted.saturating_add(block_size(bytes));
        if rounded <= SMALL_SIZE {
            small.push(rounded);
        } else if rounded < MIN_LARGE_ALLOC {
            medium.push(rounded);
        } else {
            large_pool = large_pool.saturating_add(segment_size(rounded));
        }
    }
    let small_pool = pack(&mut small, SMALL_BUFFER);
    large_pool = large_pool.saturating_add(pack(&mut medium, LARGE_BUFFER));
    let missing = peak_allocated.saturating_sub(counted);
    let unlisted = if missing == 0 {
        0
    } else {
        round_up(missing, ROUND_LARGE)
    };
    ReservedEstimate {
        small_pool,
        large_pool,
        unlisted,
        freed_hole: block_size(largest_freed_before_peak),
    }
}

/// Bytes of `segment`-sized segments that first-fit-decreasing needs for `items` (each ≤
/// `segment`); past `MAX_PACKED_ITEMS` items, the byte sum rounded up to whole segments.
fn pack(items: &mut [u64], segment: u64) -> u64 {
    if items.is_empty() {
        return 0;
    }
    if items.len() > MAX_PACKED_ITEMS {
        let sum = items.iter().fold(0u64, |acc, &b| acc.saturating_add(b));
        return round_up(sum, segment);
    }
    items.sort_unstable_by(|a, b| b.cmp(a));
    let mut free: Vec<u64> = Vec::new();
    for &item in items.iter() {
        match free.iter_mut().find(|f| **f >= item) {
            Some(f) => *f -= item,
            None => free.push(segment - item.min(segment)),
        }
    }
    segment.saturating_mul(free.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::find;

    #[test]
    fn round_size_matches_the_512_byte_rule() {
        assert_eq!(round_size(0), 0);
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(512), 512);
        assert_eq!(round_size(513), 1024);
        // A 4096-float fp32 tensor: 16384 B, already a multiple.
        assert_eq!(round_size(16384), 16384);
        assert_eq!(round_size(u64::MAX), u64::MAX); // saturates, no panic
    }

    #[test]
    fn segment_sizes_follow_get_allocation_size() {
        // 600 KiB rounds to 614,400 B (1200 × 512): small pool, 2 MiB segment.
        assert_eq!(round_size(600 * 1024), 614_400);
        assert_eq!(segment_size(614_400), 2 * MIB);
        assert_eq!(segment_size(MIB), 2 * MIB); // exactly 1 MiB is still "small"
        assert_eq!(segment_size(MIB + 512), 20 * MIB);
        assert_eq!(segment_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(segment_size(10 * MIB), 10 * MIB);
        assert_eq!(segment_size(11 * MIB), 12 * MIB);
        assert_eq!(segment_size(12 * MIB), 12 * MIB);
    }

    #[test]
    fn block_size_keeps_unsplit_tails() {
        // 11 MiB: 12 MiB segment, 1 MiB left is not > kSmallSize, so the block is 12 MiB.
        assert_eq!(block_size(11 * MIB), 12 * MIB);
        // 10.5 MiB: 1.5 MiB would remain, so it is split off.
        assert_eq!(block_size(10 * MIB + 512 * 1024), 10 * MIB + 512 * 1024);
        // 5 MiB from a 20 MiB segment is split.
        assert_eq!(block_size(5 * MIB), 5 * MIB);
        assert_eq!(block_size(1), 512);
    }

    #[test]
    fn rounding_is_monotone_and_never_below_input() {
        let mut prev = (0, 0);
        for k in 0..4000u64 {
            let bytes = k * k * 977 + k; // spans 0 .. ~15.6 GB
            let r = round_size(bytes);
            let b = block_size(bytes);
            let s = segment_size(r);
            assert!(r >= bytes && b >= r && (r == 0 || s >= r), "{bytes}");
            // segment_size is not monotone: 1–10 MiB take 20 MiB, 10 MiB takes 10 MiB.
            assert!(r >= prev.0 && b >= prev.1, "{bytes}");
            prev = (r, b);
        }
    }

    #[test]
    fn cublas_workspace_per_arch() {
        // 2 × 4 MiB + 8 × 16 KiB = 8,519,680 (pytorch/pytorch#95668); today's cuBLASLt
        // shares it.
        assert_eq!(CUBLAS_WORKSPACE_DEFAULT, 8_519_680);
        let a100 = find("a100-80gb").unwrap();
        assert_eq!(cublas_workspace_bytes(Some(a100)), 8_519_680);
        assert_eq!(cublas_workspace_bytes(None), 8_519_680);
        let h100 = find("h100-80gb").unwrap();
        assert_eq!(cublas_workspace_bytes(Some(h100)), 33_554_432);
        let b200 = find("b200-192gb").unwrap();
        assert_eq!(cublas_workspace_bytes(Some(b200)), 33_554_432);
        // ROCm keeps hipBLASLt's own pool: 128 MiB + 76 MiB on MI300, 32 + 76 on MI250.
        let mi300 = find("mi300x-192gb").unwrap();
        assert_eq!(
            cublas_workspace_bytes(Some(mi300)),
            134_217_728 + 79_691_776
        );
        let mi250 = find("mi250x-128gb").unwrap();
        assert_eq!(cublas_workspace_bytes(Some(mi250)), 33_554_432 + 79_691_776);
        assert_eq!(blas_workspaces_bytes(Some(h100), true), 2 * 33_554_432);
        assert_eq!(blas_workspaces_bytes(Some(h100), false), 33_554_432);
    }

    /// What the H200 (torch 2.11) allocated: 32 MiB on the forward thread's handle, 32 MiB on
    /// autograd's, and 1 MiB of cuBLASLt workspace when the forward ran an `addmm` with a bias
    /// (GPT-2's snapshot; SmolLM2's, without biases, has none).
    #[test]
    fn cublaslt_workspace_by_release() {
        let h200 = find("h200-141gb").unwrap();
        let v = |s: &str| Some(TorchVersion::parse("torch_version", s).unwrap());
        let ws = |t, lt| blas_workspaces_bytes_for(Some(h200), true, t, lt);
        assert_eq!(ws(v("2.11"), true), 2 * 33_554_432 + 1_048_576);
        assert_eq!(ws(v("2.11"), false), 2 * 33_554_432);
        assert_eq!(ws(v("2.9"), true), 2 * 33_554_432 + 1_048_576);
        // Before 2.9 each cuBLASLt call freed its workspace; from 2.12 it is cuBLAS's.
        assert_eq!(ws(v("2.8"), true), 2 * 33_554_432);
        assert_eq!(ws(v("2.12"), true), 2 * 33_554_432);
        assert_eq!(ws(None, true), 2 * 33_554_432);
        // Inference: the forward thread alone.
        assert_eq!(
            blas_workspaces_bytes_for(Some(h200), false, v("2.11"), true),
            33_554_432 + 1_048_576
        );
        let mi300 = find("mi300x-192gb").unwrap();
        assert_eq!(cublaslt_workspace_bytes(Some(mi300), v("2.11")), 0);
    }

    #[test]
    fn context_is_a_few_hundred_mib_for_every_catalog_gpu() {
        for g in crate::gpu::catalog() {
            let c = cuda_context(Some(g));
            assert!(c.bytes >= 250 * MIB && c.bytes <= 1024 * MIB, "{}", g.id);
            assert!(!c.source.is_empty());
            assert!(c.bytes < g.memory_bytes / 10, "{}", g.id);
        }
        assert_eq!(cuda_context(None).arch, "ampere");
        assert_eq!(cuda_context_bytes(None), 500 * MIB);
        let h100 = find("h100-80gb").unwrap();
        assert!(cuda_context_bytes(Some(h100)) > cuda_context_bytes(None));
        assert!(cuda_context_source(Some(h100)).contains("H200"));
    }

    #[test]
    fn eager_loading_grows_the_context_past_a_gib_where_measured() {
        let v100 = find("v100-16gb").unwrap();
        // HF guide: 1343 MiB on a V100 with every kernel loaded at init.
        assert_eq!(
            cuda_context_bytes_with(Some(v100), CudaModuleLoading::Eager),
            1343 * MIB
        );
        assert_eq!(
            cuda_context_bytes_with(Some(v100), CudaModuleLoading::Lazy),
            cuda_context_bytes(Some(v100))
        );
        // pytorch/pytorch#86509: 666,632,192 − 287,047,680 = 379,584,512 B.
        assert_eq!(EAGER_EXTRA_DEFAULT, 379_584_512);
        // Hopper's eager figure is the H200's eager run: 1,944,059,904 B after its steps.
        let h100 = find("h100-80gb").unwrap();
        assert_eq!(
            cuda_context_bytes_with(Some(h100), CudaModuleLoading::Eager),
            1_944_059_904
        );
        // Ada has no eager reading: its lazy 500 MiB plus pytorch/pytorch#86509's difference.
        let l40s = find("l40s-48gb").unwrap();
        assert_eq!(
            cuda_context_bytes_with(Some(l40s), CudaModuleLoading::Eager),
            500 * MIB + 379_584_512
        );
        // (1687 + 1488) / 2 = 1587.5 → 1588 MiB for Ampere, also the default device.
        assert_eq!(
            cuda_context_bytes_with(None, CudaModuleLoading::Eager),
            1588 * MIB
        );
        for g in crate::gpu::catalog() {
            let lazy = cuda_context_bytes_with(Some(g), CudaModuleLoading::Lazy);
            let eager = cuda_context_with(Some(g), CudaModuleLoading::Eager);
            assert!(eager.bytes > lazy, "{}", g.id);
            assert!(!eager.source.is_empty());
        }
    }

    #[test]
    fn nccl_only_with_several_gpus() {
        assert_eq!(nccl_bytes(0), 0);
        assert_eq!(nccl_bytes(1), 0);
        // 512 KiB + 4,915,200 + 4 MiB = 9,633,792 per connection; 16 channels × 2.
        assert_eq!(NCCL_BYTES_PER_CONNECTION, 9_633_792);
        assert_eq!(nccl_bytes(8), 32 * 9_633_792);
        let a100 = find("a100-80gb").unwrap();
        assert_eq!(
            device_total_bytes(GIB_10, Some(a100), 8),
            GIB_10 + 500 * MIB + 32 * 9_633_792
        );
    }

    const GIB_10: u64 = 10 << 30;

    #[test]
    fn reserved_packs_small_and_medium_blocks() {
        // Four 600 KiB blocks of 614,400 B: 2,097,152 / 614,400 = 3.4, so three share a 2 MiB
        // segment and the fourth opens a second one.
        let live = [600 * 1024; 4];
        let est = reserved_breakdown(4 * 614_400, &live, 0);
        assert_eq!(est.small_pool, 4 * MIB);
        assert_eq!(est.large_pool, 0);
        assert_eq!(est.unlisted, 0);
        // Three 9 MiB blocks: two per 20 MiB segment.
        let est = reserved_breakdown(27 * MIB, &[9 * MIB; 3], 0);
        assert_eq!(est.large_pool, 40 * MIB);
        // One 11 MiB block counts 12 MiB allocated and reserves its 12 MiB segment.
        assert_eq!(reserved_estimate(12 * MIB, &[11 * MIB]), 12 * MIB);
    }

    #[test]
    fn reserved_adds_unlisted_bytes_and_the_freed_hole() {
        // 1 GiB allocated, only a 100 MiB block listed: 924 MiB unlisted, already 2 MiB-aligned.
        let est = reserved_breakdown(1 << 30, &[100 * MIB], 0);
        assert_eq!(est.large_pool, 100 * MIB);
        assert_eq!(est.unlisted, 924 * MIB);
        assert_eq!(est.total(), 1 << 30);
        // A freed 1 GiB fp32 logits block (2 × 4096 × 32000 × 4 B = 1,048,576,000 B) stays
        // cached: its 1000 MiB block adds to the reserve.
        let with_hole = reserved_estimate_with_hole(1 << 30, &[100 * MIB], 2 * 4096 * 32000 * 4);
        assert_eq!(with_hole, (1 << 30) + 1000 * MIB);
    }

    #[test]
    fn reserved_never_below_allocated() {
        let live: Vec<u64> = (1..3000u64).map(|k| k * 4099).collect();
        let counted: u64 = live.iter().map(|&b| block_size(b)).sum();
        for extra in [0, 1, MIB, 1 << 30] {
            let r = reserved_estimate(counted + extra, &live);
            assert!(r >= counted + extra, "{extra}");
        }
        // Many items take the byte-sum path and stay sane.
        let many = vec![1000u64; 10_000];
        let r = reserved_estimate(0, &many);
        // 10,000 × 1024 B = 10,240,000 B = 4.88 segments of 2 MiB → 5 segments.
        assert_eq!(r, 10 * MIB);
        assert_eq!(reserved_estimate(0, &[]), 0);
        assert_eq!(
            reserved_estimate_with_hole(u64::MAX, &[u64::MAX], u64::MAX),
            u64::MAX
        );
    }
}
