//! The estimator: a model and a resolved job in, a report out. Pure arithmetic over the model's
//! inventory; no I/O.

pub mod activations;
pub mod alloc_events;
pub mod attention_masks;
pub mod blocks;
pub mod compile;
pub mod dpo;
pub use crate::job::engine_settings;
pub mod engines;
pub mod kv;
pub mod layout;
pub mod liger;
pub mod linear_ce;
pub mod memo;
pub mod mllama;
pub mod optimizer;
pub mod overhead;
pub mod quant;
pub mod rl;
pub mod serving;
pub mod stages;
pub mod states;
pub mod tape;
pub mod techniques;
pub mod vision;
pub mod vision_events;
mod vision_gemma4;
mod vision_projectors;
mod vision_siglip2;

pub mod forward_plan;
mod gemma3n_stages;
pub mod generate_kv;
pub mod input;
pub mod lora_modules;
pub mod memory;
pub mod prefill_walk;
pub mod state_bytes;
pub mod weights;
pub use input::ModelInput;
pub use memory::memory;
pub use weights::{effective_weights, weights_in_force};

/// The old name of the whole estimate, memory and step time: the composition lives above both
/// ([`crate::compose`]); this path is kept for its many callers.
pub use crate::compose::estimate;

pub mod simulate;

/// Bytes the caching allocator hands out for a request: the one rounding function, defined with
/// the allocator's other rules in `overhead` (`c10/cuda/CUDACachingAllocator.cpp` `round_size`).
pub use overhead::round_size;
