//! axolotl recipe YAML (`axolotl/utils/schemas/config.py`, the `AxolotlInputConfig` fields):
//! base model, adapter and LoRA settings, 8/4-bit loading, sequence length and packing, micro
//! batch, optimizer, checkpointing, attention kernel, DeepSpeed/FSDP, and the RL trainers.

use super::doc::{bool_of, count_of, lora_of, names_of, number_of, str_of, Doc, Reading, Strength};
use serde_json::{json, Map, Value};
use vramscope_core::job::LLAMA_LINEARS;

const QUIET: &[&str] = &[
    "model_type",
    "tokenizer_type",
    "strict",
    "datasets",
    "test_datasets",
    "dataset_prepared_path",
    "val_set_size",
    "output_dir",
    "lora_fan_in_fan_out",
    "lora_model_dir",
    "wandb_project",
    "wandb_entity",
    "wandb_watch",
    "wandb_name",
    "wandb_log_model",
    "num_epochs",
    "lr_scheduler",
    "learning_rate",
    "train_on_inputs",
    "group_by_length",
    "tf32",
    "early_stopping_patience",
    "resume_from_checkpoint",
    "local_rank",
    "logging_steps",
    "warmup_steps",
    "warmup_ratio",
    "evals_per_epoch",
    "eval_table_size",
    "saves_per_epoch",
    "debug",
    "weight_decay",
    "special_tokens",
    "pad_to_sequence_len",
    "eval_sample_packing",
    "chat_template",
    "hub_model_id",
    "save_first_step",
    "max_grad_norm",
];

/// Whether a document is an axolotl recipe (its own key names).
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    [
        "base_model",
        "micro_batch_size",
        "sequence_len",
        "lora_target_linear",
        "sample_packing",
    ]
    .iter()
    .any(|k| m.contains_key(*k))
}

/// Reads an axolotl recipe into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    r.set_from(doc, "base_model", "model", str_of)?;
    r.set_from(doc, "sequence_len", "seq", count_of)?;
    r.set_from(doc, "micro_batch_size", "batch", count_of)?;
    r.set_from(doc, "gradient_accumulation_steps", "grad_accum", count_of)?;
    if bool_of(doc, "sample_packing")? == Some(true) {
        r.technique("sample_packing", "packing", json!(true));
    }
    super::training_args::precision_flags(doc, r)?;
    if let Some(o) = str_of(doc, "optimizer")? {
        super::training_args::set_optimizer(r, &format!("optimizer {o}"), o);
    }
    checkpointing(doc, r)?;
    attention(doc, r)?;
    weights_and_peft(doc, r)?;
    if let Some(c) = bool_of(doc, "torch_compile")? {
        r.technique("torch_compile", "compile", json!(c));
    }
    if bool_of(doc, "liger_fused_linear_cross_entropy")? == Some(true)
        || bool_of(doc, "cut_cross_entropy")? == Some(true)
    {
        r.set(
            "loss",
            json!("chunked"),
            "liger_fused_linear_cross_entropy / cut_cross_entropy",
        );
    }
    if let Some(rl) = str_of(doc, "rl")? {
        r.not_modelled(&format!("rl {rl}"), &format!("task rl, rl.algorithm {rl}"));
    }
    super::training_args::deepspeed_ref(doc, r)?;
    super::training_args::fsdp(doc, r)?;
    Ok(())
}

/// `gradient_checkpointing`: true, or `offload` (checkpoints moved to the host).
fn checkpointing(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    match doc.get("gradient_checkpointing") {
        None => {}
        Some(Value::String(s)) if s.eq_ignore_ascii_case("offload") => {
            r.set(
                "checkpointing",
                json!("full"),
                "gradient_checkpointing offload",
            );
            r.technique(
                "gradient_checkpointing offload",
                "activation_offload",
                json!("cpu"),
            );
        }
        Some(_) => {
            let on = bool_of(doc, "gradient_checkpointing")? == Some(true);
            r.set(
                "checkpointing",
                json!(if on { "full" } else { "none" }),
                "gradient_checkpointing",
            );
        }
    }
    checkpoint_kind(doc, r)
}

/// The checkpoint's kind (`reentrant.rs`): `gradient_checkpointing_kwargs` as the Trainer
/// reads it; without them axolotl's `normalize_config` (`utils/config/__init__.py`, commit
/// 067b021) sets `{"use_reentrant": True}` when checkpointing is on and neither
/// `unfrozen_parameters` nor `rl` is set (its builder passes `{"use_reentrant": False}`
/// otherwise: the job's default). The `offload` checkpointer (`CPU_Offloaded_Gradient_
/// Checkpointer`, an `autograd.Function` whose forward runs under `no_grad`) is of the
/// reentrant kind too. axolotl forces `False` for Gemma 4, whose model type a recipe names
/// only through its `base_model`: a note says so.
fn checkpoint_kind(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    if doc.has("gradient_checkpointing_kwargs") {
        return super::reentrant::read_trainer(doc, r);
    }
    if doc.has("unfrozen_parameters") || doc.has("rl") {
        return Ok(());
    }
    if r.value_of("checkpointing").and_then(Value::as_str) == Some("full") {
        let key = "(axolotl default: gradient_checkpointing_kwargs {use_reentrant: true})";
        super::reentrant::set(r, true, key, Strength::Weak);
        r.note("checkpoint_reentrant true: axolotl's default kwargs (not for Gemma 4, which it runs non-reentrant)");
    }
    Ok(())
}

