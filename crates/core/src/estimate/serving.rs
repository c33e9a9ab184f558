//! The devices of the serving engines modelled on top of another one's rules: SGLang (its own
//! static-fraction budget, `sglang.rs`) and ollama (llama.cpp's allocator with ollama's
//! defaults and its layer fit).

use super::input::ModelInput;
use super::overhead;
use super::states::{self, StateBytes};
use crate::error::CoreError;
use crate::gpu::Gpu;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use crate::report::{AllocatorSummary, Components, TimelinePoint};
use crate::text::bytes;

/// SGLang serving: weights and the token pool in the static share, one prefill chunk's
/// activations, the CUDA graphs and the request table outside it (`sglang.rs`); this job's
/// own sequences' KV inside the pool.
pub(super) fn sglang_device(
    spec: &ModelSpec,
    job: &ResolvedJob,
    gpu: Option<&Gpu>,
    st: &StateBytes,
    warnings: &mut Vec<String>,
) -> Result<Device, CoreError> {
    let device = gpu.or_else(|| crate::gpu::find("a100-80gb").ok());
    let capacity = device.map_or(0, |g| g.memory_bytes);
    if gpu.is_none() {
        warnings.push(
            "SGLang sizes its static share from the GPU's memory: with no --gpu, an A100 80GB \
             is assumed"
                .into(),
        );
    }
    let non_torch = non_torch_bytes(gpu, job);
    let b = super::sglang::sglang_budget(
        spec,
        job,
        capacity,
        job.usable(capacity),
        st.resident.parameters,
        non_torch,
    )?;
    let ctx = job.seq.saturating_add(job.new_tokens);
    let job_kv = super::engines::kv_bytes_per_gpu(spec, job, job.batch, ctx)?;
    let starts = sglang_warnings(job, &b, job_kv, warnings);
    let mut components = Components {
        parameters: b.weights,
        kv_cache: job_kv,
        temporaries: b.activations + b.cuda_graphs + b.req_to_token,
        cuda_context: non_torch,
        ..Components::default()
    };
    let allocated = components.allocated();
    let reserved = b.weights + b.kv_pool + components.temporaries;
    components.allocator_reserve = reserved.saturating_sub(allocated);
    Ok(Device {
        components,
        peak_allocated: Some(allocated),
        peak_reserved: Some(reserved),
        device_total: Some(reserved + non_torch),
        peak_phase: Some("serving".into()),
        kv_pool: Some(b.kv_pool),
        timeline: Vec::new(),
        engine: Some(serde_json::to_value(&b).unwrap_or_default()),
        engine_starts: starts,
        paged: 0,
        allocator: None,
    })
}

/// What SGLang would say of this job; `false` when it would refuse to start (no room for a KV
/// pool in the static share).
fn sglang_warnings(
    job: &ResolvedJob,
    b: &super::sglang::SglangBudget,
    job_kv: u64,
    warnings: &mut Vec<String>,
) -> bool {
    let ctx = job.seq.saturating_add(job.new_tokens);
    if b.max_total_tokens == 0 {
        warnings.push(format!(
            "SGLang would not start: mem_fraction_static {} of the {} free leaves no KV pool \
             beside {} of weights (model_runner.py: \"Not enough memory. Please try to \
             increase --mem-fraction-static\")",
            b.mem_fraction_static,
            bytes(b.free_at_start),
            bytes(b.weights)
        ));
        return false;
    }
    if job_kv > b.kv_pool {
        warnings.push(format!(
            "this job's {} sequences need {} of KV but SGLang's token pool holds {} ({} \
             tokens): requests would wait or be retracted",
            job.batch,
            bytes(job_kv),
            bytes(b.kv_pool),
            crate::text::thousands(b.max_total_tokens)
        ));
    }
    if ctx > b.context_length {
        warnings.push(format!(
            "context {ctx} is longer than context_length {}: SGLang rejects longer requests",
            b.context_length
        ));
    }
    if job.batch > b.max_running_requests {
        warnings.push(format!(
            "{} sequences exceed max_running_requests {}: the rest queue",
            job.batch, b.max_running_requests
        ));
    }
    let outside = b.activations + b.cuda_graphs + b.req_to_token;
    let left = (b.free_at_start as f64 * (1.0 - b.mem_fraction_static)) as u64;
    if outside > left {
        warnings.push(format!(
            "a prefill chunk of {} tokens, the CUDA graphs up to batch {} and the request \
             table need {} but 1 − mem_fraction_static leaves {}: SGLang would run out of \
             memory under load; lower --mem-fraction-static or --chunked-prefill-size",
            b.chunked_prefill_size,
            b.cuda_graph_max_bs,
            bytes(outside),
            bytes(left)
        ));
    }
    true
}

