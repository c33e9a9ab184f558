//! The training techniques of issue 20 (contract fields `optimizer_in_backward`,
//! `activation_offload`, `compile`): how a recipe changes what lives on the GPU without
//! changing the model or the layout. Each is off by default, and a job that leaves it off
//! echoes nothing of it (the Report's `job` stays as it was before these fields existed).

use crate::error::CoreError;
use serde::Serialize;

/// A technique switched by one job field that a recipe writes as a boolean or as a word: JSON
/// `null` / `false` read as the first of `words` (off), `true` as the second (on), a string as
/// one of `words` or `aliases` (trimmed, any case). The errors list `words`.
struct Switch<T: 'static> {
    field: &'static str,
    words: &'static [(&'static str, T)],
    aliases: &'static [(&'static str, T)],
}

impl<T: Copy> Switch<T> {
    fn parse(&self, v: &serde_json::Value) -> Result<T, CoreError> {
        use serde_json::Value;
        match v {
            Value::Null | Value::Bool(false) => Ok(self.words[0].1),
            Value::Bool(true) => Ok(self.words[1].1),
            Value::String(s) => {
                let word = s.trim().to_ascii_lowercase();
                let mut all = self.words.iter().chain(self.aliases);
                let found = all.find(|(w, _)| *w == word).map(|&(_, t)| t);
                found.ok_or_else(|| {
                    let list = self.names().join(", ");
                    CoreError::field(self.field, format!("'{s}' is not one of {list}"))
                })
            }
            other => Err(CoreError::field(
                self.field,
                format!("must be {} (got {other})", self.quoted()),
            )),
        }
    }

    fn names(&self) -> Vec<&'static str> {
        self.words.iter().map(|(w, _)| *w).collect()
    }

    /// The words quoted and joined: `"a", "b" or "c"`.
    fn quoted(&self) -> String {
        let q: Vec<String> = self.names().iter().map(|w| format!("\"{w}\"")).collect();
        match q.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// A switch enum's methods: `as_str` (its word), `parse` (a [`Switch`] over its words: JSON
/// `false` / `true` read as the first two, `aliases` as theirs), `is_none` (serde's
/// `skip_serializing_if`: off is not echoed), and its serialization as its word.
macro_rules! switch_methods {
    ($t:ident, $field:literal, [$($word:literal => $v:ident),+] $(, aliases [$($alias:literal => $av:ident),+])?) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($t::$v => $word,)+
                }
            }

            /// Parses the job field (see [`Switch`]).
            pub fn parse(v: &serde_json::Value) -> Result<Self, CoreError> {
                Switch {
                    field: $field,
                    words: &[$(($word, $t::$v)),+],
                    aliases: &[$($(($alias, $t::$av)),+)?],
                }
                .parse(v)
            }

            fn is_none(&self) -> bool {
                *self == $t::None
            }
        }

        crate::serde_name::serde_by_name!($t, as_str);
    };
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

switch_methods!(ActivationOffload, "activation_offload", ["none" => None, "cpu" => Cpu]);

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

switch_methods!(
    ReferenceModel,
    "reference_model",
    ["none" => None, "frozen" => Frozen, "precomputed" => Precomputed],
    aliases ["false" => None, "true" => Frozen]
);

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
    /// PEFT's `prepare_model_for_kbit_training` runs before `get_peft_model`
    /// ([`kbit_casts`], [`kbit_checkpoints`]).
    #[serde(skip_serializing_if = "is_false")]
    pub kbit_prepare: bool,
    /// Full checkpointing runs `torch.utils.checkpoint(..., use_reentrant=True)`: the first
    /// forward under `no_grad`. Default false, as transformers 5.24's
    /// `gradient_checkpointing_enable()`, HF Trainer and TRL's `SFTTrainer` run it
    /// (`{"use_reentrant": False}` when no kwargs are given); true when `kbit_prepare` is what
    /// turns checkpointing on (PEFT passes `{}`, and torch's `checkpoint` without
    /// `use_reentrant` takes True). Read only where the kinds differ: LLM.int8's inputs held in
    /// `ctx.tensors` (`docs/allocator-stream.md`).
    #[serde(skip_serializing_if = "is_false")]
    pub checkpoint_reentrant: bool,
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
    if r != ReferenceModel::None && task == super::enums::Task::Rl {
        return Err(CoreError::field(
            "reference_model",
            "an RL step's reference model is rl.reference_model",
        ));
    }
    Ok(())
}

