//! The job: what is being run, how, and on what. Field names and values are the contract's
//! (`../shared/contract.md`); `Job` is what a user writes (every field optional), `ResolvedJob`
//! has every default filled in and every value checked.

use crate::error::CoreError;
pub mod allocator;
pub mod engine_settings;
mod fields;
mod kv_dtype;
mod parallel;
mod peft;
mod rl;
mod spelled;
mod techniques;
mod torch_version;
mod transformers_version;
mod vision;
pub mod weight_format;

pub use fields::whole_number;
pub use parallel::Parallel;
pub use peft::{Peft, DEFAULT_DROPOUT as DEFAULT_LORA_DROPOUT, LLAMA_LINEARS};
pub use rl::{Generator, Rl};
pub use spelled::{Spelled, Weights};
pub use techniques::{kbit_casts, kbit_checkpoints, ActivationOffload, ReferenceModel, Techniques};

pub use engine_settings::{EngineSettings, GenerateCache};
use fields::{choice, count, reserve_bytes, text};
pub use kv_dtype::KvDtype;
use parallel::parse_parallel;
use peft::parse_peft;
use rl::parse_rl;
use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use torch_version::TorchVersion;
pub use transformers_version::{release_note, TransformersVersion};
pub use weight_format::WeightFormat;

/// A job as written: JSON/TOML or CLI flags. Absent fields take the framework's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Preset id or path (string), `{"hf_config": {...}}`, or `{"params": N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_accum: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpointing: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peft: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_dtype: Option<Value>,
    /// train: how the loss is computed — `standard` (transformers: fp32 logits and
    /// log-softmax of every position) or `chunked` (a fused linear cross-entropy such as
    /// Liger-Kernel's: logits made and differentiated chunk by chunk). An extension of the
    /// contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
    /// Read a model whose family vramscope does not know as a Llama-style decoder even when its
    /// config has fields that change the shapes (experts, sub-configs, hybrid or state-space
    /// layers); such models are refused otherwise. An extension of the contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assume_llama: Option<bool>,
    /// `lazy` (default: CUDA ≥ 11.7 with PyTorch ≥ 1.13 loads kernels on first use) or `eager`
    /// (`CUDA_MODULE_LOADING=EAGER`, and the stacks before lazy loading: every kernel loaded at
    /// init, a larger CUDA context). Contract field `cuda_module_loading`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_module_loading: Option<String>,
    /// train: what `zero_grad()` leaves between steps — `none` (default: torch ≥ 2.0's
    /// `set_to_none=True`, gradients freed) or `zeros` (`set_to_none=False`, the default before
    /// torch 2.0: gradients zeroed in place and kept through the next forward and backward).
    /// An extension of the contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_grad: Option<String>,
    /// train: how the optimizer walks the parameters — `foreach` (default: torch's choice on
    /// CUDA, one list operation over all of them), `for-loop` (torch's `foreach=False`: one
    /// parameter at a time) or `hf` (transformers 4.x's own `AdamW`, the Trainer's
    /// `optim="adamw_hf"`: one parameter at a time, one temporary each). An extension of the
    /// contract's job; `adamw-fused` stays the contract's `optimizer` value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_impl: Option<String>,
    /// The PyTorch release the job runs on (`"1.10"`, `"2.4.1+cu121"`): unset = today's. Older
    /// releases change the defaults of `cuda_module_loading` and `zero_grad` and what softmax
    /// saves (`job/torch_version.rs`). An extension of the contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<Value>,
    /// The transformers release the job runs (`"5.17.0"`): unset = 5.24.0, the release
    /// vramscope models. Older releases' modelling code saves other tensors in a few blocks
    /// (`job/transformers_version.rs`). An extension of the contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformers_version: Option<Value>,
    /// Bytes the user keeps free on the GPU for other applications (a desktop, a second
    /// model): an integer or float JSON number, default 0; subtracted from capacity in the fit
    /// check and `fit`'s searches. Contract field `reserve` (CLI `--reserve GIB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<Value>,
    /// Bytes of host RAM the job may use (contract `host_ram`, CLI `--host-ram GIB`); absent or
    /// null = unknown. Advice that needs more host RAM than this is not offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ram: Option<Value>,
    /// `true`: each parameter's optimizer step runs in its gradient hook (torchtune
    /// `optimizer_in_bwd`). Contract field `optimizer_in_backward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_in_backward: Option<Value>,
    /// `none` or `cpu` (torchtune `enable_activation_offloading`). Contract field
    /// `activation_offload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_offload: Option<Value>,
    /// `true`: the model runs under `torch.compile` (inductor). Contract field `compile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<Value>,
    /// train: `none` (default), `frozen` (a DPO reference model: a frozen copy of the weights,
    /// run under no_grad) or `precomputed` (TRL `precompute_ref_log_probs`). An extension of
    /// the contract's job (`rl.reference_model` is the RL step's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_model: Option<Value>,
    /// train: `true` when sequences are packed into `seq`-token rows with `position_ids`
    /// (axolotl `sample_packing`, TRL `packing`, torchtune `packed`). An extension of the
    /// contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packing: Option<Value>,
    /// train with `peft`: `true` when the script calls PEFT's `prepare_model_for_kbit_training`
    /// before `get_peft_model` (the 16-bit weights cast to fp32, and with bitsandbytes or GPTQ
    /// weights gradient checkpointing on: `checkpointing` then defaults to `full`). Default
    /// `false`: TRL's `SFTTrainer` from 0.27 and axolotl's LoRA/QLoRA loader leave no fp32
    /// copies (`job/techniques.rs`). An extension of the contract's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kbit_prepare: Option<Value>,
    /// train with `checkpointing: full`: `true` when the checkpoint is torch's reentrant one
    /// (`gradient_checkpointing_kwargs={"use_reentrant": True}`, or PEFT's
    /// `prepare_model_for_kbit_training` turning checkpointing on with no Trainer turning it on
    /// again). Default `false` (transformers 5.24, HF Trainer, TRL `SFTTrainer`), `true` when
    /// `kbit_prepare` sets `checkpointing` (`job/techniques.rs`). An extension of the contract's
    /// job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_reentrant: Option<Value>,
    /// `task: "rl"`: the RL step's algorithm, reference model, generator, generations and
    /// lengths (contract field `rl`, `job/rl.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rl: Option<Value>,
    /// What one GPU costs per hour (any currency), for the step-time model's cost per million
    /// tokens (`throughput.cost_per_million_tokens`; CLI `--price-per-gpu-hour`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<Value>,
    /// Vision-language models: the images of each sequence, `{"count", "width", "height"}`
    /// (contract field `images`; `job/vision.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Value>,
    /// PyTorch's caching-allocator settings (contract field `allocator`): an object
    /// `{"expandable_segments", "max_split_size_mb", "garbage_collection_threshold",
    /// "roundup_power2_divisions"}` or a string in `PYTORCH_CUDA_ALLOC_CONF`'s own syntax
    /// (`"expandable_segments:True,max_split_size_mb:512"`); default PyTorch's defaults
    /// (`job/allocator.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<Value>,
    /// Model components kept frozen in training: `["vision"]`, `["vision", "projector"]`
    /// (`job/vision.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeze: Option<Value>,
    /// How the job was assembled from training configs (`--from`, the API's `"from"`): one line
    /// per file and remark, shown first among the Report's warnings. Not a job field.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Declares a string-valued job enum with its contract spellings.
