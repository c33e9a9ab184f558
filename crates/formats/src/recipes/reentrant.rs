//! Which kind of full checkpointing a recipe runs (`checkpoint_reentrant`): torch's reentrant
//! `CheckpointFunction` (the first forward under `no_grad`) or the non-reentrant saved-tensor
//! hooks. The job's own default is `false` (non-reentrant, what transformers 5.24 runs), so a
//! reader sets the field where the file states the kind, or where its framework's default for
//! a checkpointing run is the reentrant kind. What each framework does, read in its source:
//!
//! - transformers 5.24's `Trainer` (TrainingArguments, TRL, axolotl, LLaMA-Factory's trainer
//!   keys): non-reentrant. `trainer.py` `train()` passes `activation_checkpointing_kwargs or
//!   None` (after popping `every_n_layers`, `offload`), and `modeling_utils.py`
//!   `_activation_checkpointing_enable` makes `None` `{"use_reentrant": False}`. Set by
//!   `gradient_checkpointing_kwargs` (the deprecated alias) / `activation_checkpointing_kwargs`
//!   `use_reentrant`; other keys without it reach `torch.utils.checkpoint.checkpoint`, which
//!   takes `use_reentrant=True` when it is not passed (torch 2.15 `utils/checkpoint.py` l. 645).
//! - TRL v1.9 (`SFTTrainer`, `DPOTrainer`, `GRPOTrainer`): as transformers ≥ 5 (it sets
//!   `use_reentrant: False` itself only below 5.0), but a PEFT model under DeepSpeed ZeRO-3
//!   with checkpointing is forced to `True` (`sft_trainer.py` lines 1099–1116; `dpo_trainer.py`,
//!   `grpo_trainer.py` alike).
//! - axolotl (`utils/config/__init__.py` `normalize_config`, commit 067b021): reentrant —
//!   checkpointing on with no `gradient_checkpointing_kwargs`, `unfrozen_parameters` or `rl`
//!   gets `{"use_reentrant": True}` (Gemma 4 forced `False`); otherwise its builder passes
//!   `{"use_reentrant": False}` (`core/builders/base.py`). Set by the kwargs.
//! - LLaMA-Factory (`model/model_utils/checkpointing.py`, commit ff6d4d1): reentrant —
//!   checkpointing on unless `disable_gradient_checkpointing`, with `{"use_reentrant":
//!   use_reentrant_gc}`, `use_reentrant_gc` defaulting to `True` (`hparams/model_args.py`);
//!   `False` under FSDP2 or KTransformers; `use_unsloth_gc` runs Unsloth's `autograd.Function`,
//!   whose forward runs under `no_grad` (the reentrant kind).
//! - torchtune (`training/activations.py`), accelerate's FSDP (`accelerator.py`
//!   `CheckpointImpl.NO_REENTRANT`; FSDP2's `fsdp2_apply_ac`) and torchtitan
//!   (`distributed/activation_checkpoint.py`): non-reentrant, `checkpoint_wrapper` with
//!   `CheckpointImpl.NO_REENTRANT` (torch's default for it); nothing to set.

use super::doc::{as_bool, Doc, Reading, Strength};
use serde_json::{json, Map, Value};

/// The job field this module sets.
pub(crate) const FIELD: &str = "checkpoint_reentrant";

/// `use_reentrant` as a Hugging Face `Trainer` (transformers 5.24 `trainer.py` `train()`) would
/// pass it from `kwargs`, the `*_checkpointing_kwargs` dict: `None` where the Trainer passes no
/// kwargs (the dict empty once `every_n_layers` and `offload` are taken out), which is
/// transformers' non-reentrant default; the stated value; or torch's default `true` when other
/// keys reach `checkpoint` without it.
pub(crate) fn trainer_kind(kwargs: &Map<String, Value>) -> Result<Option<bool>, String> {
    if let Some(v) = kwargs.get("use_reentrant").filter(|v| !v.is_null()) {
        return as_bool(v)
            .map(Some)
            .ok_or_else(|| format!("use_reentrant: expected true or false (got {v})"));
    }
    let passed = kwargs
        .keys()
        .any(|k| !matches!(k.as_str(), "every_n_layers" | "offload" | "use_reentrant"));
    Ok(passed.then_some(true))
}

/// The checkpointing kwargs `key` holds, marked read: an object, or the JSON text
/// TrainingArguments parses (`_VALID_DICT_FIELDS`: a string starting with `{`).
pub(crate) fn kwargs_of(doc: &Doc, key: &str) -> Result<Option<Map<String, Value>>, String> {
    let bad = |v: &Value| format!("{}: expected a mapping (got {v})", doc.path(key));
    match doc.get(key) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(Value::String(s)) if s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => Ok(Some(m)),
                _ => Err(bad(&Value::String(s.clone()))),
            }
        }
        Some(v) => Err(bad(v)),
    }
}

