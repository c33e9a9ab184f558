//! The training techniques of issue 20 (contract fields `optimizer_in_backward`,
//! `activation_offload`, `compile`): how a recipe changes what lives on the GPU without
//! changing the model or the layout. Each is off by default, and a job that leaves it off
//! echoes nothing of it (the Report's `job` stays as it was before these fields existed).

use crate::error::CoreError;
use serde::Serialize;

/// A technique switched by one job field that a recipe writes as a boolean or as a word: JSON
/// `null` / `false` read as `off`, `true` as `on`, a string as one of `words` (trimmed, any
/// case). `names`: the words for the two errors (a wrong word; a value of another JSON type).
struct Switch<T: 'static> {
    field: &'static str,
    off: T,
    on: T,
    words: &'static [(&'static str, T)],
    names: [&'static str; 2],
}

impl<T: Copy> Switch<T> {
    fn parse(&self, v: &serde_json::Value) -> Result<T, CoreError> {
        use serde_json::Value;
        match v {
            Value::Null | Value::Bool(false) => Ok(self.off),
            Value::Bool(true) => Ok(self.on),
            Value::String(s) => {
                let word = s.trim().to_ascii_lowercase();
                let found = self.words.iter().find(|(w, _)| *w == word);
                found.map(|&(_, t)| t).ok_or_else(|| {
                    CoreError::field(self.field, format!("'{s}' is not one of {}", self.names[0]))
                })
            }
            other => Err(CoreError::field(
                self.field,
                format!("must be {} (got {other})", self.names[1]),
            )),
        }
    }
}

/// Where saved activations live between their forward and their backward (contract
/// `activation_offload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ActivationOffload {
    /// On the GPU (PyTorch's default).
    #[default]
    None,
    /// In pinned host memory: torchtune's `OffloadActivations`
    /// (`torchtune/training/_activation_offloading.py`), a `saved_tensors_hooks` pair that
    /// copies each saved tensor of at least 1 KiB to the CPU as it is saved and back to the
    /// GPU when its backward node runs.
    Cpu,
}

impl ActivationOffload {
    pub fn as_str(self) -> &'static str {
        match self {
            ActivationOffload::None => "none",
            ActivationOffload::Cpu => "cpu",
        }
    }

    /// Parses `none` / `cpu` (a JSON `false` / `true` reads as them, as recipes write the
    /// switch).
    pub fn parse(v: &serde_json::Value) -> Result<Self, CoreError> {
        use ActivationOffload::{Cpu, None};
        let switch = Switch {
            field: "activation_offload",
            off: None,
            on: Cpu,
            words: &[("none", None), ("cpu", Cpu)],
            names: ["none, cpu", "\"none\" or \"cpu\""],
        };
        switch.parse(v)
    }

    fn is_none(&self) -> bool {
        *self == ActivationOffload::None
    }
}

impl Serialize for ActivationOffload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A DPO-style frozen reference model beside the trained policy in a plain training job
/// (`task: "train"`; an RL step has `rl.reference_model`). TRL's `DPOTrainer`
/// (`trl/trainer/dpo_trainer.py`) loads it from the same checkpoint with the same
/// `model_init_kwargs` (so the same dtype), never trains it (no gradients, no optimizer
/// states) and runs it under `torch.no_grad()` (its forward saves nothing); with
/// `precompute_ref_log_probs` its log-probabilities are computed before training and it is
/// not used while the policy trains. An extension of the contract's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ReferenceModel {
    /// No reference model (plain SFT / pre-training).
    #[default]
    None,
    /// A frozen copy of the policy's weights on the GPU through the step.
    Frozen,
    /// Reference log-probabilities computed before training (TRL
    /// `precompute_ref_log_probs=True`): no reference weights while the policy trains.
    Precomputed,
}

impl ReferenceModel {
    pub fn as_str(self) -> &'static str {
        match self {
            ReferenceModel::None => "none",
            ReferenceModel::Frozen => "frozen",
            ReferenceModel::Precomputed => "precomputed",
        }
    }

    /// Parses `none` / `frozen` / `precomputed`; JSON `false` / `true` read as none / frozen.
    pub fn parse(v: &serde_json::Value) -> Result<Self, CoreError> {
        use ReferenceModel::{Frozen, None, Precomputed};
        let switch = Switch {
            field: "reference_model",
            off: None,
            on: Frozen,
            words: &[
                ("none", None),
                ("false", None),
                ("frozen", Frozen),
                ("true", Frozen),
                ("precomputed", Precomputed),
            ],
            names: [
                "none, frozen, precomputed",
                "\"none\", \"frozen\" or \"precomputed\"",
            ],
        };
        switch.parse(v)
    }

    fn is_none(&self) -> bool {
        *self == ReferenceModel::None
    }
}

impl Serialize for ReferenceModel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The techniques as resolved; flattened into the Report's `job`, each field echoed only when
/// it is not its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Techniques {
    /// Each parameter's optimizer step runs in its post-accumulate-grad hook and frees its
    /// gradient at once (torchtune `optimizer_in_bwd`).
    #[serde(skip_serializing_if = "is_false")]
    pub optimizer_in_backward: bool,
    #[serde(skip_serializing_if = "ActivationOffload::is_none")]
    pub activation_offload: ActivationOffload,
    /// `torch.compile` (inductor) of the model.
    #[serde(skip_serializing_if = "is_false")]
    pub compile: bool,
    /// A frozen reference model beside the policy (DPO in a training job).
    #[serde(skip_serializing_if = "ReferenceModel::is_none")]
    pub reference_model: ReferenceModel,
    /// Sequences packed into rows of `seq` tokens with `position_ids` and no padding
    /// (axolotl `sample_packing`, TRL `packing`, torchtune `dataset.packed`).
    #[serde(skip_serializing_if = "is_false")]
    pub packing: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A boolean job field: JSON `true`/`false`, or the strings `true`/`false` (flags and TOML
/// pass them so); absent or null = false.
pub(super) fn flag(field: &str, v: Option<&serde_json::Value>) -> Result<bool, CoreError> {
    use serde_json::Value;
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(CoreError::field(
                field,
                format!("must be true or false (got '{s}')"),
            )),
        },
        Some(other) => Err(CoreError::field(
            field,
            format!("must be true or false (got {other})"),
        )),
    }
}

/// torchtune refuses gradient accumulation with `optimizer_in_bwd` (each gradient is stepped
/// and freed as it is made, so none can be summed over micro-batches); the hook runs in plain
/// PyTorch and FSDP training, not inside DeepSpeed's or Megatron's own optimizers.
pub(super) fn check_in_backward(grad_accum: u64, framework: &str) -> Result<(), CoreError> {
    if grad_accum > 1 {
        return Err(CoreError::field(
            "optimizer_in_backward",
            format!(
                "cannot accumulate gradients (grad_accum {grad_accum}): each gradient is \
                 stepped and freed in its hook"
            ),
        ));
    }
    if !matches!(framework, "pytorch" | "fsdp") {
        return Err(CoreError::field(
            "optimizer_in_backward",
            format!("runs in pytorch or fsdp training, not {framework}"),
        ));
    }
    Ok(())
}

/// A training job's reference model; an RL step names its own in `rl.reference_model`.
pub(super) fn check_reference(r: ReferenceModel, task: super::Task) -> Result<(), CoreError> {
    if r != ReferenceModel::None && task == super::Task::Rl {
        return Err(CoreError::field(
            "reference_model",
            "an RL step's reference model is rl.reference_model",
        ));
    }
    Ok(())
}