macro_rules! job_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant,)* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// Parses the contract spelling; the error names the field and the accepted values.
            pub fn parse(field: &str, s: &str) -> Result<Self, CoreError> {
                let key = s.trim().to_ascii_lowercase();
                match key.as_str() {
                    $($text => Ok($name::$variant),)*
                    _ => {
                        let names: Vec<&str> = vec![$($text),*];
                        let hint = crate::gpu::suggestion(&key, names.iter().copied());
                        Err(CoreError::field(
                            field,
                            format!("'{s}' is not one of {}{hint}", names.join(", ")),
                        ))
                    }
                }
            }
        }

        crate::serde_name::serde_by_name!($name, as_str);
    };
}

job_enum!(
    /// Training step or serving/generation.
    Task { Train = "train", Infer = "infer", Rl = "rl" }
);
job_enum!(
    /// Numeric format of weights, grads, states and activations (contract `precision`).
    Precision {
        Fp32 = "fp32",
        Fp16 = "fp16",
        Bf16 = "bf16",
        Fp16Mixed = "fp16-mixed",
        Bf16Mixed = "bf16-mixed",
    }
);
job_enum!(
    /// The optimizer (contract `optimizer`).
    Optimizer {
        None = "none",
        Sgd = "sgd",
        SgdMomentum = "sgd-momentum",
        Adam = "adam",
        AdamW = "adamw",
        AdamWFused = "adamw-fused",
        AdamW8bit = "adamw-8bit",
        Adafactor = "adafactor",
        Lion = "lion",
        AdamWPaged = "adamw-paged",
        AdamW8bitPaged = "adamw-8bit-paged",
    }
);
job_enum!(
    /// Activation recomputation (contract `checkpointing`).
    Checkpointing { None = "none", Selective = "selective", Full = "full" }
);
job_enum!(
    /// Attention kernel (contract `attention`).
    AttentionKernel { Eager = "eager", Sdpa = "sdpa", Flash = "flash" }
);
job_enum!(
    /// Whose allocation behaviour is modelled (contract `framework`).
    Framework {
        Pytorch = "pytorch",
        Deepspeed = "deepspeed",
        Megatron = "megatron",
        Fsdp = "fsdp",
        Vllm = "vllm",
        LlamaCpp = "llama.cpp",
        Sglang = "sglang",
        Ollama = "ollama",
    }
);
job_enum!(
    /// What is offloaded to CPU memory (contract `parallel.offload`).
    Offload { None = "none", Optimizer = "optimizer", OptimizerParams = "optimizer+params" }
);
job_enum!(
    /// How the training loss is computed: `standard` (the logits whole), `chunked` (Liger's
    /// fused linear cross-entropy: no logits), `chunked-output` (torchtune's
    /// `CEWithChunkedOutputLoss`: 16-bit logits in 8 chunks, each upcast in turn),
    /// `linear-ce` (torchtune's `LinearCrossEntropyLoss`: the ignored tokens masked out, the
    /// projection and an fp32 cross-entropy per chunk of 8 through autograd).
    LossKernel {
        Standard = "standard",
        Chunked = "chunked",
        ChunkedOutput = "chunked-output",
        LinearCe = "linear-ce",
    }
);
job_enum!(
    /// When CUDA loads kernels into the context (contract `cuda_module_loading`).
    CudaModuleLoading { Lazy = "lazy", Eager = "eager" }
);
job_enum!(
    /// What `zero_grad()` leaves between steps (job field `zero_grad`).
    ZeroGrad { None = "none", Zeros = "zeros" }
);
job_enum!(
    /// How the optimizer walks the parameters (job field `optimizer_impl`).
    OptimizerImpl { Foreach = "foreach", ForLoop = "for-loop", Hf = "hf" }
);
job_enum!(
    /// The RL algorithm (contract `rl.algorithm`).
    RlAlgorithm { Grpo = "grpo", Ppo = "ppo", Dpo = "dpo" }
);
job_enum!(
    /// Parameter-efficient fine-tuning method.
    PeftMethod { Lora = "lora", Qlora = "qlora" }
);
job_enum!(
    /// The dtype the LoRA adapters (A and B), their gradients and their optimizer states are
    /// kept in (job field `peft.adapter_dtype`). `fp32` is PEFT's default: `get_peft_model(...,
    /// autocast_adapter_dtype=True)` casts bf16/fp16 adapters to fp32 (peft
    /// `tuners/tuners_utils.py`, `_cast_adapter_dtype`). `bf16` / `fp16`: the adapters in the
    /// model's 16-bit dtype, as torchtune builds them (`LoRALinear`'s `lora_a`/`lora_b` are
    /// `nn.Linear` made under the recipe's `set_default_dtype(dtype)`;
    /// `recipes/lora_finetune_single_device.py` checks them with
    /// `validate_expected_param_dtype(adapter_params, dtype)`) and PEFT with
    /// `autocast_adapter_dtype=False` over a 16-bit base.
    AdapterDtype { Fp32 = "fp32", Bf16 = "bf16", Fp16 = "fp16" }
);

