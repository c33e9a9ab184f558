//! llama.cpp's launch flags (`tools/server`, `common/arg.cpp`): "all layers on the GPU if
//! possible, else the most layers at this context": `-ngl` = the fit's `max_gpu_layers`; `-c` =
//! the total KV cells over all slots (`-np` slots of one context each): the fit's
//! `max_context` per slot when every layer is on the GPU, else the job's own context;
//! `-ctk/-ctv` for a quantized KV cache and `-fa on` for flash attention.

use crate::engines::flags::Builder;
use crate::job::{AttentionKernel, ResolvedJob};
use crate::report::FitAnswer;

/// llama.cpp's flags for the fit answer; `None` without a layer count.
pub(super) fn flags(
    b: &mut Builder,
    job: &ResolvedJob,
    fit: &FitAnswer,
    n_blocks: u64,
) -> Option<()> {
    let ngl = fit.max_gpu_layers?;
    let all = n_blocks + 1;
    let job_ctx = job.seq + job.new_tokens;
    let (ctx, ctx_why) = match fit.max_context {
        Some(c) if ngl >= all => (
            c,
            "every layer is on the GPU: the longest context per slot that still fits",
        ),
        _ => (
            job_ctx,
            "the job's context, at which the layers above were fitted",
        ),
    };
    let ngl_why = if ngl >= all {
        format!(
            "all {n_blocks} blocks and the output layer fit on {}",
            fit.target.gpu
        )
    } else {
        format!(
            "the most of the {all} layers (blocks + output) that fit {} at context {job_ctx}",
            fit.target.gpu
        )
    };
    b.flag("-ngl", ngl, ngl_why);
    let slots = job.batch.max(1);
    b.flag(
        "-c",
        ctx.saturating_mul(slots),
        format!("{ctx} tokens per slot × {slots} slot(s): {ctx_why}"),
    );
    if slots > 1 {
        b.flag(
            "-np",
            slots,
            "one slot per concurrent sequence (the context is split evenly)".into(),
        );
    }
    if let Some(t) = kv_cache_type(job) {
        let why = format!("the job's {t} KV cache");
        b.flag("-ctk", t, why.clone());
        b.flag(
            "-ctv",
            t,
            format!("{why} (a quantized V cache needs flash attention)"),
        );
    }
    if job.attention == AttentionKernel::Flash {
        b.flag(
            "-fa",
            "on",
            "flash attention, as the job has it (older builds take a bare -fa)".into(),
        );
    }
    Some(())
}

/// The job's KV cache as llama.cpp's cache types spell it (`-ctk`/`-ctv`, ollama's
/// `OLLAMA_KV_CACHE_TYPE`): `q8_0` or `q4_0`; `None` for the default f16 cache.
pub(crate) fn kv_cache_type(job: &ResolvedJob) -> Option<&str> {
    job.kv_dtype
        .as_ref()
        .map(|k| k.as_str())
        .filter(|t| matches!(*t, "q8_0" | "q4_0"))
}
