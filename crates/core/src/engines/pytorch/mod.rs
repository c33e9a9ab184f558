//! PyTorch eager (`framework: pytorch`, and the training frameworks that run its step:
//! DeepSpeed, Megatron, FSDP): its settings; its device is the simulated step
//! (`estimate::simulate`), the default every other engine overrides.

pub mod settings;

pub use settings::Pytorch;

use crate::engines::engine::Engine;

impl Engine for Pytorch {}
