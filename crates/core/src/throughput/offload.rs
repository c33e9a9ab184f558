//! Offload to the host: PCIe traffic and the CPU optimizer (ZeRO-Offload, Ren et al. 2021;
//! ZeRO-Infinity's parameter offload, Rajbhandari et al. 2021).
//!
//! ZeRO-Offload (§4.1, Fig. 5) moves each step's 16-bit gradients down to the host during the
//! backward and the updated 16-bit parameters back up after the CPU's Adam step; the step runs
//! on the CPU while the GPU waits (DeepSpeed's default, without the one-step delayed update).
//! Parameter offload (ZeRO-3 `offload_param`) also brings every parameter shard up for the
//! forward and again for the backward of every micro-batch, prefetched during compute.
//!
//! The CPU's Adam: DeepSpeed's CPU-Adam is 5–7× PyTorch's CPU Adam (DeepSpeed's ZeRO-Offload
//! tutorial, `docs/_tutorials/zero-offload.md`); its author measured it at 8.2 s per step for
//! an 11.6 B-parameter GPT-2 against torch's 56 s (DeepSpeed PR #735, 2021-02-08), i.e.
//! 8.2 / 11.6e9 ≈ 0.71 s per 10⁹ parameters: [`CPU_ADAM_S_PER_PARAM`], per GPU process. The
//! figure depends on the host's cores and memory bandwidth and on how many GPU processes share
//! them (±2× and worse: DeepSpeed issue #1635 reports 22.9 s for 1.35 B on a 10-core Xeon
//! Silver, THUDM/slime#1139 9.6 s for a 3.3 B-parameter shard per rank with eight ranks per
//! host; `--bind_cores_to_rank` alone moves it 1.3×, DeepSpeed PR #7474).

use super::compute::MicroBatch;
use super::hardware::Hardware;
use super::Setup;
use crate::job::Offload;

/// Seconds DeepSpeed's CPU-Adam takes per parameter: 8.2 s / 11.6e9 parameters (DeepSpeed
/// PR #735, measured by CPU-Adam's author) = 0.707e-9.
pub const CPU_ADAM_S_PER_PARAM: f64 = 8.2 / 11.6e9;

/// Offload seconds of one step: (exposed per micro-batch, per step), and the bytes it moves
/// over the host link per step.
pub fn exposed(s: &Setup, hw: &Hardware, mb: &MicroBatch, params_gpu: f64) -> (f64, f64, f64) {
    if s.offload == Offload::None {
        return (0.0, 0.0, 0.0);
    }
    let shard = params_gpu / s.dp.max(1) as f64;
    let trainable = if s.peft {
        s.trainable_params / (s.tp * s.pp * s.dp.max(1)) as f64
    } else {
        shard
    };
    let grads_down = trainable * s.grad_width as f64;
    let params_up = trainable * s.width as f64;
    let backward = mb.total() * 2.0 / 3.0;
    // Gradients stream down during every micro-batch's backward.
    let mut per_mb = (hw.host_s(grads_down) - backward).max(0.0);
    let mut moved = grads_down * s.microbatches as f64 + params_up;
    if s.offload == Offload::OptimizerParams {
        // Every shard up twice per micro-batch, prefetched during the compute.
        let up = 2.0 * shard * s.width as f64;
        per_mb += (hw.host_s(up) - mb.total()).max(0.0);
        moved += up * s.microbatches as f64;
    }
    let per_step = hw.host_s(params_up) + trainable * CPU_ADAM_S_PER_PARAM;
    (per_mb, per_step, moved)
}
