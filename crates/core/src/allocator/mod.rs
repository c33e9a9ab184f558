//! A model of PyTorch's native CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`).
//! Depends on nothing else in this crate.

pub mod config;

pub use config::{AllocatorConfig, IntervalBound, Rest, RoundupDivisions};
