//! llamacpp.

pub mod settings;
