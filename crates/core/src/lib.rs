//! vramscope-core: the model description, its exact tensor inventory, the GPU catalog, and (in
//! later modules) the memory estimator. No I/O: everything here is pure computation over values
//! that the `vramscope-formats` readers or the caller provide.

pub mod dtype;
pub mod error;
pub mod ggml;
pub mod gpu;
pub mod inventory;
pub mod model;
mod serde_name;
pub mod summary;
pub mod text;
pub mod vision;

pub use dtype::DType;
pub use error::CoreError;
pub use inventory::{build_inventory, Component, Inventory, Tensor};
pub use model::ModelSpec;
pub use summary::ModelSummary;
pub mod advice;
pub mod allocator;
pub mod compose;
pub mod diffusion;
pub mod engines;
pub mod estimate;
pub mod fit;
pub mod fit_speed;
pub mod fit_vision;
pub mod job;
pub mod launch;
pub mod plan;
pub mod report;
pub mod search;
pub mod throughput;
