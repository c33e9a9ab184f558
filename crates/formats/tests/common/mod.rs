//! Helpers shared by this crate's integration tests.

#[path = "../../../core/tests/common/shared_dir.rs"]
mod shared_dir;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;