impl Precision {
    /// Bytes of one value in the compute dtype (activations).
    pub fn compute_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            _ => 2,
        }
    }

    /// Whether 16-bit compute runs over fp32 master weights.
    pub fn is_mixed(self) -> bool {
        matches!(self, Precision::Fp16Mixed | Precision::Bf16Mixed)
    }
}

/// `price_per_gpu_hour`: a positive finite JSON number, or absent.
fn price(v: Option<&Value>) -> Result<Option<f64>, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_f64().is_some_and(|x| x > 0.0 && x.is_finite()) => {
            Ok(n.as_f64())
        }
        Some(other) => Err(CoreError::field(
            "price_per_gpu_hour",
            format!("must be a positive number (got {other})"),
        )),
    }
}

/// `ResolvedJob::model` serialized as the value it shares.
fn serialize_shared<S: serde::Serializer>(
    v: &std::sync::Arc<Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    v.as_ref().serialize(s)
}

/// A job with every default filled in and every value checked: what the estimator reads and
/// what the report echoes as `job`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedJob {
    /// The job's `model` as written (a name, `{"params"}` or a whole inline `{"hf_config"}`),
    /// echoed by the report. Shared, not copied: the fit, advice and plan searches derive a
    /// job per candidate from one resolved job, and a classification config's inline JSON can
    /// be a megabyte (issue #35).
    #[serde(serialize_with = "serialize_shared")]
    pub model: std::sync::Arc<Value>,
    pub task: Task,
    pub batch: u64,
    pub grad_accum: u64,
    pub seq: u64,
    pub new_tokens: u64,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub checkpointing: Checkpointing,
    pub attention: AttentionKernel,
    pub peft: Option<Peft>,
    pub weights: Weights,
    pub framework: Framework,
    pub parallel: Parallel,
    pub engine: EngineSettings,
    pub gpu: Option<String>,
    pub kv_dtype: Option<Spelled<KvDtype>>,
    pub loss: LossKernel,
    pub cuda_module_loading: CudaModuleLoading,
    /// Echoed only when set: a job that does not set it reports as before.
    #[serde(skip_serializing_if = "ZeroGrad::is_default")]
    pub zero_grad: ZeroGrad,
    #[serde(skip_serializing_if = "OptimizerImpl::is_default")]
    pub optimizer_impl: OptimizerImpl,
    /// The PyTorch release, when given (echoed only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<TorchVersion>,
    /// The transformers release, when given (echoed only then; unset models 5.24.0, and the
    /// report's notes say which release where the estimate depends on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transformers_version: Option<TransformersVersion>,
    /// Bytes kept free for other applications (contract `reserve`).
    pub reserve: u64,
    /// Host RAM the job may use (contract `host_ram`); `None` = unknown. Echoed only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_ram: Option<u64>,
    /// Optimizer in backward, activation offloading, compile (echoed only when on).
    #[serde(flatten)]
    pub techniques: Techniques,
    /// The RL step (`task: "rl"` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rl: Option<Rl>,
    /// Price of one GPU-hour, when given (`throughput.cost_per_million_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    /// The images of each sequence (vision-language models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<crate::vision::Images>,
    /// Components frozen in training (vision-language models).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub freeze: Vec<crate::vision::Part>,
    /// The caching allocator's settings; echoed only when they differ from PyTorch's defaults.
    #[serde(skip_serializing_if = "allocator::is_default")]
    pub allocator: crate::allocator::AllocatorConfig,
    /// Positions the images add to each sequence (set by the estimator from the model's
    /// image-token rule; `seq` then counts them too). Not a job field.
    #[serde(skip_serializing_if = "is_zero")]
    pub image_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ResolvedJob {
    /// What the job may use of a GPU of `capacity` bytes: capacity − `reserve` (contract
    /// `reserve`: subtracted from capacity in `fit`).
    pub fn usable(&self, capacity: u64) -> u64 {
        capacity.saturating_sub(self.reserve)
    }

    /// Sets one engine setting as a user would write it, checked for the job's engine as in
    /// resolution.
    pub fn set_engine(&mut self, key: &str, v: Value) -> Result<(), CoreError> {
        self.engine.set(key, v, self.framework)
    }

    /// The checks [`Job::resolve`] makes across fields, again: a job changed after resolution
    /// (an advice combination, a what-if row) must be one the job's own fields would give.
    pub fn check_combination(&self) -> Result<(), CoreError> {
        if self.techniques.optimizer_in_backward {
            techniques::check_in_backward(self.grad_accum, self.framework.as_str())?;
        }
        techniques::check_reference(self.techniques.reference_model, self.task)
    }
}