/// llama-server's `--fit-target`: the margin per device its automatic fit leaves free, 1024
/// MiB by default (llama.cpp `common/common.h`, env `LLAMA_ARG_FIT_TARGET`). ollama starts
/// llama-server without `-ngl` unless `num_gpu` is set, so this fit places the layers
/// (ollama v0.33 `llm/llama_server.go` `startLlamaServer`).
pub const LLAMA_FIT_TARGET: u64 = 1024 << 20;

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
pub(super) fn ollama_device(
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
        if d.device_total.is_some_and(|t| t <= target) {
            return Ok(ngl);
        }
    }
    Ok(1)
}

/// What one device holds over the step, however it was found: by walking a PyTorch step, or
/// from a serving engine's own budget.
pub(super) struct Device {
    pub(super) components: Components,
    pub(super) peak_allocated: Option<u64>,
    pub(super) peak_reserved: Option<u64>,
    pub(super) device_total: Option<u64>,
    pub(super) peak_phase: Option<String>,
    pub(super) kv_pool: Option<u64>,
    pub(super) timeline: Vec<TimelinePoint>,
    pub(super) engine: Option<serde_json::Value>,
    /// vLLM refuses to start when its pool cannot hold one request of max_model_len tokens.
    pub(super) engine_starts: bool,
    /// Paged optimizer states counted in `device_total` (unified memory, evictable).
    pub(super) paged: u64,
    /// The caching-allocator model's figures where the step was simulated event by event.
    pub(super) allocator: Option<AllocatorSummary>,
}

/// Memory outside PyTorch's allocator: the CUDA context, and NCCL's buffers when several GPUs
/// talk (`overhead.rs`).
pub(super) fn non_torch_bytes(gpu: Option<&crate::gpu::Gpu>, job: &ResolvedJob) -> u64 {
    overhead::cuda_context_bytes_with(gpu, job.cuda_module_loading)
        + if job.parallel.gpus > 1 {
            overhead::nccl_bytes(job.parallel.gpus)
        } else {
            0
        }
}

/// llama.cpp: the layers `-ngl` puts on the GPU with their KV and the compute buffer; the rest
/// in host RAM (`engines.rs`).
pub(super) fn llamacpp_device(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    inv: &crate::inventory::Inventory,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    warnings: &mut Vec<String>,
) -> Result<Device, CoreError> {
    let weights = super::weights::effective_weights(model, job)?;
    let qctx = super::quant::QuantContext::from_spec(spec);
    let width = job.precision.compute_bytes();
    let split = super::engines::llamacpp_split(
        spec,
        inv,
        |t| states::stored_bytes_exact(&weights, &qctx, t, width),
        job,
    )?;
    let components = Components {
        parameters: split.gpu_weights,
        kv_cache: split.gpu_kv,
        temporaries: split.gpu_compute,
        cuda_context: if split.layers_on_gpu > 0 || split.gpu_compute > 0 {
            overhead::cuda_context_bytes_with(gpu, job.cuda_module_loading)
        } else {
            0
        },
        ..Components::default()
    };
    let allocated = components.allocated();
    if split.host_total > 0 {
        // ollama's option for llama.cpp's -ngl is num_gpu.
        let flag = crate::engines::settings::layers_flag(job.framework);
        warnings.push(format!(
            "{} of {} layers on the GPU ({flag} {}): {} of weights and KV stay in host RAM",
            split.layers_on_gpu,
            spec.num_layers(),
            split.n_gpu_layers,
            crate::text::bytes(split.host_total)
        ));
    }
    Ok(Device {
        components,
        peak_allocated: Some(allocated),
        peak_reserved: Some(allocated),
        device_total: Some(allocated + components.cuda_context),
        peak_phase: Some("prompt processing".into()),
        kv_pool: None,
        timeline: Vec::new(),
        engine: Some(serde_json::to_value(&split).unwrap_or_default()),
        engine_starts: true,
        paged: 0,
        allocator: None,
    })
}
