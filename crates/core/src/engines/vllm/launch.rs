//! vLLM's launch flags (`vllm/engine/arg_utils.py`): the pool is shared block by block, not
//! split per sequence, so the two limits are separate: `--max-model-len` = the longest single
//! request the pool holds, at most the model's own `max_position_embeddings` (vLLM refuses to
//! start when one request of `max_model_len` does not fit the pool,
//! `check_enough_kv_cache_memory`, and refuses a `max_model_len` above the config's,
//! `vllm/config/model.py` `_get_and_verify_max_len`); `--max-num-seqs` = how many requests of
//! the job's context the pool holds at once (the fit's `max_batch`: the scheduler admits
//! requests while free blocks last); `--gpu-memory-utilization` = the share the KV pool was
//! sized with; `--tensor-parallel-size` and `--kv-cache-dtype` as the job has them.

use crate::engines::flags::Builder;
use crate::job::ResolvedJob;
use crate::report::FitAnswer;

/// vLLM's flags for the fit answer; `None` when no request fits.
pub(super) fn flags(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer) -> Option<()> {
    let len = fit.longest_request?;
    let util = crate::engines::vllm::budget::gpu_memory_utilization(job);
    let context = job.seq + job.new_tokens;
    let limit = match (job.engine.max_model_len, fit.model_max_positions) {
        (Some(m), _) => Some((m, "the job's own --max-model-len".to_string())),
        (None, Some(m)) => Some((
            m,
            format!(
                "the model's own limit (max_position_embeddings {}): vLLM refuses a longer \
                 --max-model-len",
                crate::text::thousands(m)
            ),
        )),
        (None, None) => None,
    };
    let len_why = match limit {
        Some((m, what)) if len >= m => {
            format!(
                "{what}; the KV pool on {} holds one request of it",
                fit.target.gpu
            )
        }
        _ => format!(
            "the longest request the KV pool on {} holds: vLLM refuses to start when one request \
             of max_model_len does not fit its pool",
            fit.target.gpu
        ),
    };
    let len_why = if len < context {
        format!("{len_why}; shorter than the job's {context} tokens, whose requests are refused")
    } else {
        len_why
    };
    b.flag("--max-model-len", len, len_why);
    b.flag(
        "--gpu-memory-utilization",
        util,
        if job.reserve > 0 {
            format!(
                "the share of the GPU the KV pool above was sized with, leaving the {} reserved \
                 free",
                crate::text::bytes(job.reserve)
            )
        } else {
            "the share of the GPU the KV pool above was sized with".into()
        },
    );
    vllm_max_num_seqs(b, job, fit, context);
    if job.parallel.tp > 1 {
        b.flag(
            "--tensor-parallel-size",
            job.parallel.tp,
            "the job's tensor-parallel degree (weights and KV split across GPUs)".into(),
        );
    }
    // The engine's own spelling, as the user gave it.
    if job.kv_dtype.as_ref().map(|k| k.as_str()) == Some("fp8") {
        b.flag(
            "--kv-cache-dtype",
            "fp8",
            "the job's 8-bit KV cache (half the bytes per token of 16-bit)".into(),
        );
    }
    Some(())
}

/// vLLM's `--max-num-seqs`: the most requests of the job's context the pool holds at once (the
/// fit's `max_batch`; vLLM admits requests by free KV blocks, `engines::vllm_concurrent_requests`),
/// at most the setting the pool was sized with (a smaller one only shrinks the CUDA graphs and
/// the sampler's profile, so the pool does not shrink); 1 when not even one such request fits.
fn vllm_max_num_seqs(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer, context: u64) {
    let sized_with = job.engine.max_num_seqs_or_default();
    let (seqs, why) = match fit.max_batch {
        Some(n) if n > sized_with => (
            sized_with,
            format!(
                "{n} requests of {context} tokens fit the pool at once; {sized_with} is the \
                 setting the pool was sized with (more would grow the CUDA graphs)"
            ),
        ),
        Some(n) => (
            n,
            format!(
                "{n} requests of {context} tokens fit the KV pool at once (vLLM admits requests \
                 while free blocks last, so more would wait)"
            ),
        ),
        None => (
            1,
            format!("not one request of {context} tokens fits the KV pool"),
        ),
    };
    b.flag("--max-num-seqs", seqs, why);
}
