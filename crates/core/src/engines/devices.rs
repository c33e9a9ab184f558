//! The engines' devices, listed once (the estimator's floor: no fit, launch or advice).

use super::device::EngineDevice;
use crate::job::Framework;

/// Every engine with a device of its own.
static DEVICES: &[&dyn EngineDevice] = &[
    &super::vllm::settings::Vllm,
    &super::sglang::settings::Sglang,
    &super::llamacpp::settings::LlamaCpp,
    &super::ollama::settings::Ollama,
];

/// `framework`'s engine's device; `None` for PyTorch's walked step (every training
/// framework's too).
pub fn device_of(framework: Framework) -> Option<&'static dyn EngineDevice> {
    DEVICES.iter().copied().find(|e| e.framework() == framework)
}
