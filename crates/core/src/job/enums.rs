//! The job's string-valued fields as enums, each with its contract spellings (`job_enum!`), and
//! what each value knows of itself: a precision's compute bytes, the defaults a PyTorch release
//! gives.

use super::torch_version::TorchVersion;
use crate::error::CoreError;

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

    pub(super) fn is_default(&self) -> bool {
        *self == ZeroGrad::None
    }
}

impl OptimizerImpl {
    pub(super) fn is_default(&self) -> bool {
        *self == OptimizerImpl::Foreach
    }
}
