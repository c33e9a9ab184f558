//! Command-line definitions.

use crate::commands::jobargs::JobArgs;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

pub use crate::output::ColorChoice;

const ABOUT: &str = "Where did my GPU memory go? Estimate, explain and measure the VRAM of \
training and inference jobs.";

const EXAMPLES: &str = "\
Examples:
  vramscope estimate llama-3.1-8b --batch 1 --seq 4096 --gpu h100-80gb
  vramscope estimate Qwen/Qwen3-8B --gpu rtx4090-24gb   a Hub model: config + headers only
  vramscope estimate --job job.json --json    the contract's Report, for scripts
  vramscope validate ../shared/validation/dev-cases.json
  vramscope inspect llama-3.1-8b              parameters per component, dtype and layer
  vramscope inspect ./my-model/ --json        from config.json and/or safetensors headers
  vramscope inspect model.Q4_K_M.gguf         exact bytes of every quantized tensor
  vramscope models                            the built-in presets
  vramscope gpus                              the GPU catalog with reported capacities
  vramscope completions bash > /etc/bash_completion.d/vramscope

MODEL is a preset id (see `vramscope models`), a Hugging Face Hub repo (ORG/NAME,
ORG/NAME@REV, hf://ORG/NAME, its https://huggingface.co URL, ORG/NAME:Q4_K_M for a GGUF repo;
read from the local HF cache, else fetched: config and file headers only, cached for the next
run), a config.json, a model directory, a .safetensors file or a .gguf file. Only headers are
read, never weights. Honours HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE,
HTTPS_PROXY; vramscope's cache is VRAMSCOPE_CACHE (default ~/.cache/vramscope).";

