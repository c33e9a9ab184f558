//! The job: what is being run, how, and on what. Field names and values are the contract's
//! (`../shared/contract.md`); `Job` is what a user writes (every field optional), `ResolvedJob`
//! has every default filled in and every value checked. The string-valued fields' enums are in
//! `job/enums.rs`, the resolved job in `job/resolved.rs`, the resolution (defaults and checks)
//! in `job/resolution.rs`.

pub mod allocator;
pub mod engine_settings;
mod enums;
mod fields;
mod kv_dtype;
mod parallel;
mod peft;
mod resolution;
mod resolved;
mod rl;
mod spelled;
mod techniques;
mod torch_version;
mod transformers_version;
mod vision;
pub mod weight_format;

pub use enums::{
    AdapterDtype, AttentionKernel, Checkpointing, CudaModuleLoading, Framework, LossKernel,
    Offload, Optimizer, OptimizerImpl, PeftMethod, Precision, RlAlgorithm, Task, ZeroGrad,
};
pub use fields::whole_number;
pub use parallel::Parallel;
pub use peft::{Peft, DEFAULT_DROPOUT as DEFAULT_LORA_DROPOUT, LLAMA_LINEARS};
pub use resolved::ResolvedJob;
pub use rl::{Generator, Rl};
pub use spelled::{Spelled, Weights};
pub use techniques::{kbit_casts, kbit_checkpoints, ActivationOffload, ReferenceModel, Techniques};

pub use engine_settings::{EngineSettings, GenerateCache};
pub use kv_dtype::KvDtype;
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
