//! Helpers shared by this crate's integration tests.

#[path = "../../../core/tests/common/shared_dir.rs"]
mod shared_dir;
pub use shared_dir::shared;
