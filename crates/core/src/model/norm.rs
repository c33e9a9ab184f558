//! A normalisation layer of the model description: its kind and width. Shared by the text
//! layers (`model`) and the vision tower (`vision`).

use serde::{Deserialize, Serialize};

/// A normalisation layer over `dim` features.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Norm {
    pub kind: NormKind,
    pub dim: u64,
}

/// Which normalisation: `torch.nn.LayerNorm` or an RMSNorm (`LlamaRMSNorm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// LayerNorm; `bias` says whether it has a shift (`elementwise_affine` with bias).
    LayerNorm { bias: bool },
    /// RMSNorm: a scale only.
    RmsNorm,
}

impl Norm {
    pub fn rms(dim: u64) -> Self {
        Norm {
            kind: NormKind::RmsNorm,
            dim,
        }
    }
    pub fn layer(dim: u64, bias: bool) -> Self {
        Norm {
            kind: NormKind::LayerNorm { bias },
            dim,
        }
    }
}
