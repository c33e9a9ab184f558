//! llama.cpp's (and ollama's: llama-server underneath) rows of the advice table
//! (`advice/techniques.rs`).

use crate::advice::context::{set_engine, splits_layers, Ctx};
use crate::job::ResolvedJob;

/// llama.cpp: `param` sixteenths of the blocks on the GPU (`-ngl`, at least 1), the rest on
/// the CPU.
pub(crate) fn gpu_layers(j: &mut ResolvedJob, c: &Ctx, sixteenths: u64) -> bool {
    let Some(layers) = c.spec.map(|s| s.num_layers()) else {
        return false;
    };
    let ngl = (layers * sixteenths / 16).max(1);
    let now = j.engine.n_gpu_layers.unwrap_or(layers + 1);
    splits_layers(j) && ngl < now.min(layers + 1) && set_engine(j, "n_gpu_layers", ngl.into())
}
