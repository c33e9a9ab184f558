//! sglang.

pub mod settings;
