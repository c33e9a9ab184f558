//! PyTorch eager (`framework: pytorch`, and the training frameworks that run its step:
//! DeepSpeed, Megatron, FSDP): its settings; its device is the simulated step
//! (`estimate::simulate`), the default every other engine overrides.

pub mod settings;

use crate::engines::engine::Engine;
use crate::job::Framework;

/// PyTorch eager: Hugging Face `generate`, or a training step.
pub struct Pytorch;

impl Engine for Pytorch {
    fn framework(&self) -> Framework {
        Framework::Pytorch
    }
}
