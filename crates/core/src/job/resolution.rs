//! Resolution: [`Job::resolve`] fills every default (from the task, the framework, the model,
//! the GPU and the PyTorch release) and checks every field once, giving the [`ResolvedJob`].

use super::engine_settings::EngineSettings;
use super::enums::{
    AttentionKernel, Checkpointing, CudaModuleLoading, Framework, LossKernel, Optimizer,
    OptimizerImpl, PeftMethod, Precision, Task, ZeroGrad,
};
use super::fields::{self, choice, count, reserve_bytes, text, MAX_BATCH, MAX_SEQ};
use super::kv_dtype::KvDtype;
use super::parallel::parse_parallel;
use super::peft::parse_peft;
use super::peft::Peft;
use super::resolved::ResolvedJob;
use super::rl::parse_rl;
use super::rl::Rl;
use super::spelled::{Spelled, Weights};
use super::techniques::{self, ActivationOffload, ReferenceModel, Techniques};
use super::torch_version::TorchVersion;
use super::transformers_version::TransformersVersion;
use super::weight_format::{self, WeightFormat};
use super::{allocator, vision, Job};
use crate::error::CoreError;
use serde_json::Value;

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
