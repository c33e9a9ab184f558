//! A job from command-line flags and/or a job file (`--job FILE`, JSON or TOML). Every contract
//! job field (`../shared/contract.md`) has a flag; flags override the file, MODEL overrides the
//! file's model. Values are passed to `vramscope_core::job::Job` as written, so that the one
//! validator (`Job::resolve`) names the field in every error. The flags are declared here
//! (`JobArgs`); they are laid over the job by `args/fields.rs` (the job's own fields) and
//! `args/sections.rs` (`parallel`, `peft`, `engine`), RL's by `rlargs.rs`.

mod fields;
mod sections;

use clap::Args;
use std::path::PathBuf;
use vramscope_core::job::Job;

pub use super::error::{number_value, JobError};
pub use super::file::{parse_job_text, read_job_file};

/// The job flags shared by every command that takes a job.
#[derive(Debug, Clone, Default, Args)]
pub struct JobArgs {
    /// Preset id, Hugging Face Hub repo (ORG/NAME[@REV], hf://ORG/NAME, its URL,
    /// ORG/NAME:QUANT for GGUF), config.json, model directory, .safetensors or .gguf (overrides
    /// the job file's `model`).
    pub model: Option<String>,

    /// Read a model of a family vramscope does not know as a Llama-style decoder even when its
    /// config has expert, multimodal, hybrid or state-space fields (refused otherwise).
    #[arg(long)]
    pub assume_llama: bool,

    /// Read the job from a JSON or TOML file (by extension; otherwise JSON, then TOML). Flags
    /// given beside it override its fields.
    #[arg(long, value_name = "FILE")]
    pub job: Option<PathBuf>,

    /// A training framework's own config: DeepSpeed JSON, accelerate YAML, TrainingArguments
    /// JSON/YAML, axolotl, LLaMA-Factory, torchtune or TRL YAML (recognised by content).
    /// Repeatable; later files, then --job, then flags override earlier ones.
    #[arg(long = "from", value_name = "FILE")]
    pub from: Vec<PathBuf>,

