//! What a GPU delivers: its datasheet peaks (`data/gpus.json` `perf`) times the fraction of
//! them that published measurements reach, per op class and GPU generation.
//!
//! The fractions are kernel measurements, not end-to-end training figures (those are what the
//! model is validated against, `validation/throughput.json`):
//!
//! - **matmuls**: the Maximum Achievable Matmul FLOPS (MAMF) table of Stas Bekman's
//!   *ml-engineering* (`compute/accelerator/README.md`, "Maximum Achievable Matmul FLOPS
//!   comparison table"; BF16, best shape of a brute-force search): A100 SXM 267.9 of 312
//!   (85.9 %), H100 SXM 792.1 of 989 (80.1 %), MI250X 147.0 of 191.5 per GCD (76.7 %), MI300X
//!   781.9 of 1300 (60.1 %). Generations the table does not measure (Volta, Turing, Ada,
//!   Blackwell) take the lowest NVIDIA figure, H100's 80.1 %: an assumption, flagged `measured:
//!   false`. Sureness: the best shape's figure; transformer shapes run a few percent below it.
//! - **attention** (FlashAttention / SDPA forward + backward with a causal mask, head dim 128):
//!   FlashAttention-2 (Dao 2023, §4.1, Fig. 4–6) reaches about 55 % of the A100's peak at 2k–16k
//!   tokens; on H100 the same kernel reaches about 35 % (FlashAttention-3, Shah et al. 2024,
//!   §1: "FlashAttention-2 achieves only 35% utilization on the H100"), which is what
//!   PyTorch's SDPA and `flash-attn` 2 run. Other generations: A100's fraction (pre-Hopper
//!   NVIDIA), H100's (Blackwell, AMD). Sureness ±15 %.
//! - **memory-bound kernels** (norms, activations, residual adds, rotary, the loss, the
//!   optimizer step): 85 % of the datasheet bandwidth. A streaming copy reaches about 90 % on
//!   HBM parts (BabelStream and nvbandwidth copy figures); a step's short kernels do not.
//!   Sureness ±10 %.
//! - **collectives**: NCCL's bus bandwidth reaches about 80 % of a link's one-way rate
//!   (nccl-tests `all_reduce_perf` on DGX A100: ≈230 GB/s of 300; on DGX H100: ≈360 GB/s of
//!   450 without NVLS; InfiniBand at ≈80–90 % of line rate). Sureness ±15 %.
//! - **host link**: pinned host↔device copies reach about 80 % of PCIe's one-way rate
//!   (≈25 GB/s of Gen4 x16's 32, ≈50 of Gen5's 64, `bandwidthTest` / nvbandwidth).

use crate::gpu::{Gpu, Perf};
use crate::job::Precision;

/// Fraction of the bandwidth memory-bound kernels reach.
pub const MEMORY_FRACTION: f64 = 0.85;
/// Fraction of the bandwidth PyTorch's foreach and fused optimizer kernels
/// (`multi_tensor_apply`) reach, measured on the H200 run of Llama-3.1-8B in pure bf16
/// (`../shared/fixtures/gpu-h200/`, `llama8b-bf16-adamw-sdpa-full-b1s2048`): its foreach AdamW
/// step moves 8.03e9 parameters × 21 accesses × 2 bytes = 337 GB (`throughput::pass_bytes`) in
/// 109.4 ms (the optimizer phases' median less `zero_grad`), 3.08 TB/s of 4.8: 0.64. The step's
/// host loop over 291 tensors (8 ms) is hidden under it.
pub const FOREACH_MEMORY_FRACTION: f64 = 0.64;
/// Fraction of the fp32 (non-tensor-core) peak a plain fp32 GEMM reaches (PyTorch's default
/// `allow_tf32 = False` runs cuBLAS's SGEMM on the CUDA cores), measured on the H200's two fp32
/// runs with eager attention and no allocator-history recording (`qwen0.5b-fp32-adamw-eager-
/// b4s1024`, `gpt2-fp32-adamw-eager-b8s1024`): their forwards and backwards take 554.1 ms
/// together (medians 120.1 + 230.3 + 75.1 + 128.6); with their matmuls at this fraction of 67
/// TFLOP/s and everything else as modelled the model gives the same sum at 0.65 (546.6 ms at
/// 0.664). The Llama-3.2-1B fp32 run (SDPA's math fallback under grouped k/v in torch 2.11)
/// then reads 12 % slow, its backward the most.
pub const FP32_SIMT_FRACTION: f64 = 0.65;
/// Fraction of a link's one-way rate NCCL's bus bandwidth reaches.
pub const LINK_FRACTION: f64 = 0.80;
/// Fraction of the host link's one-way rate pinned copies reach.
pub const HOST_FRACTION: f64 = 0.80;
/// The network per GPU when the catalog does not say: 200 Gbit/s HDR InfiniBand.
pub const DEFAULT_NETWORK_GBIT_S: f64 = 200.0;
/// GPUs per node when the catalog does not say (DGX/HGX).
pub const DEFAULT_NODE_GPUS: u64 = 8;

