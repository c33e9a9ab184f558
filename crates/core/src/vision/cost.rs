//! What one image costs the language model and the tower: the answer of every family's
//! token rule (`tokens`, `anyres`, `onevision`).

use serde::{Deserialize, Serialize};

/// What one image costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageCost {
    /// Positions the image takes in the language model's sequence.
    pub tokens: u64,
    /// Images the tower runs on for it (LLaVA-NeXT: the base image and each tile).
    pub tower_images: u64,
    /// The tower's sequence per tower image (patches, plus a class token).
    pub tower_seq: u64,
}
