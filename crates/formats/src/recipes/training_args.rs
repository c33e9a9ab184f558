//! Hugging Face `TrainingArguments` as JSON or YAML (`transformers/training_args.py`), and the
//! names axolotl, LLaMA-Factory and TRL share with it: `optim` names, bf16/fp16, gradient
//! checkpointing, `deepspeed`, `fsdp`, `torch_compile`; plus TRL's `ModelConfig` keys a TRL YAML
//! carries beside them (`model_name_or_path`, `torch_dtype`, `attn_implementation`, PEFT).

use super::doc::{bool_of, count_of, names_of, str_of, Doc, Reading};
use serde_json::{json, Map, Value};

/// Keys TrainingArguments carries that change no bytes on the GPU.
pub(crate) const QUIET: &[&str] = &[
    "output_dir",
    "overwrite_output_dir",
    "do_train",
    "do_eval",
    "do_predict",
    "eval_strategy",
    "evaluation_strategy",
    "eval_steps",
    "per_device_eval_batch_size",
    "learning_rate",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "num_train_epochs",
    "max_steps",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_ratio",
    "warmup_steps",
    "log_level",
    "logging_dir",
    "logging_strategy",
    "logging_first_step",
    "logging_steps",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "save_only_model",
    "seed",
    "data_seed",
    "report_to",
    "run_name",
    "push_to_hub",
    "hub_model_id",
    "hub_strategy",
    "hub_private_repo",
    "ddp_timeout",
    "dataloader_num_workers",
    "remove_unused_columns",
    "resume_from_checkpoint",
    "tf32",
    "model_revision",
    "trust_remote_code",
    "dataset_name",
    "dataset_config",
    "dataset_configs",
    "dataset_train_split",
    "dataset_test_split",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
    "optim_args",
    "bf16_full_eval",
    "fp16_full_eval",
    "local_rank",
];

/// `optim` / `optimizer` names (`transformers.training_args.OptimizerNames`) → contract values.
/// `Some((value, fallback))`: the fallback is what this build's job accepts when it does not
/// yet accept the value (bitsandbytes' paged optimizers hold the same states, in unified
/// memory).
pub(crate) fn optimizer(name: &str) -> Option<(&'static str, Option<&'static str>)> {
    let v = match name.trim().to_ascii_lowercase().as_str() {
        "adamw_torch" | "adamw_hf" | "adamw" | "adamw_torch_npu_fused" => ("adamw", None),
        "adamw_torch_fused" | "adamw_apex_fused" | "adamw_torch_xla" => ("adamw-fused", None),
        "adamw_bnb_8bit" | "adamw_8bit" | "adamw8bit" => ("adamw-8bit", None),
        "paged_adamw_8bit" => ("adamw-8bit-paged", Some("adamw-8bit")),
        "paged_adamw_32bit" | "paged_adamw" => ("adamw-paged", Some("adamw")),
        "adafactor" => ("adafactor", None),
        "sgd" => ("sgd", None),
        "lion_32bit" | "lion" => ("lion", None),
        _ => return None,
    };
    Some(v)
}

/// Sets the optimizer from a trainer `optim` name, or lists it as not modelled; `label` names
/// the file's key and value in messages.
pub(crate) fn set_optimizer(r: &mut Reading, label: &str, name: &str) {
    match optimizer(name) {
        Some((v, fallback)) => {
            let k = label.to_string();
            if super::doc::accepts("optimizer", &json!(v)) {
                r.set("optimizer", json!(v), k.clone());
                if is_hf_adamw(name) {
                    r.set("optimizer_impl", json!("hf"), k);
                }
            } else if let Some(f) = fallback {
                r.not_modelled(&k, &format!("optimizer {v}; estimated as {f}"));
                r.set("optimizer", json!(f), k);
            } else {
                r.not_modelled(&k, &format!("optimizer {v}"));
            }
        }
        None => r.not_modelled(label, "optimizer"),
    }
}

/// `adamw_hf`: transformers 4.x's own `transformers.optimization.AdamW` (a per-parameter loop
/// of tensor operations, `optimization.py`), which `OptimizerNames.ADAMW_HF` selected until
/// transformers removed it; the job's `optimizer_impl: "hf"` models that loop.
fn is_hf_adamw(name: &str) -> bool {
    name.trim().eq_ignore_ascii_case("adamw_hf")
}