/// Upper bounds on counts: beyond them no real job exists, and products of them stay far from
/// overflowing 64 bits (batch · seq · vocab · 4 < 2^64 needs each well under 2^21..2^32).
const MAX_BATCH: u64 = 1 << 24;
const MAX_SEQ: u64 = 1 << 26;
const MAX_GPUS: u64 = 1 << 20;
/// The case's `job` with each of its `job_if_supported` fields (`../shared/validation/README.md`)
/// that this build's job accepts, as `score.py`'s `job_for` merges them: the conditions a
/// measurement was taken under that older builds could not express. A field this build does
/// not know, or a value it rejects, is left out.
pub fn merge_if_supported(job: &Value, extra: Option<&Value>) -> Value {
    let mut out = job.clone();
    let (Value::Object(o), Some(Value::Object(extra))) = (&mut out, extra) else {
        return out;
    };
    for (k, v) in extra {
        let probe = Value::Object([(k.clone(), v.clone())].into_iter().collect());
        let accepted = serde_json::from_value::<Job>(probe)
            .ok()
            .is_some_and(|j| j.resolve(None).is_ok());
        if accepted {
            o.insert(k.clone(), v.clone());
        }
    }
    out
}

impl Job {
    /// The checkpointing in force and its kind: PEFT's `prepare_model_for_kbit_training` turns
    /// full checkpointing on where the job leaves `checkpointing` unset (`job/techniques.rs`
    /// `kbit_checkpoints`), and that checkpoint is torch's reentrant one unless the job says
    /// otherwise (`checkpoint_reentrant`; default `false` everywhere else).
    fn checkpoint_kind(
        &self,
        given: Checkpointing,
        weights: &weight_format::WeightFormat,
        techniques: Techniques,
    ) -> Result<(Checkpointing, Techniques), CoreError> {
        let by_prepare = self.checkpointing.is_none()
            && techniques::kbit_checkpoints(techniques.kbit_prepare, weights);
        let checkpointing = if by_prepare {
            Checkpointing::Full
        } else {
            given
        };
        let reentrant = match self.checkpoint_reentrant.as_ref() {
            None | Some(Value::Null) => by_prepare,
            given if checkpointing == Checkpointing::Full => {
                techniques::flag("checkpoint_reentrant", given)?
            }
            _ => {
                return Err(CoreError::field(
                    "checkpoint_reentrant",
                    format!(
                        "names the kind of full checkpointing, but the job's checkpointing is \
                         '{}': set checkpointing full or leave checkpoint_reentrant out",
                        checkpointing.as_str()
                    ),
                ))
            }
        };
        let techniques = Techniques {
            checkpoint_reentrant: reentrant,
            ..techniques
        };
        Ok((checkpointing, techniques))
    }

    /// Fills defaults and checks every field. `model_max_seq` is the model's maximum position
    /// count, used for the default sequence length.
    pub fn resolve(&self, model_max_seq: Option<u64>) -> Result<ResolvedJob, CoreError> {
        let task = choice("task", self.task.as_deref(), Task::parse, Task::Train)?;
        let framework = choice(
            "framework",
            self.framework.as_deref(),
            Framework::parse,
            Framework::Pytorch,
        )?;
        let default_seq = model_max_seq.map_or(2048, |m| m.clamp(1, 2048));
        let batch = count("batch", self.batch.as_ref(), 1, 1, MAX_BATCH)?;
        let grad_accum = count("grad_accum", self.grad_accum.as_ref(), 1, 1, MAX_BATCH)?;
        let seq = count("seq", self.seq.as_ref(), default_seq, 1, MAX_SEQ)?;
        let new_tokens = count("new_tokens", self.new_tokens.as_ref(), 0, 0, MAX_SEQ)?;
        let gpu = resolve_gpu(self.gpu.as_ref())?;
        let precision = self.resolve_precision(task, gpu.as_deref())?;
        let optimizer = match self.optimizer.as_deref() {
            Some(s) => Optimizer::parse("optimizer", s)?,
            None if task == Task::Infer => Optimizer::None,
            None => Optimizer::AdamW,
        };
        let checkpointing = choice(
            "checkpointing",
            self.checkpointing.as_deref(),
            Checkpointing::parse,
            Checkpointing::None,
        )?;
        let stack = self.resolve_stack()?;
        let peft = self.peft.as_ref().map(parse_peft).transpose()?.flatten();
        let weights = self.resolve_weights(peft.as_ref())?;
        let parallel = parse_parallel(self.parallel.as_ref())?;
        let kv_dtype = text("kv_dtype", self.kv_dtype.as_ref())?
            .map(|s| Ok::<_, CoreError>(Spelled::new(KvDtype::parse(s)?, s)))
            .transpose()?;
        let loss = choice(
            "loss",
            self.loss.as_deref(),
            LossKernel::parse,
            LossKernel::Standard,
        )?;
        let optimizer_impl = resolve_optimizer_impl(self.optimizer_impl.as_deref(), optimizer)?;
        let reserve = reserve_bytes(self.reserve.as_ref())?;
        let host_ram = fields::host_ram_bytes(self.host_ram.as_ref())?;
        let price_per_gpu_hour = price(self.price_per_gpu_hour.as_ref())?;
        let engine = EngineSettings::resolve(self.engine.as_ref(), framework)?;
        let techniques = self.resolve_techniques()?;
        if techniques.optimizer_in_backward {
            techniques::check_in_backward(grad_accum, framework.as_str())?;
        }
        techniques::check_reference(techniques.reference_model, task)?;
        techniques::check_kbit_prepare(techniques.kbit_prepare, task, peft.is_some())?;
        let (checkpointing, techniques) =
            self.checkpoint_kind(checkpointing, &weights.value, techniques)?;
        let rl = self.resolve_rl(task)?;
        let seq = self.rl_seq(rl.as_ref(), seq)?;
        Ok(ResolvedJob {
            model: std::sync::Arc::new(self.model.clone().unwrap_or(Value::Null)),
            task,
            batch,
            grad_accum,
            seq,
            new_tokens,
            precision,
            optimizer,
            checkpointing,
            attention: stack.attention,
            peft,
            weights,
            framework,
            parallel,
            engine,
            gpu,
            kv_dtype,
            loss,
            cuda_module_loading: stack.cuda_module_loading,
            zero_grad: stack.zero_grad,
            optimizer_impl,
            torch_version: stack.torch_version,
            transformers_version: text("transformers_version", self.transformers_version.as_ref())?
                .map(|s| TransformersVersion::parse("transformers_version", s))
                .transpose()?,
            reserve,
            host_ram,
            techniques,
            rl,
            price_per_gpu_hour,
            images: vision::parse_images(self.images.as_ref())?,
            freeze: vision::parse_freeze(self.freeze.as_ref())?,
            allocator: allocator::resolve(self.allocator.as_ref())?,
            image_tokens: 0,
        })
    }

