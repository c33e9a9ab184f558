//! Helpers shared by this crate's integration tests.
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

#[path = "../../../core/tests/common/shared_dir.rs"]
mod shared_dir;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;

#[path = "../../../core/tests/common/contract_components.rs"]
pub mod contract_components;

#[path = "../../../core/tests/common/warnings.rs"]
mod warnings;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use warnings::{assert_never_warns, assert_warns, warns_of, warns_starting};
