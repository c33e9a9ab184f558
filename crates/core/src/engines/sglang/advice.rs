//! SGLang's rows of the advice table (`advice/techniques.rs`).

use crate::advice::context::{context_or_model, serves, set_engine, shorten_context, Ctx};
use crate::job::{Framework, ResolvedJob};

/// SGLang: `context_length` = the job's own context (prompt + generated). The request table
/// beside the pool holds `max_running_requests + 1` rows of `context_length + 4` slots
/// (`budget.rs`), so a model's 128K default costs GBs no request of the job uses.
pub(crate) fn sglang_context(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let need = j.seq + j.new_tokens;
    let current = context_or_model(j.engine.context_length, c);
    shorten_context(j, Framework::Sglang, "context_length", current, need)
}

/// SGLang: `mem_fraction_static` 0.05 above the current one (SGLang's default for the GPU,
/// `budget.rs`), at most 0.95: more of the free memory for the token pool, less for a prefill
/// chunk and the CUDA graphs (the remedy SGLang's own "Not enough memory" error names).
pub(crate) fn sglang_fraction(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    if !serves(j, Framework::Sglang) {
        return false;
    }
    let now = j.engine.mem_fraction_static.unwrap_or_else(|| {
        let Some(g) = j.gpu.as_deref().and_then(|g| crate::gpu::find(g).ok()) else {
            return 1.0;
        };
        let mib = g.memory_bytes >> 20;
        let tp = j.parallel.tp.max(1);
        let (chunk, graphs) = crate::engines::sglang::budget::default_chunk_and_graphs(mib, tp);
        crate::engines::sglang::budget::default_mem_fraction_static(
            mib,
            j.engine.chunked_prefill_size.unwrap_or(chunk),
            j.engine.cuda_graph_max_bs.unwrap_or(graphs),
            tp,
            j.parallel.pp.max(1),
        )
    });
    let to = ((now + 0.05).min(0.95) * 1000.0).round() / 1000.0;
    now < to && set_engine(j, "mem_fraction_static", to.into())
}