/// `kbit_prepare` is a step of PEFT training: a job that trains no adapters cannot ask for it.
pub(super) fn check_kbit_prepare(
    on: bool,
    task: super::enums::Task,
    peft: bool,
) -> Result<(), CoreError> {
    if on && (task != super::enums::Task::Train || !peft) {
        return Err(CoreError::field(
            "kbit_prepare",
            "PEFT's prepare_model_for_kbit_training prepares a LoRA/QLoRA training job: the \
             job needs task train and peft",
        ));
    }
    Ok(())
}

/// Whether `prepare_model_for_kbit_training` casts the 16-bit parameters to fp32 (PEFT 0.21,
/// `peft/utils/other.py`: `param.data = param.data.to(torch.float32)` for every fp16/bf16
/// parameter that is not a `Params4bit`, skipped for GPTQ, AQLM, EETQ, HQQ and torchao
/// models). Of our formats only GPTQ skips it; unquantized models are cast too.
pub fn kbit_casts(on: bool, weights: &super::weight_format::WeightFormat) -> bool {
    on && !matches!(weights, super::weight_format::WeightFormat::Gptq { .. })
}

/// Whether it turns gradient checkpointing on: with its default `use_gradient_checkpointing=
/// True`, for a model `is_loaded_in_8bit`/`is_loaded_in_4bit` (bitsandbytes) or GPTQ
/// (`model.gradient_checkpointing_enable(...)`); then the job's `checkpointing` defaults to
/// `full`.
pub fn kbit_checkpoints(on: bool, weights: &super::weight_format::WeightFormat) -> bool {
    use super::weight_format::WeightFormat as W;
    on && matches!(
        weights,
        W::Int8 | W::Nf4 | W::Fp4 | W::Nf4Dq | W::Gptq { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(e: CoreError) -> String {
        match e {
            CoreError::InvalidField { reason, .. } => reason,
            other => panic!("not a field error: {other}"),
        }
    }

    /// The words, the booleans and the aliases as the two fields document them; the errors
    /// list the words (not the aliases), quoted and joined with "or" for a value of another
    /// JSON type.
    #[test]
    fn switches_read_words_booleans_and_aliases() {
        let off = ActivationOffload::parse(&json!(" CPU ")).unwrap();
        assert_eq!(off, ActivationOffload::Cpu);
        assert_eq!(
            ActivationOffload::parse(&json!(false)).unwrap(),
            ActivationOffload::None
        );
        assert_eq!(
            ReferenceModel::parse(&json!(true)).unwrap(),
            ReferenceModel::Frozen
        );
        assert_eq!(
            ReferenceModel::parse(&json!("false")).unwrap(),
            ReferenceModel::None
        );
        let pre = ReferenceModel::parse(&json!("precomputed")).unwrap();
        assert_eq!(pre.as_str(), "precomputed");
        let e = reason(ActivationOffload::parse(&json!("disk")).unwrap_err());
        assert_eq!(e, "'disk' is not one of none, cpu");
        let e = reason(ActivationOffload::parse(&json!(1)).unwrap_err());
        assert_eq!(e, "must be \"none\" or \"cpu\" (got 1)");
        let frozen = ReferenceModel::parse(&json!("True ")).unwrap();
        assert_eq!(frozen, ReferenceModel::Frozen);
        let e = reason(ReferenceModel::parse(&json!([1])).unwrap_err());
        assert_eq!(
            e,
            "must be \"none\", \"frozen\" or \"precomputed\" (got [1])"
        );
    }
}
