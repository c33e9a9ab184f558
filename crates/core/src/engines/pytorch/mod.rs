//! pytorch.

pub mod settings;
