//! One module per serving engine (`pytorch`, `vllm`, `sglang`, `llamacpp`, `ollama`). Each
//! holds what is that engine's: its settings and spellings (`<engine>/settings.rs`, the
//! vocabulary half: an `EngineSpec`, listed in `settings.rs`).

pub mod llamacpp;
pub mod ollama;
pub mod pytorch;
pub mod settings;
pub mod sglang;
pub mod spec;
pub mod vllm;

pub use settings::{layers_flag, spec};
pub use spec::EngineSpec;
