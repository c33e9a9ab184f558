//! vllm.

pub mod settings;