    /// The fields whose defaults depend on the PyTorch release (`job/torch_version.rs`): the
    /// release itself, the attention kernel, CUDA's module loading and what `zero_grad` leaves.
    fn resolve_stack(&self) -> Result<Stack, CoreError> {
        let torch_version = text("torch_version", self.torch_version.as_ref())?
            .map(|s| TorchVersion::parse("torch_version", s))
            .transpose()?;
        let attention = choice(
            "attention",
            self.attention.as_deref(),
            AttentionKernel::parse,
            AttentionKernel::default_for(torch_version),
        )?;
        check_sdpa(torch_version, attention)?;
        Ok(Stack {
            torch_version,
            attention,
            cuda_module_loading: choice(
                "cuda_module_loading",
                self.cuda_module_loading.as_deref(),
                CudaModuleLoading::parse,
                CudaModuleLoading::default_for(torch_version),
            )?,
            zero_grad: choice(
                "zero_grad",
                self.zero_grad.as_deref(),
                ZeroGrad::parse,
                ZeroGrad::default_for(torch_version),
            )?,
        })
    }

    /// The techniques of issue 20, each off unless the job turns it on.
    fn resolve_techniques(&self) -> Result<Techniques, CoreError> {
        Ok(Techniques {
            optimizer_in_backward: techniques::flag(
                "optimizer_in_backward",
                self.optimizer_in_backward.as_ref(),
            )?,
            activation_offload: self
                .activation_offload
                .as_ref()
                .map_or(Ok(ActivationOffload::None), ActivationOffload::parse)?,
            compile: techniques::flag("compile", self.compile.as_ref())?,
            reference_model: self
                .reference_model
                .as_ref()
                .map_or(Ok(ReferenceModel::None), ReferenceModel::parse)?,
            packing: techniques::flag("packing", self.packing.as_ref())?,
            kbit_prepare: techniques::flag("kbit_prepare", self.kbit_prepare.as_ref())?,
            // Its default depends on the checkpointing `resolve` settles.
            checkpoint_reentrant: false,
        })
    }

    /// The step's `seq`: an RL step trains on prompt + completion tokens, and a `seq` the job
    /// also gives must agree with them.
    fn rl_seq(&self, rl: Option<&Rl>, seq: u64) -> Result<u64, CoreError> {
        let Some(r) = rl else { return Ok(seq) };
        let given = self.seq.as_ref().is_some_and(|v| !v.is_null());
        if given && seq != r.sequence_len() {
            return Err(CoreError::field(
                "seq",
                format!(
                    "task rl trains on rl.prompt_len + rl.completion_len = {} tokens (got {seq})",
                    r.sequence_len()
                ),
            ));
        }
        Ok(r.sequence_len())
    }

    /// `rl` for `task: "rl"` (every default filled in); an error for any other task.
    fn resolve_rl(&self, task: Task) -> Result<Option<Rl>, CoreError> {
        let written = self.rl.as_ref().filter(|v| !v.is_null());
        match (task, written) {
            (Task::Rl, v) => Ok(Some(parse_rl(v)?)),
            (_, None) => Ok(None),
            (t, Some(_)) => Err(CoreError::field(
                "rl",
                format!("is read for task rl only (the task is {})", t.as_str()),
            )),
        }
    }

    /// The job's precision, or the default: 16-bit for inference, mixed for training, bf16
    /// where the GPU has it. GPUs without bf16 (Volta, Turing: V100, T4) default to fp16, as
    /// users run them.
    fn resolve_precision(&self, task: Task, gpu: Option<&str>) -> Result<Precision, CoreError> {
        let bf16 = gpu
            .and_then(|g| crate::gpu::find(g).ok())
            .is_none_or(|g| g.bf16);
        Ok(match self.precision.as_deref() {
            Some(s) => Precision::parse("precision", s)?,
            None if task == Task::Infer && bf16 => Precision::Bf16,
            None if task == Task::Infer => Precision::Fp16,
            None if bf16 => Precision::Bf16Mixed,
            None => Precision::Fp16Mixed,
        })
    }

