//! SGLang's launch flags (`python/sglang/srt/server_args.py`): its token pool is shared as
//! vLLM's is: `--context-length` = the longest request the pool holds, at most the model's
//! limit; `--max-running-requests` = the requests of the job's context the pool holds at once;
//! `--mem-fraction-static` = the static share the pool was sized with, `--tp` and
//! `--kv-cache-dtype` as the job has them.

use crate::engines::flags::Builder;
use crate::job::ResolvedJob;
use crate::report::FitAnswer;

/// SGLang's flags for the fit answer; `None` when no context fits.
pub(super) fn flags(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer) -> Option<()> {
    let ctx = fit.max_context?;
    let mfs = job.engine.mem_fraction_static.or_else(|| {
        // The fraction the estimate used (SGLang's default for this GPU).
        let gpu = crate::gpu::find(job.gpu.as_deref()?).ok()?;
        let mib = gpu.memory_bytes >> 20;
        let tp = job.parallel.tp.max(1);
        let (chunk, graphs) = crate::engines::sglang::budget::default_chunk_and_graphs(mib, tp);
        Some(crate::engines::sglang::budget::default_mem_fraction_static(
            mib,
            job.engine.chunked_prefill_size.unwrap_or(chunk),
            job.engine.cuda_graph_max_bs.unwrap_or(graphs),
            tp,
            job.parallel.pp.max(1),
        ))
    })?;
    b.flag(
        "--mem-fraction-static",
        mfs,
        "the share of free memory for weights and the token pool the context below was \
         sized with"
            .into(),
    );
    let len = fit.longest_request.unwrap_or(ctx);
    b.flag(
        "--context-length",
        len,
        format!(
            "the longest request SGLang's token pool on {} holds, at most the model's limit: \
             a request is cut at min(context_length, pool tokens) − 1 (tp_worker.py \
             max_req_len)",
            fit.target.gpu
        ),
    );
    sglang_max_running_requests(b, job, fit);
    if job.parallel.tp > 1 {
        b.flag(
            "--tp",
            job.parallel.tp,
            "the job's tensor-parallel degree (weights and KV split across GPUs)".into(),
        );
    }
    let kv = job.kv_dtype.as_ref().map(|k| k.as_str());
    if let Some(t) = kv.filter(|t| t.starts_with("fp8")) {
        // SGLang names the format: fp8_e5m2 or fp8_e4m3 (plain "fp8" is e4m3).
        let t = if t == "fp8" { "fp8_e4m3" } else { t };
        b.flag(
            "--kv-cache-dtype",
            t,
            "the job's 8-bit KV cache (half the bytes per token of 16-bit)".into(),
        );
    }
    Some(())
}

/// SGLang's `--max-running-requests`: the requests of the job's context the token pool holds
/// at once (SGLang admits requests while the pool has free tokens, `schedule_policy.py`
/// `PrefillAdder`, and fewer than max_running_requests run); its default is at least 2048
/// (`budget.rs`), so a count up to that (or the user's own) never grows the request table the
/// pool was sized beside; 1 when not even one such request fits.
fn sglang_max_running_requests(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer) {
    let context = job.seq + job.new_tokens;
    let ceiling = job.engine.max_running_requests.unwrap_or(2048);
    let (n, why) = match fit.max_batch {
        Some(n) if n > ceiling => (
            ceiling,
            format!(
                "{n} requests of {context} tokens fit the pool at once; {ceiling} keeps the \
                 request table at most the size it was sized with"
            ),
        ),
        Some(n) => (
            n,
            format!(
                "{n} requests of {context} tokens fit the token pool at once (SGLang admits \
                 requests while free tokens last, so more would wait)"
            ),
        ),
        None => (
            1,
            format!("not one request of {context} tokens fits the pool"),
        ),
    };
    b.flag("--max-running-requests", n, why);
}