const ESTIMATE_HELP: &str = "\
Defaults (what a plain PyTorch / HF Trainer user gets when a field is not given):
  task train · batch 1 · grad_accum 1 · seq min(2048, the model's max positions)
  precision bf16-mixed (train: autocast over fp32 weights) or bf16 (infer)
  optimizer adamw (train, torch's foreach implementation) or none (infer)
  checkpointing none · attention sdpa · peft none · weights none · framework pytorch
  new_tokens 0 · kv_dtype null (the activation dtype) · engine settings: the engine's own
  cuda_module_loading lazy (CUDA >= 11.7; eager: a context past 1 GiB on V100/Ampere)
  zero_grad none (torch >= 2.0; zeros: torch < 2.0 keeps zeroed gradients between steps)
  optimizer_impl foreach (for-loop: torch foreach=False; hf: transformers 4.x's AdamW)
  torch_version today's (1.10: softmax saves its input, eager kernels, zeroed gradients,
         no SDPA; each default the release implies yields to a field set explicitly)
  transformers_version 5.24.0 (5.17.0: Mamba2's torch scan keeps broadcast products)
  optimizer_in_backward false · activation_offload none · compile false (train techniques)
  reference_model none (frozen/precomputed: a DPO step, batch = pairs) · packing false (train)
  kbit_prepare false (train with peft: PEFT's prepare_model_for_kbit_training not called, as
         in TRL >= 0.27 and axolotl; true: 16-bit weights in fp32, checkpointing full)
  checkpoint_reentrant false (full checkpointing non-reentrant: transformers 5.24, Trainer,
         TRL; true when kbit_prepare turns checkpointing on: PEFT passes no use_reentrant)
  parallel: 1 GPU (dp = gpus / (tp × pp × cp) when only --gpus is given), zero 0, no offload
  gpu none: every figure is still computed, with the overheads of the default device,
         and `fit` is null
  reserve 0: GiB kept free for other applications (--reserve 2), off the GPU's capacity
  host_ram unknown: not read from this machine (the job may run on another); --host-ram 64
         or --host-ram auto (this machine's MemAvailable) drops advice needing more
  allocator PyTorch's defaults (--alloc-conf expandable_segments:True, in the syntax of
         PYTORCH_CUDA_ALLOC_CONF: the step is replayed through the caching allocator)

Diffusion pipelines (MODEL a directory or Hub repo with model_index.json; only the models'
config.json files are fetched): one image-generation call,
phase by phase (text encoders, denoiser forward, VAE decode); --width/--height 1024, --batch
images per call, --precision bf16, --cfg on (Flux off), --offload none|model|sequential,
--vae-tiling, --vae-slicing, --drop-t5 (SD3); docs/diffusion.md.
  vramscope estimate black-forest-labs/FLUX.1-dev --width 1024 --height 768 --gpu rtx4090-24gb --offload model

A job file (--job job.json or job.toml) holds the contract's job fields; flags given beside it
override its fields and MODEL overrides its model. Numbers may be written as 8, 8.0 or 7.5e9.
A flag given twice takes its last value, so advice's flags can be appended to the command.

Advice: when the job does not fit its GPU (or with --advise), the cheapest combinations of
savings that fit (precision, optimizer, LoRA/QLoRA, recomputation, micro-batch with
accumulation, ZeRO/FSDP/TP over the GPUs given, offload; for inference KV dtype, weight
quantization, engine settings, batch, context) are listed as the flags to add, cheapest first
in what they give up: nothing < a little speed < much speed < a little quality < host RAM <
quality < what is trained (LoRA, QLoRA) (the table: crates/core/src/advice/techniques.rs).
Every entry and what-if row is a set of flags the tool accepts (no accumulation with
--optimizer-in-backward, no DeepSpeed rows for a job that steps in backward). A full
fine-tune's list also holds the cheapest entry that trains every weight with its states on the
GPU (paged optimizers, --optimizer-in-backward, pure bf16, recomputation), one past the three
when the cheapest train adapters or offload; entries needing more host RAM than --host-ram
(offloaded states, paged states beyond the GPU's free memory) are not offered.

Time (on a GPU whose speeds the catalog has): `throughput` is the modelled step (step time,
its forward_s, backward_s and optimizer_s, each the longer of the GPU's work and the host's
kernel launches; bound: launch, compute, memory, communication or offload; tokens/s per GPU,
MFU, its parts; task rl adds generation_s). cost_per_million_tokens uses
--price-per-gpu-hour, else a built-in on-demand list (Lambda, read 2026-09-20) for the GPUs it
prices; price_per_gpu_hour and price_source say which. The what-if table's `time` column (JSON:
each row's step_time_s and time_cost) is the change's time per token against the job's: +0.33
is a third more time per token, negative is faster (docs/step-time.md).

Exit codes: 0 success; 1 with --require-fit when the job does not fit its GPU; 2 bad input
(one line on stderr naming the field or file).

Examples:
  vramscope estimate llama-3.1-8b --task train --batch 1 --seq 4096 --gpu h100-80gb
  vramscope estimate mistral-7b-v0.1 --qlora 16 --gpu rtx4090-24gb
  vramscope estimate llama-3.1-70b --framework deepspeed --zero 3 --gpus 8 --gpu a100-80gb
  vramscope estimate qwen2.5-7b --task infer --batch 16 --seq 1024 --new-tokens 512
  vramscope estimate --job job.toml --batch 4 --json | jq .per_gpu.peaks.peak_allocated
  vramscope estimate gpt2 --gpu t4-16gb --require-fit && echo fits";

const VALIDATE_HELP: &str = "\
Each case's job runs through the estimator in this process; its metric (a dotted path into the
Report, or `sum:` of `+`-separated paths; a missing or null value is a failure) is compared
with expected_bytes: a case passes when |got - expected| / expected <= its tolerance.
The last lines say `N passed, M failed` (`, K errored` when some did not run) and the median
and worst |error| over the cases that ran. Exit 0 whenever the file could be read (the
result is a report), 2 when it cannot.

Examples:
  vramscope validate ../shared/validation/dev-cases.json
  vramscope validate cases.json --tolerance-only
  vramscope validate cases.json --json | jq .summary";

#[derive(Debug, Parser)]
#[command(name = "vramscope", version, about = ABOUT, after_help = EXAMPLES, args_override_self = true)]
pub struct Cli {
    /// When to use colours (NO_COLOR and non-terminal output turn them off under `auto`).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,

    /// Fetch a Hub model's config and headers again instead of using vramscope's cache.
    #[arg(long, global = true)]
    pub refresh: bool,

    /// Print each Hub request and the bytes it transferred on stderr.
    #[arg(long, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Estimate a job's GPU memory: a breakdown by category, the fit, and one picture.
    #[command(after_help = ESTIMATE_HELP)]
    Estimate {
        #[command(flatten)]
        job: Box<JobArgs>,
        #[command(flatten)]
        diffusion: Box<crate::commands::estimate_pipeline::DiffusionArgs>,
        /// Print the report as JSON (the contract's Report, exactly).
        #[arg(long)]
        json: bool,
        /// Exit 1 when the job does not fit its GPU (needs --gpu or a job file's gpu; exit 2
        /// without one). For scripts.
        #[arg(long)]
        require_fit: bool,
        /// Also write the report as a self-contained SVG picture to FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Also write the report as a self-contained HTML page (picture + tables) to FILE.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Search the cheapest changes that make the job fit even when it already fits (they
        /// are searched whenever it does not): the report's `advice`.
        #[arg(long)]
        advise: bool,
    },
    /// Find the largest micro-batch and sequence (train) or batch and context (infer) that fit
    /// a GPU, by searching the estimator.
    #[command(after_help = "\
Examples:
  vramscope fit llama-3.1-8b --gpu h100-80gb --seq 4096
  vramscope fit llama-3.1-8b --gpu l40s-48gb --task infer --seq 8192 --batch 16
  vramscope fit mistral-7b-v0.1 --gpu a100-80gb --lora 16 --json
  vramscope fit --job job.json --measured snapshot.pickle --gpu h100-80gb

train → {\"max_batch\": n, \"max_seq\": n}: the largest micro-batch at --seq, and the longest
sequence at --batch; infer → {\"max_batch\": n, \"max_context\": n}. A limit is the largest
value whose device total (what nvidia-smi shows) fits the GPU's capacity; searches stop at the
model's maximum positions; null where even 1 does not fit. throughput_at_max_batch is the
modelled step at the largest batch (the Report's `throughput` there; null without speeds).")]
    Fit {
        #[command(flatten)]
        job: Box<JobArgs>,
        #[command(flatten)]
        diffusion: Box<crate::commands::estimate_pipeline::DiffusionArgs>,
        /// Calibrate with a measured run of this job (snapshot pickle or profiler timeline, as
        /// for `analyze`): its per-category residual against the estimate is carried into the
        /// search. The job's batch and sequence must be those of the measured run.
        #[arg(long, value_name = "FILE")]
        measured: Option<PathBuf>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search parallel layouts (dp × tp × pp × cp × ep, ZeRO / FSDP, recomputation, offload,
    /// micro-batch) for a training job on N GPUs; list those that fit, ranked.
    #[command(after_help = "\
Examples:
  vramscope plan llama-3.1-70b --gpu h100-80gb --gpus 16 --seq 4096
  vramscope plan mixtral-8x7b --gpu a100-80gb --gpus 8 --json

Ranking: least recomputation (none < selective 2.7 % < full 1/3 of a step), then the smallest
pipeline bubble (p − 1)/m, then the smallest tensor-parallel degree, then the least communication (ZeRO-3 1.5× DDP; offload adds the
PCIe round trip), then the largest micro-batch. Every layout is screened with closed-form
arithmetic on the model's own coefficients (LoRA/QLoRA: the frozen base, quantized where
asked, without gradients or optimizer states; fp32 adapters with both); the top three, and the
best layout of each framework, are confirmed by the full step simulation. The screen agrees
with the simulation within 10 % of the GPU's capacity (crates/core/tests/plan_agreement.rs):
a layout inside that margin is not settled until confirmed. host/GPU is the host RAM offload
needs per GPU.")]
    Plan {
        #[command(flatten)]
        job: Box<JobArgs>,
        /// Largest micro-batch to try.
        #[arg(long, default_value_t = 64)]
        max_micro_batch: u64,
        /// How many layouts to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Score the estimator against a validation cases file (../shared/validation format).
    #[command(after_help = VALIDATE_HELP)]
    Validate {
        /// A JSON list of {id, job, metric, expected_bytes, tolerance, ...}.
        file: PathBuf,
        /// Print the per-case results and the summary as JSON.
        #[arg(long)]
        json: bool,
        /// List only the cases outside their tolerance (or that did not run); the summary
        /// still counts every case.
        #[arg(long)]
        tolerance_only: bool,
        /// Exit 0 even when cases fail (a report only); by default a case outside its
        /// tolerance or one that did not run makes the command exit 1, for CI.
        #[arg(long)]
        report_only: bool,
    },
    /// Show a model's parameters: totals, per component, per dtype, per layer, every tensor.
    #[command(after_help = "\
Examples:
  vramscope inspect gpt2
  vramscope inspect mixtral-8x7b --layers
  vramscope inspect ../shared/fixtures/hf_tiny_llama --tensors
  vramscope inspect qwen2.5-7b --json | jq .model")]
    Inspect {
        /// Preset id, Hugging Face Hub repo (ORG/NAME[@REV], hf://..., its URL, ORG/NAME:QUANT),
        /// config.json, model directory, .safetensors or .gguf; a diffusers pipeline (a
        /// directory or Hub repo with model_index.json) lists its models
        /// (docs/diffusion-and-weight-formats.md).
        model: String,
        /// Read an unknown family as a Llama-style decoder even when its config changes the
        /// shapes (refused otherwise).
        #[arg(long)]
        assume_llama: bool,
        /// Print the report as JSON (the contract's `{"model": ..., "tensors": [...]}`).
        #[arg(long)]
        json: bool,
        /// List every layer instead of a summary of the first and last.
        #[arg(long)]
        layers: bool,
        /// List every tensor with its shape, dtype and bytes.
        #[arg(long)]
        tensors: bool,
    },
    /// List the built-in model presets.
    Models {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the GPU catalog: capacity as the device reports it, with the source.
    Gpus {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the local web UI and the JSON API (POST /api/estimate, /api/fit, /api/inspect,
    /// /api/picture, /api/whatif; GET /api/models, /api/gpus).
    #[command(after_help = "\
Examples:
  vramscope serve                     http://127.0.0.1:8765/
  vramscope serve --port 0            any free port (printed on the first line)
  curl -s localhost:8765/api/estimate -d '{\"model\": \"gpt2\", \"batch\": 8}'

Listens on 127.0.0.1 unless --bind names another address. Bodies are limited to 1 MiB and
requests to 30 s.")]
    Serve {
        /// TCP port (0 = any free port).
        #[arg(long, default_value_t = 8765)]
        port: u16,
        /// Address to listen on. Anything but loopback exposes the API to the network, where
        /// models must be presets or inline configs (no paths).
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// When bound beyond loopback, also fetch Hub models named by requests (off by default
        /// there; on a loopback bind Hub models are always fetched).
        #[arg(long)]
        allow_hub: bool,
    },
    /// Read a PyTorch memory record (CUDA snapshot pickle, profiler memory timeline, Chrome
    /// trace) and say where every byte went at the peak, by the estimate's categories.
    #[command(after_help = "\
Examples:
  vramscope analyze snapshot.pickle           torch.cuda.memory._dump_snapshot() output
  vramscope analyze timeline.json.gz --json   prof.export_memory_timeline(...) output
  vramscope analyze trace.json                prof.export_chrome_trace(...) ([memory] events)
  vramscope analyze vllm.log                  a vLLM / llama.cpp / ollama start-up log
  pbpaste | vramscope analyze -               PyTorch's \"CUDA out of memory\" message

A snapshot with an allocation trace is also replayed through the caching-allocator model:
`allocator` in --json (replayed peak reserved, fragmentation, and the peak reserved under
expandable_segments:True and max_split_size_mb:128/512), and one line when
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would have reserved less (docs/analyze.md).

Recording a step with phase markers: docs/recorder.md. Exit 2 with one line on a file that
cannot be read.")]
    Analyze {
        /// The record: .pickle (protocol 2-5, torch 1.13 to 2.x), .json, .json.gz, .raw.json.gz;
        /// or a vLLM / llama.cpp / ollama log or PyTorch's OOM message (`-` reads stdin).
        file: PathBuf,
        /// Print {"per_gpu": ..., "timeline": [...], ...} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put an estimate and a measurement side by side, per category, and explain the residual.
    #[command(after_help = "\
Examples:
  vramscope compare --job job.json snapshot.pickle
  vramscope compare --job job.toml timeline.json.gz --json
  vramscope compare gpt2 --batch 4 --seq 512 snapshot.pickle     the estimate's flags

The job is given as to `estimate`: MODEL and its flags, --job FILE, --from FILE, or both (flags
override the file). With a single positional it is the measurement.")]
    Compare {
        /// The job that was measured: MODEL, the estimate's flags, --job / --from files.
        #[command(flatten)]
        job: Box<JobArgs>,
        /// The measurement (as for `analyze`).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Watch GPU memory live through NVML (what nvidia-smi shows): a process, a command, or
    /// every GPU; the peak and when it happened at the end.
    #[command(after_help = "\
Examples:
  vramscope watch -- python train.py --batch 16     run it, watch it, exit with its code
  vramscope watch --pid 4242 --interval 200         until the process exits
  vramscope watch                                   all GPUs' used memory, until Ctrl-C

A process's bytes include its children (a launcher's Python child). Needs the NVIDIA driver's
libnvidia-ml.so.1 at run time; without it, one line and exit 2.")]
    Watch {
        /// The process to watch (with its children).
        #[arg(long, conflicts_with = "command")]
        pid: Option<u32>,
        /// Milliseconds between samples (at least 20).
        #[arg(long, value_name = "MS", default_value_t = 500)]
        interval: u64,
        /// Print only the summary, as JSON.
        #[arg(long)]
        json: bool,
        /// A command to start and watch until it exits.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell to generate for.
        shell: clap_complete::Shell,
    },
}
