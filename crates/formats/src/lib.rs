//! vramscope-formats: strict, bounded readers for the files a model comes in. Nothing here reads
//! tensor data: only headers and configs. Every reader treats its input as hostile: sizes are
//! checked against the file before anything is allocated, and bad input is an error, never a
//! panic.

pub mod diffusers;
pub mod error;
pub mod files;
pub mod gguf;
pub mod hf_config;
pub mod hf_names;
pub mod model_source;
pub mod presets;
pub mod python_json;
pub mod recipes;
mod reconcile;
pub mod safetensors;

pub use error::{FormatError, Result};