fn attention(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    if bool_of(doc, "flash_attention")? == Some(true) {
        r.set("attention", json!("flash"), "flash_attention");
    } else if bool_of(doc, "sdp_attention")? == Some(true) {
        r.set("attention", json!("sdpa"), "sdp_attention");
    } else if bool_of(doc, "eager_attention")? == Some(true) {
        r.set("attention", json!("eager"), "eager_attention");
    }
    if bool_of(doc, "xformers_attention")? == Some(true) {
        r.not_modelled(
            "xformers_attention",
            "attention: xformers' memory-efficient kernel keeps no s×s tensor, like flash",
        );
    }
    Ok(())
}

/// `load_in_8bit` / `load_in_4bit` and `adapter` with its LoRA settings. axolotl's 4-bit load
/// uses nf4 with double quantization (`bnb_4bit_use_double_quant=True`,
/// `axolotl/loaders/model.py`): the contract's `nf4-dq`, which `qlora` implies.
fn weights_and_peft(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let four = bool_of(doc, "load_in_4bit")? == Some(true);
    let eight = bool_of(doc, "load_in_8bit")? == Some(true);
    if eight && !four {
        r.set("weights", json!("int8"), "load_in_8bit");
    }
    let Some(adapter) = str_of(doc, "adapter")? else {
        if four {
            r.set("weights", json!("nf4-dq"), "load_in_4bit");
        }
        return Ok(());
    };
    let method = match adapter.to_ascii_lowercase().as_str() {
        "qlora" => "qlora",
        "lora" if four => "qlora",
        "lora" => "lora",
        other => {
            r.not_modelled(&format!("adapter {other}"), "peft");
            return Ok(());
        }
    };
    let mut p = lora_of(doc, method, "lora_r", (None, None))?;
    let mut targets = names_of(doc, "lora_target_modules")?.unwrap_or_default();
    if bool_of(doc, "lora_target_linear")? == Some(true) {
        for t in LLAMA_LINEARS {
            if !targets.iter().any(|x| x == t) {
                targets.push(t.to_string());
            }
        }
        r.note("lora_target_linear: every linear layer, read as the Llama-style names q/k/v/o/gate/up/down_proj");
    }
    if !targets.is_empty() {
        p.insert("targets".into(), json!(targets));
    }
    if let Some(d) = number_of(doc, "lora_dropout")? {
        p.insert("dropout".into(), json!(d));
    }
    adapter_dtype(doc, four || eight, &mut p, r)?;
    // PEFT's `modules_to_save`: a trainable full copy of each named module beside the
    // adapters (axolotl passes the list to `LoraConfig`, `axolotl/loaders/adapter.py`).
    if let Some(m) = names_of(doc, "lora_modules_to_save")?.filter(|m| !m.is_empty()) {
        r.note(format!(
            "lora_modules_to_save {}: trained in full beside the adapters (peft.modules_to_save)",
            m.join(",")
        ));
        p.insert("modules_to_save".into(), json!(m));
    }
    r.set("peft", Value::Object(p), format!("adapter {adapter}"));
    Ok(())
}

/// `peft_autocast_adapter_dtype: false`: axolotl passes `autocast_adapter_dtype=False` to
/// `get_peft_model` (`axolotl/loaders/adapter.py`, `load_lora`), so PEFT leaves the adapters
/// in the dtype it moved them to, the base weight's (`_move_adapter_to_device_of_base_layer`,
/// peft `tuners/tuners_utils.py`): the 16-bit dtype axolotl loads in (`bf16`/`fp16`). Over a
/// 4- or 8-bit base the stored weight is an integer tensor, not a float, and the adapters stay
/// fp32 (a note says so).
fn adapter_dtype(
    doc: &Doc,
    quantized: bool,
    p: &mut Map<String, Value>,
    r: &mut Reading,
) -> Result<(), String> {
    if bool_of(doc, "peft_autocast_adapter_dtype")? != Some(false) {
        return Ok(());
    }
    if quantized {
        r.note("peft_autocast_adapter_dtype false: over 4- or 8-bit weights PEFT keeps the adapters in fp32");
        return Ok(());
    }
    // `bf16: auto` is left to the default (bf16 where the GPU has it).
    let auto = r.autos.iter().any(|(f, _)| *f == "precision");
    let precision = r
        .value_of("precision")
        .and_then(Value::as_str)
        .unwrap_or(if auto { "bf16" } else { "" });
    let dtype = if precision.starts_with("bf16") {
        "bf16"
    } else if precision.starts_with("fp16") {
        "fp16"
    } else {
        return Ok(());
    };
    p.insert("adapter_dtype".into(), json!(dtype));
    Ok(())
}
