//! The one statement of the tests' dependency on `../shared` (the contract's fixtures and
//! validation cases, beside the repository): every crate's `tests/common` includes this file.

/// `path` in ../shared, or a panic naming the missing path: these tests read the shared
/// fixtures and validation cases from ../shared beside the repository.
pub fn shared<P: AsRef<std::path::Path>>(path: P) -> P {
    assert!(
        path.as_ref().exists(),
        "missing {}: the tests read ../shared (fixtures, validation cases) beside the repository",
        path.as_ref().display()
    );
    path
}
