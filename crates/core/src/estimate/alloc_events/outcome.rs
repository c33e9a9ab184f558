//! What the allocator model says of a stream: the type the replay makes and the memo keeps.
//! A leaf.

/// What the allocator model said of a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub segments: u64,
    pub largest_free_block: u64,
    pub num_alloc_retries: u64,
    /// The device ran out of memory (`capacity` exceeded even after freeing the cache).
    pub oom: bool,
}
