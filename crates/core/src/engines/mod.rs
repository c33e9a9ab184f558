//! One module per serving engine (`pytorch`, `vllm`, `sglang`, `llamacpp`, `ollama`). Each
//! holds what is that engine's, behind two traits:
//!
//! - `EngineSpec` (`spec.rs`; `<engine>/settings.rs`, listed in `settings.rs`): the vocabulary
//!   half — which `engine` settings it reads and their defaults, how it spells its flags. It
//!   imports nothing of the estimator, so the job reads it.
//! - `Engine` (`engine.rs`; `<engine>/mod.rs`, listed in [`ENGINES`]): the rest — its launch
//!   flags (`<engine>/launch.rs`, built with `flags.rs`).

pub mod device;
pub mod devices;
pub mod engine;
pub mod flags;
pub mod llamacpp;
pub mod ollama;
mod pool_fit;
pub mod pytorch;
pub mod settings;
pub mod sglang;
pub mod spec;
pub mod vllm;

pub use engine::Engine;
pub use settings::{layers_flag, spec};
pub use spec::EngineSpec;

/// Every engine, once.
pub static ENGINES: &[&dyn Engine] = &[
    &pytorch::settings::Pytorch,
    &vllm::settings::Vllm,
    &sglang::settings::Sglang,
    &llamacpp::settings::LlamaCpp,
    &ollama::settings::Ollama,
];

/// `framework`'s engine; the training frameworks (DeepSpeed, Megatron, FSDP) run PyTorch's.
pub fn engine(framework: crate::job::Framework) -> &'static dyn Engine {
    ENGINES
        .iter()
        .copied()
        .find(|e| e.framework() == framework)
        .unwrap_or(&pytorch::settings::Pytorch)
}

/// The engine a launch names (`Launch::engine`, the framework's own spelling).
pub fn named(name: &str) -> Option<&'static dyn Engine> {
    ENGINES
        .iter()
        .copied()
        .find(|e| e.framework().as_str() == name)
}
