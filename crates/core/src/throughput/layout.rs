//! The step-time model over `plan`'s layouts: each screened layout's modelled step, and the
//! winner explained in one line. Closed-form per layout (`super::train_step`), so the screen
//! stays as fast as the memory screen it runs beside.

use crate::estimate::input::ModelInput;
use crate::gpu::Gpu;
use crate::job::{Checkpointing, Framework, Offload, ResolvedJob};
pub use crate::plan::layouts::LayoutTime;
use crate::plan::layouts::{Layout, Scored};

impl LayoutTime {
    fn of(t: &crate::throughput::StepTime) -> Self {
        LayoutTime {
            step_time_s: t.step_s,
            tokens_per_s_per_gpu: t.tokens_per_s_per_gpu,
            mfu: t.mfu,
            parts: t.parts,
            dominant: t.parts.dominant(),
            host_traffic: t.host_bytes as u64,
        }
    }
}

/// The winner in one line: its rate, what dominates its step, and what offload or the
/// pipeline costs it.
pub fn explain(s: &Scored) -> Option<String> {
    let t = s.time?;
    let l = &s.layout;
    let mut line = format!(
        "{:.0} tokens/s per GPU, {:.2} s per step ({} {:.0} %)",
        t.tokens_per_s_per_gpu,
        t.step_time_s,
        t.dominant,
        100.0 * t.parts.seconds(t.dominant) / t.step_time_s
    );
    if l.offload != "none" {
        line.push_str(&format!(
            "; {} offload moves {:.0} GB over PCIe per step",
            if l.offload == "optimizer+params" {
                "param"
            } else {
                "optimizer"
            },
            t.host_traffic as f64 / 1e9
        ));
    }
    if t.parts.bubble_s > 0.0 {
        line.push_str(&format!(
            "; the pipeline bubble costs {:.2} s",
            t.parts.bubble_s
        ));
    }
    if t.parts.communication_s > 0.0 && t.dominant != "communication" {
        line.push_str(&format!(
            "; {:.2} s of communication not hidden",
            t.parts.communication_s
        ));
    }
    Some(line)
}

/// What the step-time model needs of a plan, computed once: the GPU's rates, the model's
/// shape, the job's trainable parameters.
pub struct Timing {
    hw: crate::throughput::Hardware,
    shape: crate::throughput::ModelShape,
    trainable: crate::throughput::Trainable,
    /// The attention kernel the job's steps run (SDPA's backend picked once).
    attention: crate::job::AttentionKernel,
}

impl Timing {
    /// `None` where the GPU's speeds are unknown.
    pub fn new(model: &ModelInput, base: &ResolvedJob, gpu: &Gpu) -> Option<Self> {
        let hw = crate::throughput::Hardware::of(gpu, base.precision).ok()?;
        let shape = crate::throughput::ModelShape::of(
            model.spec.as_ref(),
            model.inventory.as_ref(),
            model.params_total,
        );
        Some(Timing {
            hw,
            attention: crate::throughput::attention_kernel(base, &shape),
            shape,
            trainable: crate::throughput::trainable(model, base),
        })
    }

    pub fn of(&self, l: &Layout, base: &ResolvedJob) -> LayoutTime {
        let mut setup = setup_of(l, base, &self.trainable);
        setup.attention = self.attention;
        LayoutTime::of(&crate::throughput::train_step(
            &self.shape,
            &setup,
            &self.hw,
        ))
    }
}

/// A layout as the step-time model reads it.
fn setup_of(
    l: &Layout,
    base: &ResolvedJob,
    trainable: &crate::throughput::Trainable,
) -> crate::throughput::Setup {
    use crate::throughput::{grad_width, step_bytes, OptimizerPass, Setup};
    let framework = match l.framework {
        "megatron" => Framework::Megatron,
        "deepspeed" => Framework::Deepspeed,
        _ => Framework::Fsdp,
    };
    Setup {
        framework,
        dp: l.dp,
        tp: l.tp,
        pp: l.pp,
        cp: l.cp,
        ep: l.ep,
        sp: l.sp,
        zero: l.zero,
        offload: match l.offload {
            "optimizer" => Offload::Optimizer,
            "optimizer+params" => Offload::OptimizerParams,
            _ => Offload::None,
        },
        checkpointing: match l.checkpointing {
            "selective" => Checkpointing::Selective,
            "full" => Checkpointing::Full,
            _ => Checkpointing::None,
        },
        attention: base.attention,
        micro_batch: l.micro_batch,
        microbatches: if l.pp > 1 {
            l.microbatches
        } else {
            base.grad_accum.max(1)
        },
        seq: base.seq,
        width: base.precision.compute_bytes(),
        grad_width: grad_width(framework, base.precision),
        step_bytes: step_bytes(base.optimizer, base.precision),
        peft: base.peft.is_some(),
        trainable_params: trainable.params,
        trainable_tensors: trainable.tensors,
        autocast: crate::throughput::autocast(framework, base.precision),
        fused: framework == Framework::Megatron || base.techniques.compile,
        lora_per_layer: trainable.lora_per_layer,
        lora_cast: crate::throughput::lora_cast(base),
        optimizer_pass: OptimizerPass::of(framework, base.optimizer),
    }
    .with_step_bytes(base.optimizer, base.precision)
}