    /// The weights' format as written, parsed once here; QLoRA implies `nf4-dq`.
    fn resolve_weights(&self, peft: Option<&Peft>) -> Result<Weights, CoreError> {
        Ok(match self.weights.as_deref() {
            Some(w) => Spelled::new(WeightFormat::parse(w)?, w.trim()),
            None if peft.is_some_and(|p| p.method == PeftMethod::Qlora) => {
                Spelled::new(WeightFormat::Nf4Dq, "nf4-dq")
            }
            None => Spelled::new(WeightFormat::None, "none"),
        })
    }
}

/// The software stack's part of a resolved job ([`Job::resolve_stack`]).
struct Stack {
    torch_version: Option<TorchVersion>,
    attention: AttentionKernel,
    cuda_module_loading: CudaModuleLoading,
    zero_grad: ZeroGrad,
}

/// `attention: sdpa` on a PyTorch release before `scaled_dot_product_attention` (2.0).
fn check_sdpa(torch: Option<TorchVersion>, attention: AttentionKernel) -> Result<(), CoreError> {
    match torch {
        Some(v) if attention == AttentionKernel::Sdpa && !v.has_sdpa() => Err(CoreError::field(
            "attention",
            format!(
                "sdpa needs PyTorch 2.0 or later (torch_version {v}): use eager, or flash for \
                 the flash-attn package"
            ),
        )),
        _ => Ok(()),
    }
}

impl AttentionKernel {
    /// `sdpa`, or `eager` on a release before it (transformers' only attention then).
    pub fn default_for(torch: Option<TorchVersion>) -> Self {
        match torch {
            Some(v) if !v.has_sdpa() => AttentionKernel::Eager,
            _ => AttentionKernel::Sdpa,
        }
    }
}

impl CudaModuleLoading {
    /// Eager before PyTorch 1.13 set `CUDA_MODULE_LOADING=LAZY` by default, lazy otherwise.
    pub fn default_for(torch: Option<TorchVersion>) -> Self {
        match torch {
            Some(v) if v.loads_modules_eagerly() => CudaModuleLoading::Eager,
            _ => CudaModuleLoading::Lazy,
        }
    }
}

impl ZeroGrad {
    /// `zeros` before PyTorch 2.0 (`set_to_none=False` by default), `none` otherwise.
    pub fn default_for(torch: Option<TorchVersion>) -> Self {
        match torch {
            Some(v) if v.zero_grad_keeps_zeros() => ZeroGrad::Zeros,
            _ => ZeroGrad::None,
        }
    }

    fn is_default(&self) -> bool {
        *self == ZeroGrad::None
    }
}

impl OptimizerImpl {
    fn is_default(&self) -> bool {
        *self == OptimizerImpl::Foreach
    }
}

/// The optimizer's implementation, checked against the optimizer: `for-loop` is torch's
/// `foreach=False`, which Adam, AdamW and SGD take; `hf` is transformers' own AdamW (Adam when
/// its weight decay is 0). The others (fused, bitsandbytes, Adafactor, Lion) have one
/// implementation each.
fn resolve_optimizer_impl(v: Option<&str>, opt: Optimizer) -> Result<OptimizerImpl, CoreError> {
    let imp = choice(
        "optimizer_impl",
        v,
        OptimizerImpl::parse,
        OptimizerImpl::Foreach,
    )?;
    let ok = match imp {
        OptimizerImpl::Foreach => true,
        OptimizerImpl::ForLoop => matches!(
            opt,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::Sgd | Optimizer::SgdMomentum
        ),
        OptimizerImpl::Hf => matches!(opt, Optimizer::Adam | Optimizer::AdamW),
    };
    if ok {
        Ok(imp)
    } else {
        Err(CoreError::field(
            "optimizer_impl",
            format!(
                "{} does not apply to optimizer {} (for-loop: adam, adamw, sgd, sgd-momentum; \
                 hf: adam, adamw)",
                imp.as_str(),
                opt.as_str()
            ),
        ))
    }
}