/// A checkpointing kwargs dict and the key it was read from.
type Kwargs = (Map<String, Value>, &'static str);

/// The Trainer's kwargs in `doc`: transformers 5.24's `activation_checkpointing_kwargs`, else
/// its deprecated alias `gradient_checkpointing_kwargs` (used only when the new name is unset,
/// `training_args.py` `__post_init__`), with the key it came from.
pub(crate) fn trainer_kwargs(doc: &Doc) -> Result<Option<Kwargs>, String> {
    for key in [
        "activation_checkpointing_kwargs",
        "gradient_checkpointing_kwargs",
    ] {
        if let Some(m) = kwargs_of(doc, key)? {
            doc.skip(&["gradient_checkpointing_kwargs"]);
            return Ok(Some((m, key)));
        }
    }
    Ok(None)
}

/// Sets `checkpoint_reentrant` to `on` (read off `key`) when this file turns full
/// checkpointing on; a value beside checkpointing off says nothing the job can hold, so it
/// is a note. A framework's default is `Weak`: a value another file states replaces it.
pub(crate) fn set(r: &mut Reading, on: bool, key: &str, strength: Strength) {
    if r.value_of("checkpointing").and_then(Value::as_str) != Some("full") {
        r.note(format!(
            "{key}: use_reentrant {on} read, but this file does not turn checkpointing on"
        ));
        return;
    }
    r.fields.retain(|f| f.path != FIELD);
    match strength {
        Strength::Stated => r.set(FIELD, json!(on), key),
        Strength::Weak => r.set_weak(FIELD, json!(on), key),
    }
}

/// Reads a Trainer's kwargs (`trainer_kind`) into `checkpoint_reentrant`.
pub(crate) fn read_trainer(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let Some((kwargs, key)) = trainer_kwargs(doc)? else {
        return Ok(());
    };
    if let Some(on) = trainer_kind(&kwargs).map_err(|m| format!("{key}.{m}"))? {
        set(r, on, &format!("{key}.use_reentrant"), Strength::Stated);
    }
    // The Trainer's own two keys: `offload` wraps each checkpoint in `save_on_cpu` (its inputs
    // held in host memory), `every_n_layers` > 1 leaves some layers unchecked.
    if kwargs.get("offload").and_then(as_bool) == Some(true) {
        r.technique(
            &format!("{key}.offload"),
            "activation_offload",
            json!("cpu"),
        );
    }
    if let Some(n) = kwargs
        .get("every_n_layers")
        .filter(|n| n.as_u64() != Some(1))
    {
        let what = format!(
            "checkpointing full on one layer in every {}",
            super::doc::short(n)
        );
        r.not_modelled(&format!("{key}.every_n_layers"), &what);
    }
    Ok(())
}

/// After the merge: the field is dropped where the merged job's checkpointing is not full (a
/// later file turned it off), and TRL's rule is applied — a PEFT model under DeepSpeed ZeRO-3
/// with checkpointing runs the reentrant kind whatever the kwargs say (TRL v1.9
/// `sft_trainer.py` lines 1099–1116: "`use_reentrant` is forced to `True`").
pub(crate) fn settle(job: &mut Map<String, Value>, trl: bool, notes: &mut Vec<String>) {
    let full = job.get("checkpointing").and_then(Value::as_str) == Some("full");
    if !full {
        if job.remove(FIELD).is_some() {
            notes.push(format!(
                "{FIELD} dropped: the merged checkpointing is not full, so no checkpoint kind applies"
            ));
        }
        return;
    }
    let zero3 = job.get("framework").and_then(Value::as_str) == Some("deepspeed")
        && job
            .get("parallel")
            .and_then(|p| p.get("zero"))
            .and_then(Value::as_u64)
            == Some(3);
    if trl && zero3 && job.get("peft").is_some_and(|p| !p.is_null()) {
        if job.get(FIELD) == Some(&json!(false)) {
            notes.push(
                "TRL forces use_reentrant true for a PEFT model under DeepSpeed ZeRO-3: the \
                 file's false is replaced"
                    .into(),
            );
        }
        job.insert(FIELD.into(), json!(true));
        notes.push(format!(
            "{FIELD} true: TRL runs reentrant checkpointing for PEFT under DeepSpeed ZeRO-3"
        ));
    }
}
