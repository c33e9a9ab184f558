//! llama.cpp's device: the layers `-ngl` puts on the GPU with their KV and the compute
//! buffer, the rest in host RAM (`split.rs`).

use crate::engines::device::{EngineDevice, Served};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::serving::Device;
use crate::estimate::{overhead, states};
use crate::job::ResolvedJob;
use crate::report::{Components, PeakFigures};

impl EngineDevice for super::settings::LlamaCpp {
    /// The split needs the tensor inventory; without it, PyTorch's step.
    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        let Some(inv) = &s.model.inventory else {
            return Ok(None);
        };
        llamacpp_device(s.model, s.spec, inv, s.job, s.gpu, warnings).map(Some)
    }
}

/// llama-server's `--fit-target`: the margin per device its automatic fit leaves free, 1024
/// MiB by default (llama.cpp `common/common.h`, env `LLAMA_ARG_FIT_TARGET`). ollama starts
/// llama-server without `-ngl` unless `num_gpu` is set, so this fit places the layers
/// (ollama v0.33 `llm/llama_server.go` `startLlamaServer`).
pub const LLAMA_FIT_TARGET: u64 = 1024 << 20;

/// llama.cpp: the layers `-ngl` puts on the GPU with their KV and the compute buffer; the rest
/// in host RAM (`split.rs`).
pub(crate) fn llamacpp_device(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    inv: &crate::inventory::Inventory,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    warnings: &mut Vec<String>,
) -> Result<Device, CoreError> {
    let weights = crate::estimate::weights::effective_weights(model, job)?;
    let qctx = crate::estimate::quant::QuantContext::from_spec(spec);
    let width = job.precision.compute_bytes();
    let split = crate::engines::llamacpp::split::llamacpp_split(
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
        peaks: PeakFigures {
            activation_bytes_per_layer: None,
            peak_allocated: Some(allocated),
            peak_reserved: Some(allocated),
            device_total: Some(allocated + components.cuda_context),
            peak_phase: Some("prompt processing".into()),
        },
        kv_pool: None,
        timeline: Vec::new(),
        engine: Some(serde_json::to_value(&split).unwrap_or_default()),
        engine_starts: true,
        paged: 0,
        allocator: None,
    })
}