/// `attn_implementation` names → contract `attention`.
pub(crate) fn attention(name: &str) -> Option<&'static str> {
    match name.trim().to_ascii_lowercase().as_str() {
        "flash_attention_2"
        | "flash_attention_3"
        | "flash_attn"
        | "fa2"
        | "kernels-community/vllm-flash-attn3" => Some("flash"),
        "sdpa" => Some("sdpa"),
        "eager" => Some("eager"),
        _ => None,
    }
}

/// `bf16` / `fp16` flags → `precision` (autocast over the parameters as loaded:
/// the contract's `*-mixed`). `"auto"` (axolotl) is left to vramscope's default, which is
/// what `auto` does: bf16 where the GPU has it, else fp16.
pub(crate) fn precision_flags(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let flag = |key: &str| -> Result<Option<Value>, String> { Ok(doc.get(key).cloned()) };
    let (bf, fp) = (flag("bf16")?, flag("fp16")?);
    if bf.as_ref().is_some_and(super::doc::is_auto) || fp.as_ref().is_some_and(super::doc::is_auto)
    {
        // axolotl: bf16 where the GPU has it, else fp16 — what vramscope's default does too.
        r.autos.push(("precision", "bf16".into()));
        return Ok(());
    }
    let (b, f) = (bool_of(doc, "bf16")?, bool_of(doc, "fp16")?);
    match (b, f) {
        (Some(true), Some(true)) => return Err("bf16 and fp16 are both true".into()),
        (Some(true), _) => r.set("precision", json!("bf16-mixed"), "bf16"),
        (_, Some(true)) => r.set("precision", json!("fp16-mixed"), "fp16"),
        (Some(false), _) | (_, Some(false)) => r.set("precision", json!("fp32"), "bf16/fp16 false"),
        (None, None) => {}
    }
    Ok(())
}

/// `deepspeed`: a path (read as another file) or an inline dict (read here).
pub(crate) fn deepspeed_ref(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    match doc.get("deepspeed") {
        None => Ok(()),
        Some(Value::String(p)) if !p.trim().is_empty() => {
            r.set("framework", json!("deepspeed"), "deepspeed");
            r.refs.push(("deepspeed".into(), p.trim().to_string()));
            Ok(())
        }
        Some(Value::Object(_)) => {
            let d = doc.section("deepspeed").expect("an object");
            super::deepspeed::read(&d, r)
        }
        Some(Value::String(_)) => Ok(()),
        Some(v) => Err(format!("deepspeed: expected a path or an object (got {v})")),
    }
}

/// `fsdp`: TrainingArguments' string (`"full_shard auto_wrap offload"`) or list, and
/// `fsdp_config` (`activation_checkpointing`, `reshard_after_forward` for FSDP2).
pub(crate) fn fsdp(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let opts: Vec<String> = match doc.get("fsdp") {
        None => Vec::new(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_ascii_lowercase).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_ascii_lowercase)
                    .ok_or_else(|| format!("fsdp: expected option names (got {v})"))
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Bool(false)) => Vec::new(),
        Some(v) => {
            return Err(format!(
                "fsdp: expected options such as \"full_shard auto_wrap\" (got {v})"
            ))
        }
    };
    let has = |o: &str| opts.iter().any(|x| x == o);
    let zero = if has("full_shard") || has("hybrid_shard") {
        Some(3)
    } else if has("shard_grad_op") || has("hybrid_shard_zero2") {
        Some(2)
    } else if has("no_shard") {
        Some(0)
    } else {
        None
    };
    if let Some(z) = zero {
        r.set("framework", json!("fsdp"), "fsdp");
        r.set(
            "parallel.zero",
            json!(z),
            format!("fsdp {}", opts.join(" ")),
        );
        if has("hybrid_shard") || has("hybrid_shard_zero2") {
            r.note("fsdp hybrid_shard: sharded within a node, replicated across nodes; read as one node");
        }
    }
    if has("offload") {
        r.set(
            "parallel.offload",
            json!("optimizer+params"),
            "fsdp offload",
        );
    }
    if let Some(c) = doc.section("fsdp_config") {
        super::accelerate::fsdp_config(&c, r)?;
    }
    Ok(())
}

