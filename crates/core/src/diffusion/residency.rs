//! Which weights sit on the GPU while a pipeline runs, under diffusers' offload modes.

use super::Pipeline;

/// How the pipeline places its models (diffusers `DiffusionPipeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// `pipe.to("cuda")`: every component resident for the whole run.
    None,
    /// `enable_model_cpu_offload()`: each model moves to the GPU when its forward starts and
    /// back when the next one in `model_cpu_offload_seq` starts (`pipeline_utils.py`,
    /// accelerate's `cpu_offload_with_hook`): one component resident at a time.
    Model,
}

impl Offload {
    /// Parses `none` / `model`; sequential offload (one leaf module at a time) is not modelled.
    pub fn parse(s: &str) -> Option<Offload> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Some(Offload::None),
            "model" => Some(Offload::Model),
            _ => None,
        }
    }
}

/// Bytes of weights resident on the GPU at the worst moment: all components, or under model
/// offload the largest one, each parameter `bytes_per_param` bytes (the pipeline's dtype).
pub fn resident_weight_bytes(p: &Pipeline, offload: Offload, bytes_per_param: u64) -> Option<u64> {
    let params = match offload {
        Offload::None => p.params_total()?,
        Offload::Model => p
            .components
            .iter()
            .map(|c| c.arch.params())
            .try_fold(0u64, |a, x| Some(a.max(x?)))?,
    };
    params.checked_mul(bytes_per_param)
}
