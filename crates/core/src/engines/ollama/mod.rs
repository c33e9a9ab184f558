//! ollama.

pub mod settings;