    /// `train` (one optimizer step) or `infer` (serving / generation). [default: train]
    #[arg(long, help_heading = "Job")]
    pub task: Option<String>,
    /// Micro-batch per data-parallel rank (train) or concurrent sequences (infer). [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Job")]
    pub batch: Option<String>,
    /// Gradient-accumulation steps. [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Job")]
    pub grad_accum: Option<String>,
    /// Sequence length (train) or prompt length (infer). [default: min(2048, model maximum)]
    #[arg(long, allow_negative_numbers = true, help_heading = "Job")]
    pub seq: Option<String>,
    /// Infer: tokens generated per sequence (the KV cache holds seq + new tokens). [default: 0]
    #[arg(long, allow_negative_numbers = true, help_heading = "Job")]
    pub new_tokens: Option<String>,
    /// fp32, fp16, bf16, fp16-mixed, bf16-mixed. [default: bf16-mixed (train), bf16 (infer)]
    #[arg(long, help_heading = "Job")]
    pub precision: Option<String>,
    /// none, sgd, sgd-momentum, adam, adamw, adamw-fused, adamw-8bit, adafactor, lion,
    /// adamw-paged, adamw-8bit-paged (bitsandbytes' paged: states in unified memory).
    /// [default: adamw (train), none (infer)]
    #[arg(long, help_heading = "Job")]
    pub optimizer: Option<String>,
    /// Activation recomputation: none, selective, full. [default: none]
    #[arg(long, help_heading = "Job")]
    pub checkpointing: Option<String>,
    /// Attention kernel: eager, sdpa, flash. [default: sdpa]
    #[arg(long, help_heading = "Job")]
    pub attention: Option<String>,
    /// Frozen-weight storage: none, int8, nf4, fp4, nf4-dq, fp8, fp8:bN, fp8:row, mxfp4,
    /// ct:KIND:STRATEGY[:asym] (compressed-tensors: int4|int8|int8p|fp8, tensor|channel|gN|bRxC),
    /// bitnet, bitnet:unpacked, gptq:4, awq:4, gguf:TYPE.
    /// [default: none; nf4-dq with --qlora]
    #[arg(long, help_heading = "Job")]
    pub weights: Option<String>,
    /// pytorch, deepspeed, megatron, fsdp, vllm, llama.cpp. [default: pytorch]
    #[arg(long, help_heading = "Job")]
    pub framework: Option<String>,
    /// GPU id (`vramscope gpus`), or `none` for no fit check (overheads of the default device).
    /// [default: none]
    #[arg(long, help_heading = "Job")]
    pub gpu: Option<String>,
    /// Infer: KV-cache dtype fp16, bf16, fp8, int8, q4_0, q8_0, or `null` for the activation
    /// dtype. [default: null]
    #[arg(long, help_heading = "Job")]
    pub kv_dtype: Option<String>,
    /// Train: loss kernel `standard` (fp32 logits of every position), `chunked` (a fused
    /// linear cross-entropy such as Liger-Kernel's), `chunked-output` (torchtune's
    /// CEWithChunkedOutputLoss: 16-bit logits in 8 chunks, each upcast in turn) or `linear-ce`
    /// (torchtune's LinearCrossEntropyLoss: projection and cross-entropy per chunk of 8).
    /// [default: standard]
    #[arg(long, help_heading = "Job")]
    pub loss: Option<String>,
    /// CUDA module loading: `lazy` (CUDA ≥ 11.7, PyTorch ≥ 1.13) or `eager`
    /// (`CUDA_MODULE_LOADING=EAGER` and older stacks: every kernel loaded at init, a context
    /// past 1 GiB). [default: lazy]
    #[arg(long, help_heading = "Job")]
    pub cuda_module_loading: Option<String>,
    /// Train: what `zero_grad()` leaves between steps: `none` (torch ≥ 2.0's
    /// `set_to_none=True`) or `zeros` (`set_to_none=False`, the default before torch 2.0:
    /// gradients kept through the next forward and backward). [default: none]
    #[arg(long, help_heading = "Job")]
    pub zero_grad: Option<String>,
    /// Train: how the optimizer walks the parameters: `foreach` (torch's default on CUDA),
    /// `for-loop` (torch `foreach=False`) or `hf` (transformers 4.x's own AdamW,
    /// `optim="adamw_hf"`). [default: foreach]
    #[arg(long, help_heading = "Job")]
    pub optimizer_impl: Option<String>,
    /// The PyTorch release the job runs on, e.g. `1.10` or `2.4.1`: before 1.11 softmax also
    /// saves its input, before 1.13 kernels load eagerly, before 2.0 `zero_grad` keeps zeros
    /// and there is no SDPA (attention defaults to eager). [default: today's]
    #[arg(long, value_name = "X.Y", help_heading = "Job")]
    pub torch_version: Option<String>,
    /// The transformers release the job runs, e.g. `5.17.0`: its modelling code's saved
    /// tensors (Mamba2's torch chunked scan: broadcast products up to 5.17, einsum from 5.18);
    /// another release runs the nearest modelled one at or below. [default: 5.24.0]
    #[arg(long, value_name = "X.Y.Z", help_heading = "Job")]
    pub transformers_version: Option<String>,
    /// GiB to keep free on the GPU for other applications (a desktop, a second model), e.g.
    /// `2` or `1.5`: subtracted from capacity in the fit check and the searches. [default: 0]
    #[arg(
        long,
        value_name = "GIB",
        allow_negative_numbers = true,
        help_heading = "Job"
    )]
    pub reserve: Option<String>,
    /// GiB of host RAM the job may use, e.g. `64`, or `auto` for this machine's available
    /// memory (`MemAvailable` in /proc/meminfo): advice that needs more (CPU offload, paged
    /// states, llama.cpp layers on the CPU) is not offered. Not read from this machine unless
    /// asked, since the job may run elsewhere. [default: unknown]
    #[arg(long, value_name = "GIB", help_heading = "Job")]
    pub host_ram: Option<String>,
    /// PyTorch's caching-allocator settings in `PYTORCH_CUDA_ALLOC_CONF`'s own syntax, e.g.
    /// `expandable_segments:True` or `max_split_size_mb:512,garbage_collection_threshold:0.8`:
    /// the step is simulated through the allocator with them (reserved, nvidia-smi, the fit).
    /// An environment change for the job, not a flag of its script. [default: PyTorch's]
    #[arg(long, value_name = "CONF", help_heading = "Job")]
    pub alloc_conf: Option<String>,
    /// Train: run each parameter's optimizer step in its gradient hook, freeing the gradient
    /// at once (torchtune `optimizer_in_bwd`; no gradient accumulation). [default: off]
    #[arg(long, help_heading = "Job")]
    pub optimizer_in_backward: bool,
    /// Train: where saved activations live, `none` or `cpu` (pinned host memory, torchtune
    /// `enable_activation_offloading`; host bytes reported beside). [default: none]
    #[arg(long, value_name = "WHERE", help_heading = "Job")]
    pub activation_offload: Option<String>,
    /// Train: the model runs under `torch.compile` (inductor): pointwise chains are recomputed
    /// in backward instead of saved, as AOTAutograd's partitioner cuts them. [default: off]
    #[arg(long, help_heading = "Job")]
    pub compile: bool,
    /// Train: a DPO step (TRL DPOTrainer; --batch counts pairs, 2 x batch rows) with its
    /// reference model, `frozen` (a frozen copy of the weights, its no_grad forward after the
    /// policy's) or `precomputed` (TRL `precompute_ref_log_probs`); `none`: no DPO.
    /// [default: none]
    #[arg(long, value_name = "HOW", help_heading = "Job")]
    pub dpo_reference: Option<String>,
    /// Train: sequences packed into `seq`-token rows with position_ids, no padding (axolotl
    /// `sample_packing`, TRL `packing`, torchtune `packed`). [default: off]
    #[arg(long, help_heading = "Job")]
    pub packing: bool,
    /// Train with PEFT: the script calls PEFT's `prepare_model_for_kbit_training` (16-bit
    /// weights cast to fp32; with bitsandbytes/GPTQ weights `--checkpointing` defaults to
    /// full). TRL >= 0.27 and axolotl do not leave the cast. [default: off]
    #[arg(long, help_heading = "Job")]
    pub kbit_prepare: bool,
    /// Full checkpointing is torch's reentrant kind (`use_reentrant=True`): `true` or `false`.
    /// [default: false, as transformers 5.24, HF Trainer and TRL run it; true when
    /// `--kbit-prepare` turns checkpointing on]
    #[arg(long, value_name = "BOOL", help_heading = "Job")]
    pub checkpoint_reentrant: Option<String>,

    /// What one GPU costs per hour (any currency), e.g. `2.5`: the modelled cost per million
    /// trained tokens (`throughput.cost_per_million_tokens`).
    #[arg(long, value_name = "PRICE", help_heading = "Job")]
    pub price_per_gpu_hour: Option<String>,

    /// Vision-language models: images per sequence and their size, `COUNTxWIDTHxHEIGHT`
    /// (e.g. `2x1024x768`); their tokens (by the family's processor rule) add to --seq and the
    /// vision tower runs on them. Llama-3.2-Vision: one token per image, the image read by the
    /// cross-attention layers (4 tiles · 1601 vision tokens each, cached once in inference).
    #[arg(long, value_name = "NxWxH", help_heading = "Job")]
    pub images: Option<String>,

    /// Train: model components kept frozen, comma-separated: vision, projector, audio, language
    /// (e.g. `vision` — "freeze the vision tower"). LoRA targets may name a component too:
    /// `language:q_proj`.
    #[arg(long, value_name = "PARTS", help_heading = "Job")]
    pub freeze: Option<String>,

    /// Total GPUs (= dp × tp × pp × cp; dp is derived when only this is given). [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub gpus: Option<String>,
    /// Data-parallel degree. [default: gpus / (tp × pp × cp)]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub dp: Option<String>,
    /// Tensor-parallel degree. [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub tp: Option<String>,
    /// Pipeline-parallel degree. [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub pp: Option<String>,
    /// Sequence parallelism with TP (`--sp` or `--sp=false`). [default: false]
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", help_heading = "Parallel")]
    pub sp: Option<String>,
    /// Context-parallel degree. [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub cp: Option<String>,
    /// Expert-parallel degree (inside dp). [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub ep: Option<String>,
    /// ZeRO stage 0-3 (deepspeed), FSDP sharding 0/2/3, 1 = distributed optimizer (megatron).
    /// [default: 0]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub zero: Option<String>,
    /// CPU offload: none, optimizer, optimizer+params. [default: none]
    #[arg(long, help_heading = "Parallel")]
    pub offload: Option<String>,
    /// Micro-batches per optimizer step in the pipeline schedule (pp > 1). [default: 1]
    #[arg(long, allow_negative_numbers = true, help_heading = "Parallel")]
    pub microbatches: Option<String>,

    /// LoRA with this rank (trainable adapters over frozen weights). With --qlora, the later
    /// of the two counts (so advice's `--qlora 16` can be appended to a LoRA command line).
    #[arg(
        long,
        value_name = "RANK",
        allow_negative_numbers = true,
        overrides_with = "qlora",
        help_heading = "PEFT"
    )]
    pub lora: Option<String>,
    /// QLoRA with this rank (LoRA over nf4-dq weights unless --weights says otherwise).
    #[arg(
        long,
        value_name = "RANK",
        allow_negative_numbers = true,
        overrides_with = "lora",
        help_heading = "PEFT"
    )]
    pub qlora: Option<String>,
    /// LoRA alpha. [default: 2 × rank]
    #[arg(
        long,
        value_name = "ALPHA",
        allow_negative_numbers = true,
        help_heading = "PEFT"
    )]
    pub lora_alpha: Option<String>,
    /// Comma-separated target modules. [default: q_proj,k_proj,v_proj,o_proj]
    #[arg(
        long,
        value_name = "MODULES",
        value_delimiter = ',',
        help_heading = "PEFT"
    )]
    pub lora_targets: Option<Vec<String>>,
    /// Comma-separated modules trained in full beside the adapters (PEFT `modules_to_save`,
    /// axolotl `lora_modules_to_save`), e.g. `embed_tokens,lm_head`. [default: none]
    #[arg(
        long,
        value_name = "MODULES",
        value_delimiter = ',',
        help_heading = "PEFT"
    )]
    pub lora_modules_to_save: Option<Vec<String>>,
    /// Dtype of the LoRA adapters, their gradients and optimizer states: fp32 (PEFT's
    /// autocast_adapter_dtype=True), bf16 or fp16 (torchtune's adapters in the recipe's dtype;
    /// PEFT with autocast_adapter_dtype=False over a 16-bit base). [default: fp32]
    #[arg(long, value_name = "DTYPE", help_heading = "PEFT")]
    pub lora_dtype: Option<String>,
    /// LoRA dropout before lora_A (0 saves no copy of the adapted inputs). [default: 0.05]
    #[arg(
        long,
        value_name = "P",
        allow_negative_numbers = true,
        help_heading = "PEFT"
    )]
    pub lora_dropout: Option<String>,

    /// vLLM: fraction of GPU memory the engine may take. [default: 0.9]
    #[arg(
        long,
        value_name = "FRACTION",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub gpu_memory_utilization: Option<String>,
    /// SGLang: share of free memory for weights and the KV pool. [default: SGLang's for the GPU]
    #[arg(
        long,
        value_name = "FRACTION",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub mem_fraction_static: Option<String>,
    /// Engine: longest context per sequence (SGLang --context-length, ollama num_ctx).
    /// [default: the model's maximum; ollama's by GPU memory]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub max_model_len: Option<String>,
    /// vLLM: tokens per scheduler step. [default: the engine's]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub max_num_batched_tokens: Option<String>,
    /// vLLM: KV-cache block size in tokens. [default: 16]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub block_size: Option<String>,
    /// llama.cpp -ngl, ollama num_gpu: layers offloaded to the GPU. [default: all; ollama: the
    /// most that fit]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub n_gpu_layers: Option<String>,
    /// llama.cpp, ollama: host RAM's bandwidth in GB/s, at which the layers left on the CPU are
    /// read per token. [default: 89.6, dual-channel DDR5-5600]
    #[arg(
        long,
        value_name = "GB/S",
        allow_negative_numbers = true,
        help_heading = "Engine"
    )]
    pub host_memory_gbps: Option<String>,
    /// PyTorch inference: the KV cache of Hugging Face generate, dynamic or static
    /// (`cache_implementation="static"`: prompt + new tokens preallocated). [default: dynamic]
    #[arg(long, value_name = "dynamic|static", help_heading = "Engine")]
    pub kv_cache: Option<String>,

    /// `--task rl`: the RL step's flags (`rlargs.rs`).
    #[command(flatten)]
    pub rl: super::rlargs::RlArgs,
}

