//! ollama's device: llama.cpp's allocator (`engines/llamacpp/device.rs`) with ollama's
//! defaults (`num_ctx` by the GPU's memory) and its layer fit.

use crate::engines::device::{EngineDevice, Served};
use crate::engines::llamacpp::device::{llamacpp_device, LLAMA_FIT_TARGET};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::serving::Device;
use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

impl EngineDevice for super::settings::Ollama {
    /// llama.cpp's split needs the tensor inventory; without it, PyTorch's step.
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        let Some(inv) = &s.model.inventory else {
            return Ok(None);
        };
        ollama_device(s.model, s.spec, inv, s.job, s.gpu, warnings).map(Some)
    }
}

/// ollama's default `num_ctx` by the GPUs' memory less `OLLAMA_GPU_OVERHEAD` (here the job's
/// `reserve`): 262144 from 47 GiB, 32768 from 23 GiB, else 4096 (ollama v0.33
/// `server/routes.go` `Serve`, "vram-based default context"), at most the model's training
/// context (`server/sched.go`).
pub fn ollama_default_num_ctx(spec: &ModelSpec, job: &ResolvedJob, gpu: Option<&Gpu>) -> u64 {
    let gib = 1u64 << 30;
    let vram = gpu.map_or(0, |g| job.usable(g.memory_bytes)) * job.parallel.gpus.max(1);
    let tier = if vram >= 47 * gib {
        262_144
    } else if vram >= 23 * gib {
        32_768
    } else {
        4096
    };
    spec.max_position_embeddings.map_or(tier, |m| tier.min(m))
}

/// ollama: llama-server holds `num_ctx` cells per slot (`-c num_ctx × OLLAMA_NUM_PARALLEL`,
/// the job's batch being the slots) whatever the prompt; unless `num_gpu` is set, the most
/// layers that leave llama-server's fit margin free go to the GPU.
pub(crate) fn ollama_device(
    model: &ModelInput,
    spec: &ModelSpec,
    inv: &crate::inventory::Inventory,
    job: &ResolvedJob,
    gpu: Option<&Gpu>,
    warnings: &mut Vec<String>,
) -> Result<Device, CoreError> {
    let num_ctx = job
        .engine
        .num_ctx
        .unwrap_or_else(|| ollama_default_num_ctx(spec, job, gpu));
    let ctx = job.seq.saturating_add(job.new_tokens);
    if ctx > num_ctx {
        warnings.push(format!(
            "context {ctx} is longer than ollama's num_ctx {num_ctx}: the prompt is truncated \
             (set num_ctx or OLLAMA_CONTEXT_LENGTH)"
        ));
    }
    let mut j = ResolvedJob {
        seq: num_ctx,
        new_tokens: 0,
        ..job.clone()
    };
    let auto = j.engine.n_gpu_layers.is_none();
    if let (true, Some(g)) = (auto, gpu) {
        let ngl = auto_layers(model, spec, inv, &j, g)?;
        j.set_engine("n_gpu_layers", ngl.into())?;
    }
    let mut d = llamacpp_device(model, spec, inv, &j, gpu, warnings)?;
    if let Some(serde_json::Value::Object(o)) = d.engine.as_mut() {
        o.insert("num_ctx".into(), num_ctx.into());
        o.insert("layers_auto".into(), auto.into());
    }
    Ok(d)
}

/// The most layers (blocks + the output layer) whose device total leaves llama-server's fit
/// margin free of what the user's reserve leaves; 1 when not even one does (ollama would then
/// run on the CPU: the report says the job does not fit).
fn auto_layers(
    model: &ModelInput,
    spec: &ModelSpec,
    inv: &crate::inventory::Inventory,
    job: &ResolvedJob,
    gpu: &Gpu,
) -> Result<u64, CoreError> {
    let target = job
        .usable(gpu.memory_bytes)
        .saturating_sub(LLAMA_FIT_TARGET);
    let all = spec.num_layers() + 1;
    let mut scratch = Vec::new();
    for ngl in (1..=all).rev() {
        let mut j = job.clone();
        j.set_engine("n_gpu_layers", ngl.into())?;
        let d = llamacpp_device(model, spec, inv, &j, Some(gpu), &mut scratch)?;
        if d.peaks.device_total.is_some_and(|t| t <= target) {
            return Ok(ngl);
        }
    }
    Ok(1)
}
