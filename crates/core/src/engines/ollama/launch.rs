//! ollama's launch (ollama v0.33: `envconfig/config.go`, `api/types.go` Options): its server
//! takes environment variables (`OLLAMA_CONTEXT_LENGTH`, `OLLAMA_NUM_PARALLEL`,
//! `OLLAMA_KV_CACHE_TYPE`, `OLLAMA_FLASH_ATTENTION`): `argv` holds them as `KEY=VALUE` before
//! `ollama serve`; the model options `num_gpu` and `num_ctx` (a Modelfile's `PARAMETER` or
//! the API's `options`) are in `options`. The goal is llama.cpp's.

use crate::engines::flags::Builder;
use crate::job::{AttentionKernel, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// ollama's launch: its variables before `ollama serve`, the model's options for its
/// Modelfile; `None` without a layer count.
pub(super) fn launch(job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
    let mut b = Builder::new();
    flags(&mut b, job, fit, n_blocks)?;
    let opts = b
        .options
        .iter()
        .map(|(k, v)| format!("PARAMETER {k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let command = format!(
        "{} ollama serve  # then in the model's Modelfile: {opts} (or the same as \
         \"options\" in an API request)",
        b.argv.join(" ")
    );
    let mut argv = b.argv;
    argv.extend(["ollama".to_string(), "serve".to_string()]);
    Some(Launch {
        engine: "ollama".into(),
        argv,
        command: command.trim_start().to_string(),
        why: b.why,
        options: b.options,
    })
}

/// ollama's variables and options for the fit answer; `None` without a layer count.
fn flags(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<()> {
    let ngl = fit.max_gpu_layers?;
    let all = n_blocks + 1;
    let num_ctx = job.engine.num_ctx?;
    let ctx = match fit.max_context {
        Some(c) if ngl >= all => c,
        _ => num_ctx,
    };
    let slots = job.batch.max(1);
    b.env(
        "OLLAMA_CONTEXT_LENGTH",
        ctx,
        "the server's default num_ctx, the same as the option below".into(),
    );
    if slots > 1 {
        b.env(
            "OLLAMA_NUM_PARALLEL",
            slots,
            "one slot per concurrent sequence, each with num_ctx tokens".into(),
        );
    }
    if let Some(t) = crate::engines::llamacpp::launch::kv_cache_type(job) {
        b.env(
            "OLLAMA_KV_CACHE_TYPE",
            t,
            format!("the job's {t} KV cache (needs flash attention)"),
        );
    }
    if job.attention == AttentionKernel::Flash {
        b.env(
            "OLLAMA_FLASH_ATTENTION",
            1,
            "flash attention, as the job has it".into(),
        );
    }
    b.option(
        "num_gpu",
        ngl,
        if ngl >= all {
            format!(
                "all {n_blocks} blocks and the output layer fit on {}",
                fit.target.gpu
            )
        } else if job.engine.n_gpu_layers.is_none() {
            format!(
                "the layers of the {all} (blocks + output) ollama places itself on {} at num_ctx \
                 {num_ctx}, its server's fit keeping {} free (set here so the Modelfile says it)",
                fit.target.gpu,
                crate::text::bytes(crate::engines::llamacpp::device::LLAMA_FIT_TARGET)
            )
        } else {
            format!(
                "the most of the {all} layers (blocks + output) that fit {} at num_ctx {num_ctx}",
                fit.target.gpu
            )
        },
    );
    b.option(
        "num_ctx",
        ctx,
        if ngl >= all {
            format!("every layer is on the GPU: the longest context per slot that fits ({slots} slot(s))")
        } else {
            "the context at which the layers above were fitted".into()
        },
    );
    Some(())
}
