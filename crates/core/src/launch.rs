//! The engine's own flags for a fit answer (contract: `fit.launch`): what to pass to `vllm
//! serve` or `llama-server` so the engine runs at the limits the search found, each value with
//! the reason for it.
//!
//! - vLLM (`vllm/engine/arg_utils.py`): the pool is shared block by block, not split per
//!   sequence, so the two limits are separate: `--max-model-len` = the longest single request
//!   the pool holds, at most the model's own `max_position_embeddings` (vLLM refuses to start
//!   when one request of `max_model_len` does not fit the pool, `check_enough_kv_cache_memory`,
//!   and refuses a `max_model_len` above the config's, `vllm/config/model.py`
//!   `_get_and_verify_max_len`); `--max-num-seqs` = how many requests of the job's context the
//!   pool holds at once (the fit's `max_batch`: the scheduler admits requests while free blocks
//!   last); `--gpu-memory-utilization` = the share the KV pool was sized with;
//!   `--tensor-parallel-size` and `--kv-cache-dtype` as the job has them.
//! - llama.cpp (`tools/server`, `common/arg.cpp`): "all layers on the GPU if possible, else the
//!   most layers at this context": `-ngl` = the fit's `max_gpu_layers`; `-c` = the total KV
//!   cells over all slots (`-np` slots of one context each): the fit's `max_context` per slot
//!   when every layer is on the GPU, else the job's own context; `-ctk/-ctv` for a quantized KV
//!   cache and `-fa on` for flash attention.
//! - SGLang (`python/sglang/srt/server_args.py`): its token pool is shared as vLLM's is:
//!   `--context-length` = the longest request the pool holds, at most the model's limit;
//!   `--max-running-requests` = the requests of the job's context the pool holds at once;
//!   `--mem-fraction-static` = the static share the pool was sized with, `--tp` and
//!   `--kv-cache-dtype` as the job has them.
//! - ollama (ollama v0.33: `envconfig/config.go`, `api/types.go` Options): its server takes
//!   environment variables (`OLLAMA_CONTEXT_LENGTH`, `OLLAMA_NUM_PARALLEL`,
//!   `OLLAMA_KV_CACHE_TYPE`, `OLLAMA_FLASH_ATTENTION`): `argv` holds them as `KEY=VALUE` before
//!   `ollama serve`; the model options `num_gpu` and `num_ctx` (a Modelfile's `PARAMETER` or
//!   the API's `options`) are in `options`. The goal is llama.cpp's.

use crate::job::{AttentionKernel, Framework, ResolvedJob, Task};
use crate::report::FitAnswer;
pub use crate::report::Launch;
use std::collections::BTreeMap;

struct Builder {
    argv: Vec<String>,
    why: BTreeMap<String, String>,
    options: BTreeMap<String, u64>,
}

impl Builder {
    fn flag(&mut self, flag: &str, value: impl ToString, why: String) {
        self.argv.push(flag.to_string());
        let v = value.to_string();
        if !v.is_empty() {
            self.argv.push(v);
        }
        self.why.insert(flag.to_string(), why);
    }

    /// An environment variable, `KEY=VALUE` in argv.
    fn env(&mut self, key: &str, value: impl ToString, why: String) {
        self.argv.push(format!("{key}={}", value.to_string()));
        self.why.insert(key.to_string(), why);
    }

    /// A model option (ollama's `num_gpu`, `num_ctx`).
    fn option(&mut self, key: &str, value: u64, why: String) {
        self.options.insert(key.to_string(), value);
        self.why.insert(key.to_string(), why);
    }
}

/// The launch flags for a serving job's fit answer; `None` for training, other frameworks, or
/// when nothing fits. `n_blocks`: the model's transformer blocks (llama.cpp counts the output
/// layer as one more).
pub fn launch(model: &str, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
    if job.task != Task::Infer {
        return None;
    }
    let mut b = Builder {
        argv: Vec::new(),
        why: BTreeMap::new(),
        options: BTreeMap::new(),
    };
    let engine = match job.framework {
        Framework::Vllm => {
            vllm(&mut b, job, fit)?;
            "vllm"
        }
        Framework::LlamaCpp => {
            llamacpp(&mut b, job, fit, n_blocks)?;
            "llama.cpp"
        }
        Framework::Sglang => {
            sglang(&mut b, job, fit)?;
            "sglang"
        }
        Framework::Ollama => {
            ollama(&mut b, job, fit, n_blocks)?;
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
            return Some(Launch {
                engine: "ollama".into(),
                argv,
                command: command.trim_start().to_string(),
                why: b.why,
                options: b.options,
            });
        }
        _ => return None,
    };
    let mut l = Launch {
        engine: engine.into(),
        argv: b.argv,
        command: String::new(),
        why: b.why,
        options: b.options,
    };
    l.serve(&ServedModel::named(model));
    Some(l)
}