impl JobArgs {
    /// The job these flags describe: the job file (if any) with every given flag laid over it.
    pub fn to_job(&self) -> Result<Job, JobError> {
        let mut job = match &self.job {
            Some(path) => read_job_file(path)?,
            None => Job::default(),
        };
        super::from::lay_under(&mut job, &self.from)?;
        self.apply(&mut job)?;
        Ok(job)
    }

    /// Lays the given flags over `job`: its own fields, then the parallel layout, the PEFT
    /// method and the engine settings.
    pub fn apply(&self, job: &mut Job) -> Result<(), JobError> {
        self.apply_fields(job)?;
        self.apply_parallel(job)?;
        self.apply_peft(job)?;
        self.apply_engine(job)?;
        self.rl.apply(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    /// `--alloc-conf` is the variable's own syntax, resolved into the job's `allocator`.
    #[test]
    fn alloc_conf_flag_sets_the_allocator() {
        let args = JobArgs {
            alloc_conf: Some("expandable_segments:True,max_split_size_mb:256".into()),
            ..JobArgs::default()
        };
        let r = args.to_job().unwrap().resolve(None).unwrap();
        assert!(r.allocator.expandable_segments);
        assert_eq!(r.allocator.max_split_size_mb, Some(256));
        let bad = JobArgs {
            alloc_conf: Some("expandable_segments:maybe".into()),
            ..JobArgs::default()
        };
        let e = bad.to_job().unwrap().resolve(None).unwrap_err().to_string();
        assert!(e.starts_with("allocator"), "{e}");
    }

    /// `--kv-cache static` is `engine.cache: "static"` (a string, as written); a serving engine
    /// refuses it in one line naming the setting.
    #[test]
    fn kv_cache_flag_sets_the_engines_cache() {
        let args = JobArgs {
            task: Some("infer".into()),
            kv_cache: Some("static".into()),
            ..JobArgs::default()
        };
        let job = args.to_job().unwrap();
        assert_eq!(job.engine, Some(json!({"cache": "static"})));
        assert!(job.resolve(None).unwrap().engine.static_cache());
        let vllm = JobArgs {
            framework: Some("vllm".into()),
            ..args
        };
        let e = vllm
            .to_job()
            .unwrap()
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("engine.cache"), "{e}");
    }

    /// `--zero-grad` and `--optimizer-impl` set the job's fields as written.
    #[test]
    fn training_loop_flags() {
        let args = JobArgs {
            zero_grad: Some("zeros".into()),
            optimizer_impl: Some("for-loop".into()),
            ..JobArgs::default()
        };
        let job = args.to_job().unwrap();
        assert_eq!(
            (job.zero_grad.as_deref(), job.optimizer_impl.as_deref()),
            (Some("zeros"), Some("for-loop"))
        );
        assert!(job.resolve(None).is_ok());
    }

    /// `--torch-version 1.10` is kept as written (a string: `1.10` as a number would read
    /// 1.1) and turns on the defaults of that release: eager module loading, zeroed gradients,
    /// eager attention (PyTorch 1.10 has no SDPA).
    #[test]
    fn torch_version_flag() {
        let args = JobArgs {
            torch_version: Some("1.10".into()),
            ..JobArgs::default()
        };
        let job = args.to_job().unwrap();
        assert_eq!(job.torch_version, Some(json!("1.10")));
        let r = job.resolve(None).unwrap();
        assert_eq!(r.torch_version.unwrap().to_string(), "1.10");
        assert_eq!(r.zero_grad.as_str(), "zeros");
        assert_eq!(r.cuda_module_loading.as_str(), "eager");
        assert_eq!(r.attention.as_str(), "eager");
    }

    #[test]
    fn numbers_pass_through_as_json_numbers() {
        assert_eq!(number_value("8"), json!(8));
        assert_eq!(number_value("-1"), json!(-1));
        assert_eq!(number_value("7.5e9"), json!(7.5e9));
        assert_eq!(number_value("eight"), json!("eight"));
    }

    #[test]
    fn toml_and_json_read_the_same_job() {
        let j = parse_job_text(
            r#"{"model": "gpt2", "batch": 4, "parallel": {"gpus": 8, "zero": 3}}"#,
            Some("json"),
        )
        .unwrap();
        let t = parse_job_text(
            "model = \"gpt2\"\nbatch = 4\n[parallel]\ngpus = 8\nzero = 3\n",
            None,
        )
        .unwrap();
        assert_eq!(j, t);
        let e = parse_job_text("batchh = 4\n", Some("toml")).unwrap_err();
        assert!(e.contains("batchh") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn gpus_flag_replaces_a_files_dp() {
        let mut job: Job =
            serde_json::from_value(json!({"parallel": {"gpus": 4, "dp": 4, "zero": 2}})).unwrap();
        let args = JobArgs {
            gpus: Some("8".into()),
            ..Default::default()
        };
        args.apply(&mut job).unwrap();
        assert_eq!(job.parallel, Some(json!({"gpus": 8, "zero": 2})));
    }

    #[test]
    fn lora_details_need_a_method() {
        let args = JobArgs {
            lora_alpha: Some("16".into()),
            ..Default::default()
        };
        let e = args.apply(&mut Job::default()).unwrap_err().to_string();
        assert!(e.starts_with("peft:"), "{e}");
        let args = JobArgs {
            qlora: Some("8".into()),
            lora_targets: Some(vec!["q_proj".into(), "v_proj".into()]),
            ..Default::default()
        };
        let mut job = Job::default();
        args.apply(&mut job).unwrap();
        assert_eq!(
            job.peft,
            Some(json!({"method": "qlora", "rank": 8, "targets": ["q_proj", "v_proj"]}))
        );
    }
}