/// The TrainingArguments keys every trainer-based format shares.
pub(crate) fn read_trainer(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    r.set_from(doc, "per_device_train_batch_size", "batch", count_of)?;
    r.set_from(doc, "gradient_accumulation_steps", "grad_accum", count_of)?;
    precision_flags(doc, r)?;
    if let Some(o) = str_of(doc, "optim")? {
        set_optimizer(r, &format!("optim {o}"), o);
    }
    // transformers' gradient checkpointing recomputes each decoder layer from its input.
    // transformers 5.24 names it `activation_checkpointing`; `gradient_checkpointing` is the
    // deprecated alias, used only when the new name is unset (`training_args.py`).
    if doc.has("activation_checkpointing") {
        r.set_checkpointing(doc, "activation_checkpointing")?;
        doc.skip(&["gradient_checkpointing"]);
    } else {
        r.set_checkpointing(doc, "gradient_checkpointing")?;
    }
    super::reentrant::read_trainer(doc, r)?;
    if let Some(c) = bool_of(doc, "torch_compile")? {
        r.technique("torch_compile", "compile", json!(c));
    }
    deepspeed_ref(doc, r)?;
    fsdp(doc, r)?;
    Ok(())
}

/// TRL's `ModelConfig` keys (`trl/trainer/model_config.py`) and the model keys LLaMA-Factory
/// shares: the model, its load dtype and attention kernel, PEFT and bitsandbytes loading.
pub(crate) fn read_model_args(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    r.set_from(doc, "model_name_or_path", "model", str_of)?;
    if let Some(a) = str_of(doc, "attn_implementation")? {
        r.set_known(
            "attention",
            attention(a),
            format!("attn_implementation {a}"),
        );
    }
    if let Some(d) = str_of(doc, "torch_dtype")?.or(str_of(doc, "dtype")?) {
        // Weights loaded in 16 bit train in 16 bit: gradients and AdamW states take the
        // parameters' dtype (torch.optim creates states `zeros_like(param)`). Weak: DeepSpeed
        // or a PEFT base decide otherwise.
        let pure = match d.to_ascii_lowercase().as_str() {
            "bfloat16" | "bf16" => Some("bf16"),
            "float16" | "fp16" => Some("fp16"),
            "float32" | "fp32" => Some("fp32"),
            _ => None,
        };
        if let Some(p) = pure {
            // The autocast flag adds nothing over weights already in that dtype.
            let mixed = format!("{p}-mixed");
            r.fields
                .retain(|f| !(f.path == "precision" && f.value.as_str() == Some(mixed.as_str())));
            r.set_weak("precision", json!(p), format!("torch_dtype {d}"));
        }
    }
    let four = bool_of(doc, "load_in_4bit")? == Some(true);
    let eight = bool_of(doc, "load_in_8bit")? == Some(true);
    if four {
        let nested = bool_of(doc, "use_bnb_nested_quant")? == Some(true);
        let kind = str_of(doc, "bnb_4bit_quant_type")?
            .unwrap_or("nf4")
            .to_ascii_lowercase();
        let w = match (kind.as_str(), nested) {
            ("fp4", _) => "fp4",
            (_, true) => "nf4-dq",
            _ => "nf4",
        };
        r.set("weights", json!(w), "load_in_4bit");
    } else if eight {
        r.set("weights", json!("int8"), "load_in_8bit");
    }
    if bool_of(doc, "use_peft")? == Some(true) {
        let method = if four { "qlora" } else { "lora" };
        // TRL ModelConfig defaults: lora_r 16, lora_alpha 32.
        let mut p = super::doc::lora_of(doc, method, "lora_r", (Some(16), Some(32.0)))?;
        if let Some(t) = names_of(doc, "lora_target_modules")? {
            p.insert("targets".into(), json!(t));
        }
        r.set("peft", Value::Object(p), "use_peft");
    }
    doc.skip(&[
        "lora_dropout",
        "use_bnb_nested_quant",
        "bnb_4bit_quant_type",
    ]);
    Ok(())
}

/// Whether a document looks like TrainingArguments (JSON or YAML).
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    [
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "optim",
        "output_dir",
        "num_train_epochs",
        "learning_rate",
    ]
    .iter()
    .any(|k| m.contains_key(*k))
}

/// Reads TrainingArguments.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    read_trainer(doc, r)?;
    read_model_args(doc, r)
}