/// The job's GPU id as the catalog spells it.
fn resolve_gpu(v: Option<&Value>) -> Result<Option<String>, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(
            crate::gpu::find(s)
                .map_err(|e| CoreError::field("gpu", e.to_string()))?
                .id
                .clone(),
        )),
        Some(other) => Err(CoreError::field(
            "gpu",
            format!("must be a GPU id (got {other})"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(v: Value) -> Job {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_are_a_pytorch_users() {
        let r = Job::default().resolve(Some(131072)).unwrap();
        assert_eq!(r.task, Task::Train);
        assert_eq!((r.batch, r.grad_accum, r.seq), (1, 1, 2048));
        assert_eq!(r.precision, Precision::Bf16Mixed);
        assert_eq!(r.optimizer, Optimizer::AdamW);
        assert_eq!(r.attention, AttentionKernel::Sdpa);
        assert_eq!(r.parallel, Parallel::default());
        assert_eq!(r.cuda_module_loading, CudaModuleLoading::Lazy);
        let r = job(json!({"cuda_module_loading": "EAGER"}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.cuda_module_loading, CudaModuleLoading::Eager);
        let r = job(json!({"task": "infer"})).resolve(Some(512)).unwrap();
        assert_eq!(
            (r.precision, r.optimizer, r.seq),
            (Precision::Bf16, Optimizer::None, 512)
        );
    }

    /// `reserve` is bytes, an integer or a float JSON number (contract); 1.5 GiB =
    /// 1.5 × 1,073,741,824 = 1,610,612,736 bytes; default 0.
    #[test]
    fn reserve_reads_bytes_as_integer_or_float() {
        assert_eq!(Job::default().resolve(None).unwrap().reserve, 0);
        let r = job(json!({"reserve": 2147483648u64}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.reserve, 2_147_483_648);
        let r = job(json!({"reserve": 1.610612736e9}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.reserve, 1_610_612_736);
        // Capacity 24 GiB − 2 GiB reserved = 22 GiB = 23,622,320,128 bytes usable.
        let r = job(json!({"reserve": 2147483648u64}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.usable(24 << 30), 23_622_320_128);
        assert_eq!(r.usable(1 << 30), 0);
        for bad in [json!(-1), json!("two"), json!(1e300), json!([1])] {
            let e = job(json!({ "reserve": bad })).resolve(None).unwrap_err();
            assert!(e.to_string().contains("reserve"), "{e}");
        }
    }

    /// T4 and V100 have no bf16 (NVIDIA's Turing and Volta whitepapers list fp16 tensor cores
    /// only): their default is fp16 mixed precision (train) and fp16 (infer).
    #[test]
    fn gpus_without_bf16_default_to_fp16() {
        let r = job(json!({"gpu": "t4-16gb"})).resolve(None).unwrap();
        assert_eq!(r.precision, Precision::Fp16Mixed);
        let r = job(json!({"gpu": "v100-32gb", "task": "infer"}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.precision, Precision::Fp16);
        let r = job(json!({"gpu": "a100-80gb"})).resolve(None).unwrap();
        assert_eq!(r.precision, Precision::Bf16Mixed);
    }

    #[test]
    fn numbers_may_be_floats() {
        let r = job(json!({"batch": 8.0, "seq": "4096"}))
            .resolve(None)
            .unwrap();
        assert_eq!((r.batch, r.seq), (8, 4096));
    }

    /// The strict booleans (`fields::boolean`) take JSON true/false or null only; the message
    /// is the field, then `must be true or false (got V)` with V as JSON writes it (a string
    /// quoted, a number bare).
    #[test]
    fn strict_booleans_name_the_field_and_the_value() {
        let rl = |o: Value| json!({"task": "rl", "rl": o});
        for (v, want) in [
            (
                json!({"parallel": {"sp": "yes"}}),
                r#"parallel.sp: must be true or false (got "yes")"#,
            ),
            (
                rl(json!({"reference_model": 1})),
                "rl.reference_model: must be true or false (got 1)",
            ),
            (
                rl(json!({"generator": {"sleep": "on"}})),
                r#"rl.generator.sleep: must be true or false (got "on")"#,
            ),
            (
                rl(json!({"generator": {"colocate": 0}})),
                "rl.generator.colocate: must be true or false (got 0)",
            ),
        ] {
            let e = job(v.clone()).resolve(None).unwrap_err().to_string();
            assert_eq!(e, want, "{v}");
        }
    }

    #[test]
    fn nonsense_is_named() {
        for (v, field) in [
            (json!({"batch": 0}), "batch"),
            (json!({"batch": -1}), "batch"),
            (json!({"batch": 1.5}), "batch"),
            (json!({"batch": 1e18}), "batch"),
            (json!({"seq": 0}), "seq"),
            (json!({"grad_accum": 0}), "grad_accum"),
            (json!({"optimizer": "adamx"}), "optimizer"),
            (json!({"precision": "bf17"}), "precision"),
            (json!({"gpu": "a100-80g"}), "gpu"),
            (json!({"parallel": {"gpus": 8, "dp": 3}}), "parallel.gpus"),
            (json!({"parallel": {"gpus": 6, "tp": 4}}), "parallel.gpus"),
            (json!({"parallel": {"zero": 4}}), "parallel.zero"),
            (json!({"peft": {"method": "dora"}}), "peft.method"),
            (json!({"loss": "fast"}), "loss"),
            (
                json!({"cuda_module_loading": "lazzy"}),
                "cuda_module_loading",
            ),
        ] {
            let e = job(v.clone()).resolve(None).unwrap_err().to_string();
            assert!(e.starts_with(field), "{v}: {e}");
        }
        let e = job(json!({"optimizer": "adamw8bit"}))
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'adamw-8bit'"), "{e}");
    }

    /// `zero_grad` and `optimizer_impl` default to torch ≥ 2.0's behaviour and are echoed only
    /// when set (a job without them reports as before); `for-loop` is torch's `foreach=False`
    /// (Adam, AdamW, SGD take it), `hf` transformers' AdamW.
    #[test]
    fn zero_grad_and_optimizer_impl() {
        let r = Job::default().resolve(None).unwrap();
        assert_eq!(
            (r.zero_grad, r.optimizer_impl),
            (ZeroGrad::None, OptimizerImpl::Foreach)
        );
        let echoed = serde_json::to_value(&r).unwrap();
        assert!(echoed.get("zero_grad").is_none() && echoed.get("optimizer_impl").is_none());
        let r = job(json!({"zero_grad": "Zeros", "optimizer_impl": "hf"}))
            .resolve(None)
            .unwrap();
        assert_eq!(
            (r.zero_grad, r.optimizer_impl),
            (ZeroGrad::Zeros, OptimizerImpl::Hf)
        );
        let echoed = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (&echoed["zero_grad"], &echoed["optimizer_impl"]),
            (&json!("zeros"), &json!("hf"))
        );
        for ok in [
            json!({"optimizer": "sgd", "optimizer_impl": "for-loop"}),
            json!({"optimizer": "adam", "optimizer_impl": "hf"}),
        ] {
            assert!(job(ok.clone()).resolve(None).is_ok(), "{ok}");
        }
        for (v, field) in [
            (json!({"zero_grad": "zero"}), "zero_grad"),
            (json!({"optimizer_impl": "fused"}), "optimizer_impl"),
            (
                json!({"optimizer": "adamw-fused", "optimizer_impl": "for-loop"}),
                "optimizer_impl",
            ),
            (
                json!({"optimizer": "sgd", "optimizer_impl": "hf"}),
                "optimizer_impl",
            ),
        ] {
            let e = job(v.clone()).resolve(None).unwrap_err().to_string();
            assert!(e.starts_with(field), "{v}: {e}");
        }
    }

    /// `torch_version` sets the defaults its release had; a field the job sets itself wins;
    /// `sdpa` asked on a release without it is refused naming both; a number is refused (1.10
    /// would read as 1.1).
    #[test]
    fn torch_version_sets_its_release_defaults() {
        let r = job(json!({"torch_version": "1.12.1+cu113"}))
            .resolve(None)
            .unwrap();
        assert_eq!(
            (r.cuda_module_loading, r.zero_grad, r.attention),
            (
                CudaModuleLoading::Eager,
                ZeroGrad::Zeros,
                AttentionKernel::Eager
            )
        );
        let r = job(json!({"torch_version": "1.13"})).resolve(None).unwrap();
        assert_eq!(
            (r.cuda_module_loading, r.zero_grad, r.attention),
            (
                CudaModuleLoading::Lazy,
                ZeroGrad::Zeros,
                AttentionKernel::Eager
            )
        );
        let r = job(json!({"torch_version": "2.0"})).resolve(None).unwrap();
        assert_eq!(
            (r.cuda_module_loading, r.zero_grad, r.attention),
            (
                CudaModuleLoading::Lazy,
                ZeroGrad::None,
                AttentionKernel::Sdpa
            )
        );
        let r = job(json!({"torch_version": "1.10", "zero_grad": "none",
                           "cuda_module_loading": "lazy", "attention": "flash"}))
        .resolve(None)
        .unwrap();
        assert_eq!(
            (r.cuda_module_loading, r.zero_grad, r.attention),
            (
                CudaModuleLoading::Lazy,
                ZeroGrad::None,
                AttentionKernel::Flash
            )
        );
        let e = job(json!({"torch_version": "1.10", "attention": "sdpa"}))
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("attention") && e.contains("1.10"), "{e}");
        let e = job(json!({"torch_version": 1.10}))
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("torch_version"), "{e}");
        let plain = job(json!({})).resolve(None).unwrap();
        assert!(plain.torch_version.is_none());
        assert!(!serde_json::to_string(&plain)
            .unwrap()
            .contains("torch_version"));
    }

    #[test]
    fn supported_fields_are_merged_and_unknown_ones_left_out() {
        let base = json!({"model": "gpt2", "batch": 4});
        let extra = json!({"cuda_module_loading": "eager", "driver_version": "460.91",
                           "attention": "no-such-kernel"});
        let merged = merge_if_supported(&base, Some(&extra));
        assert_eq!(
            merged,
            json!({"model": "gpt2", "batch": 4, "cuda_module_loading": "eager"})
        );
        assert_eq!(merge_if_supported(&base, None), base);
    }

    #[test]
    fn parallel_layout_is_derived() {
        let r = job(json!({"parallel": {"gpus": 16, "tp": 4, "pp": 2}}))
            .resolve(None)
            .unwrap();
        assert_eq!((r.parallel.dp, r.parallel.gpus), (2, 16));
        let r = job(json!({"parallel": {"dp": 64, "zero": 3}}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.parallel.gpus, 64);
    }

    /// `weights` and `kv_dtype` are parsed once, in resolution: the estimator reads the typed
    /// value, the report echoes the spelling as written. `gptq:4` is GPTQ 4-bit with the
    /// default group of 128 (the contract's `gptq:BITS[:gN]`); `fp8` KV is one byte a value.
    #[test]
    fn weights_and_kv_dtype_are_typed_once() {
        let r = job(json!({"weights": " GPTQ:4 ", "kv_dtype": "FP8"}))
            .resolve(None)
            .unwrap();
        assert_eq!(
            r.weights.value,
            WeightFormat::Gptq {
                bits: 4,
                group: Some(128)
            }
        );
        assert_eq!(r.weights.as_str(), "GPTQ:4");
        let kv = r.kv_dtype.as_ref().unwrap();
        assert_eq!((kv.value, kv.as_str()), (KvDtype::Byte, "FP8"));
        let echoed = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (&echoed["weights"], &echoed["kv_dtype"]),
            (&json!("GPTQ:4"), &json!("FP8"))
        );
        // Bad spellings are named at resolution, whatever the task.
        for (v, field) in [
            (json!({"weights": "gptq:5"}), "weights"),
            (json!({"kv_dtype": "fp7"}), "kv_dtype"),
        ] {
            let e = job(v.clone()).resolve(None).unwrap_err().to_string();
            assert!(e.starts_with(field), "{v}: {e}");
        }
    }

    #[test]
    fn qlora_implies_nf4_dq() {
        let r = job(json!({"peft": {"method": "qlora", "rank": 8}}))
            .resolve(None)
            .unwrap();
        assert_eq!(r.weights, "nf4-dq");
        assert_eq!(r.peft.unwrap().targets.len(), 4);
    }
}