/// How the engine is told which model to load: what the user named (a Hub repo, a path), its
/// revision, and whether it names a GGUF file of a Hub repo (`ORG/NAME:QUANT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModel {
    pub name: String,
    pub revision: Option<String>,
    /// `ORG/NAME:QUANT`: llama.cpp downloads it with `-hf`.
    pub hub_gguf: bool,
}

impl ServedModel {
    /// A model by a name the engine takes as it is.
    pub fn named(name: &str) -> Self {
        ServedModel {
            name: name.to_string(),
            revision: None,
            hub_gguf: false,
        }
    }
}

impl Launch {
    /// Names `model` in the command (vLLM's `serve MODEL [--revision R]`, SGLang's
    /// `--model-path`, llama.cpp's `-m FILE` or `-hf ORG/NAME:QUANT`); ollama's command names
    /// no model (the Modelfile does).
    pub fn serve(&mut self, model: &ServedModel) {
        let rev = |flag: &str| {
            model
                .revision
                .as_ref()
                .map(|r| format!(" {flag} {r}"))
                .unwrap_or_default()
        };
        let program = match self.engine.as_str() {
            "vllm" => format!("vllm serve {}{}", model.name, rev("--revision")),
            "sglang" => format!(
                "python -m sglang.launch_server --model-path {}{}",
                model.name,
                rev("--revision")
            ),
            "llama.cpp" if model.hub_gguf => format!("llama-server -hf {}", model.name),
            "llama.cpp" => format!("llama-server -m {}", model.name),
            _ => return,
        };
        self.command = std::iter::once(program)
            .chain(self.argv.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
    }
}

fn sglang(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer) -> Option<()> {
    let ctx = fit.max_context?;
    let mfs = job.engine.mem_fraction_static.or_else(|| {
        // The fraction the estimate used (SGLang's default for this GPU).
        let gpu = crate::gpu::find(job.gpu.as_deref()?).ok()?;
        let mib = gpu.memory_bytes >> 20;
        let tp = job.parallel.tp.max(1);
        let (chunk, graphs) = crate::estimate::sglang::default_chunk_and_graphs(mib, tp);
        Some(crate::estimate::sglang::default_mem_fraction_static(
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
            fit.gpu
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
/// (`sglang.rs`), so a count up to that (or the user's own) never grows the request table the
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

fn ollama(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<()> {
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
    if let Some(t) = job
        .kv_dtype
        .as_ref()
        .map(|k| k.as_str())
        .filter(|t| matches!(*t, "q8_0" | "q4_0"))
    {
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
                fit.gpu
            )
        } else if job.engine.n_gpu_layers.is_none() {
            format!(
                "the layers of the {all} (blocks + output) ollama places itself on {} at num_ctx \
                 {num_ctx}, its server's fit keeping {} free (set here so the Modelfile says it)",
                fit.gpu,
                crate::text::bytes(crate::estimate::serving::LLAMA_FIT_TARGET)
            )
        } else {
            format!(
                "the most of the {all} layers (blocks + output) that fit {} at num_ctx {num_ctx}",
                fit.gpu
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

fn vllm(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer) -> Option<()> {
    let len = fit.longest_request?;
    let util = crate::estimate::engines::gpu_memory_utilization(job);
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
            format!("{what}; the KV pool on {} holds one request of it", fit.gpu)
        }
        _ => format!(
            "the longest request the KV pool on {} holds: vLLM refuses to start when one request \
             of max_model_len does not fit its pool",
            fit.gpu
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

fn llamacpp(b: &mut Builder, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<()> {
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
            fit.gpu
        )
    } else {
        format!(
            "the most of the {all} layers (blocks + output) that fit {} at context {job_ctx}",
            fit.gpu
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
    if let Some(t) = job
        .kv_dtype
        .as_ref()
        .map(|k| k.as_str())
        .filter(|t| matches!(*t, "q8_0" | "q4_0"))
    {
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