/// Achievable fractions of one GPU generation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fractions {
    pub matmul: f64,
    pub attention: f64,
    /// Whether the matmul fraction was measured on this generation (else assumed).
    pub measured: bool,
}

/// The fractions of a generation (`Gpu::arch`), from the measurements in the module docs.
pub fn fractions(arch: &str) -> Fractions {
    let (matmul, attention, measured) = match arch {
        "ampere" => (0.859, 0.55, true),
        "hopper" => (0.801, 0.35, true),
        "cdna2" => (0.767, 0.35, true),
        "cdna3" => (0.601, 0.35, true),
        "volta" | "turing" | "ada" => (0.801, 0.55, false),
        _ => (0.801, 0.35, false),
    };
    Fractions {
        matmul,
        attention,
        measured,
    }
}

/// A GPU as the step-time model sees it, in FLOP/s and bytes/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hardware {
    /// Datasheet dense peak for the job's compute dtype, FLOP/s (MFU's denominator).
    pub peak: f64,
    pub fractions: Fractions,
    /// Memory bandwidth, bytes/s.
    pub memory: f64,
    /// One-way GPU-to-GPU bandwidth within a node, bytes/s (the host link's without NVLink).
    pub intra: f64,
    /// One-way network bandwidth per GPU between nodes, bytes/s.
    pub inter: f64,
    /// One-way host link, bytes/s.
    pub host: f64,
    pub node_gpus: u64,
}

/// The datasheet peak, TFLOP/s, a job's precision computes at: bf16/fp16 (mixed or not) on
/// the tensor cores; fp32 on the plain FP32 units (PyTorch leaves TF32 matmuls off by default,
/// `torch.backends.cuda.matmul.allow_tf32 = False` since 1.12).
pub fn peak_tflops(perf: &Perf, precision: Precision) -> Option<f64> {
    match precision {
        Precision::Bf16 | Precision::Bf16Mixed => perf.tflops.bf16,
        Precision::Fp16 | Precision::Fp16Mixed => perf.tflops.fp16,
        Precision::Fp32 => perf.tflops.fp32,
    }
}

impl Hardware {
    /// The GPU's figures for a precision; `Err` says what the catalog lacks.
    pub fn of(gpu: &Gpu, precision: Precision) -> Result<Hardware, String> {
        let perf = gpu
            .perf
            .as_ref()
            .ok_or_else(|| format!("the catalog has no speeds for {}", gpu.id))?;
        let tflops = peak_tflops(perf, precision).ok_or_else(|| {
            format!(
                "{} has no {} peak in its datasheet",
                gpu.id,
                precision.as_str()
            )
        })?;
        let one_way = |gbps: f64| gbps * 1e9 / 2.0;
        let mut fractions = fractions(&gpu.arch);
        if precision == Precision::Fp32 {
            fractions.matmul = FP32_SIMT_FRACTION;
        }
        Ok(Hardware {
            peak: tflops * 1e12,
            fractions,
            memory: perf.memory_gbps * 1e9,
            intra: one_way(perf.nvlink_gbps.unwrap_or(perf.host_gbps)),
            inter: perf.network_gbit_s.unwrap_or(DEFAULT_NETWORK_GBIT_S) * 1e9 / 8.0,
            host: one_way(perf.host_gbps),
            node_gpus: perf.node_gpus.unwrap_or(DEFAULT_NODE_GPUS),
        })
    }

    /// Seconds of matmul work.
    pub fn matmul_s(&self, flops: f64) -> f64 {
        flops / (self.peak * self.fractions.matmul)
    }

    /// Seconds of fused attention work.
    pub fn attention_s(&self, flops: f64) -> f64 {
        flops / (self.peak * self.fractions.attention)
    }

    /// Seconds of memory-bound work moving `bytes`.
    pub fn memory_s(&self, bytes: f64) -> f64 {
        bytes / (self.memory * MEMORY_FRACTION)
    }

    /// Seconds of a foreach / fused optimizer pass moving `bytes`.
    pub fn foreach_s(&self, bytes: f64) -> f64 {
        bytes / (self.memory * FOREACH_MEMORY_FRACTION)
    }

    /// NCCL bus bandwidth of a group whose members sit `span` ranks apart at most: within a
    /// node when the span fits in one, else the network.
    pub fn bus(&self, span: u64) -> f64 {
        let link = if span <= self.node_gpus {
            self.intra
        } else {
            self.inter
        };
        link * LINK_FRACTION
    }

    /// Seconds to move `bytes` one way over the host link.
    pub fn host_s(&self, bytes: f64) -> f64 {
        bytes / (self.host * HOST_FRACTION)
    }
}
