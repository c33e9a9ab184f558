//! SGLang's fit: what fits its token pool, with the static fraction lowered when its default
//! leaves too little for activations and CUDA graphs.

use crate::compose::estimate;
use crate::engines::engine::FitSearch;
use crate::engines::pool_fit::{context_cap, engine_u64, PoolFit};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::job::{ResolvedJob, Task};
use crate::report::FitAnswer;
use crate::search::largest;

/// SGLang with its default `mem_fraction_static` whose remainder cannot hold a prefill chunk
/// and the CUDA graphs: the largest static fraction in hundredths below the default that fits
/// the GPU (the user's own fraction is kept).
pub(crate) fn sglang_within_capacity(
    model: &ModelInput,
    job: ResolvedJob,
) -> Result<(ResolvedJob, Option<String>), CoreError> {
    let (Task::Infer, None, Some(_)) = (job.task, job.engine.mem_fraction_static, job.gpu.as_ref())
    else {
        return Ok((job, None));
    };
    let r = estimate(model, &job)?;
    let default = mfs_of(&r).unwrap_or(0.88);
    if r.fit.as_ref().is_none_or(|f| f.fits) {
        return Ok((job, None));
    }
    let mut hundredths = (default * 100.0).floor() as i64;
    while hundredths > 0 {
        let mut j = job.clone();
        let f = hundredths as f64 / 100.0;
        j.set_engine("mem_fraction_static", f.into())?;
        let r = estimate(model, &j)?;
        if r.fit.as_ref().is_some_and(|x| x.fits) {
            let note = format!(
                "--mem-fraction-static {f} instead of SGLang's {default}: its default leaves \
                 too little for a prefill chunk and the CUDA graphs"
            );
            return Ok((j, Some(note)));
        }
        hundredths -= 1;
    }
    Ok((job, None))
}

fn mfs_of(r: &crate::report::Report) -> Option<f64> {
    r.engine.as_ref()?.get("mem_fraction_static")?.as_f64()
}

/// SGLang: what fits its token pool (the radix cache's, one token per slot): the most
/// sequences at the job's context, and the longest context at the job's batch, at most
/// `context_length`; nothing when the engine does not fit the GPU or would not start.
pub(crate) fn sglang_fit(s: &FitSearch) -> Result<FitAnswer, CoreError> {
    let (spec, job, gpu, max_pos) = (s.spec, s.job, s.gpu, s.max_pos);
    let report = estimate(s.model, job)?;
    let fits = report.fit.as_ref().is_some_and(|f| f.fits);
    let pool = if fits {
        report.per_gpu.kv_pool.unwrap_or(0)
    } else {
        0
    };
    let kv = |b: u64, c: u64| crate::estimate::engines::kv_bytes_per_gpu(spec, job, b, c);
    let context = job.seq + job.new_tokens;
    let per_seq = kv(1, context)?.max(1);
    let max_batch = Some(pool / per_seq).filter(|b| *b >= 1);
    let cap = context_cap(&report, "context_length", max_pos);
    // One request holds at most min(context_length, the pool's tokens) − 1 tokens
    // (`python/sglang/srt/managers/tp_worker.py`: `max_req_len = min(context_len − 1,
    // max_total_num_tokens − 1)`): the longest context_length worth setting.
    let longest_request = largest(cap, |c| Ok(kv(1, c)? <= pool))?;
    let found = PoolFit::search(spec, job, pool, cap, max_batch, longest_request)?;
    let mut notes = vec![format!(
        "SGLang's token pool on {}: {} ({} tokens) at mem_fraction_static {}",
        gpu.id,
        crate::text::bytes(report.per_gpu.kv_pool.unwrap_or(0)),
        crate::text::thousands(engine_u64(&report, "max_total_tokens").unwrap_or(0)),
        mfs_of(&report).unwrap_or(0.0)
    )];
    if !fits {
        notes.push(format!(
            "SGLang at this static fraction does not fit {} (see the estimate's warnings)",
            gpu.id
        ));
    }
    if found.limited() {
        notes.push(format!(
            "the context search stopped at context_length {cap}"
        ));
    }
    Ok(found.answer(gpu, job, max_pos, notes))
}
