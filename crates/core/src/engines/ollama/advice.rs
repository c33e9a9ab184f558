//! ollama's rows of the advice table (`advice/techniques.rs`).

use crate::advice::context::{shorten_context, Ctx};
use crate::job::{Framework, ResolvedJob};

/// ollama: `num_ctx` = the job's own context: llama-server holds `num_ctx` cells per slot
/// whatever the prompt (`serving.rs`), and ollama's default grows with the GPU's memory.
pub(crate) fn ollama_context(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let need = j.seq + j.new_tokens;
    let gpu = j.gpu.as_deref().and_then(|g| crate::gpu::find(g).ok());
    let current = match (j.engine.num_ctx, c.spec) {
        (Some(n), _) => n,
        (None, Some(s)) => crate::engines::ollama::device::ollama_default_num_ctx(s, j, gpu),
        (None, None) => return false,
    };
    shorten_context(j, Framework::Ollama, "num_ctx", current, need)
}
