//! The resolved job: every default filled in and every value checked, as the estimator reads it
//! and the report echoes it (`job`).

use super::allocator;
use super::engine_settings::EngineSettings;
use super::enums::{
    AttentionKernel, Checkpointing, CudaModuleLoading, Framework, LossKernel, Optimizer,
    OptimizerImpl, Precision, Task, ZeroGrad,
};
use super::kv_dtype::KvDtype;
use super::parallel::Parallel;
use super::peft::Peft;
use super::rl::Rl;
use super::spelled::{Spelled, Weights};
use super::techniques::{self, Techniques};
use super::torch_version::TorchVersion;
use super::transformers_version::TransformersVersion;
use crate::error::CoreError;
use serde::Serialize;
use serde_json::Value;

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
