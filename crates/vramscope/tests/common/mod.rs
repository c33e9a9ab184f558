//! Helpers shared by this crate's integration tests.

pub mod http;

/// `path` in ../shared, or a panic naming the missing path: these tests read the shared
/// fixtures and validation cases from ../shared beside the repository.
#[allow(dead_code)] // Not every test binary that includes this module reads ../shared.
pub fn shared<P: AsRef<std::path::Path>>(path: P) -> P {
    assert!(
        path.as_ref().exists(),
        "missing {}: the tests read ../shared (fixtures, validation cases) beside the repository",
        path.as_ref().display()
    );
    path
}
