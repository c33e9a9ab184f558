//! LLaMA-Factory training YAML (`llamafactory-cli train x.yaml`): its model, method and data
//! arguments (`src/llamafactory/hparams/{model,finetuning,data}_args.py`) beside the
//! TrainingArguments it passes through.

use super::doc::{bool_of, count_of, lora_of, names_of, number_of, str_of, Doc, Reading, Strength};
use serde_json::{json, Map, Value};

const QUIET: &[&str] = &[
    "trust_remote_code",
    "dataset",
    "eval_dataset",
    "dataset_dir",
    "template",
    "max_samples",
    "overwrite_cache",
    "preprocessing_num_workers",
    "dataloader_num_workers",
    "plot_loss",
    "val_size",
    "quantization_method",
    "do_train",
    "ddp_timeout",
    "resume_from_checkpoint",
    "report_to",
    "run_name",
    "include_num_input_tokens_seen",
];

/// Whether a document is a LLaMA-Factory recipe (its own key names beside the model path).
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    [
        "finetuning_type",
        "cutoff_len",
        "lora_target",
        "template",
        "stage",
        "quantization_bit",
    ]
    .iter()
    .any(|k| m.contains_key(*k))
}

/// Reads a LLaMA-Factory recipe into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    super::training_args::read_trainer(doc, r)?;
    r.set_from(doc, "model_name_or_path", "model", str_of)?;
    r.set_from(doc, "cutoff_len", "seq", count_of)?;
    precision(doc, r)?;
    checkpointing(doc, r)?;
    if let Some(f) = str_of(doc, "flash_attn")? {
        let a = match f.to_ascii_lowercase().as_str() {
            "fa2" | "fa3" => Some("flash"),
            "sdpa" => Some("sdpa"),
            "disabled" => Some("eager"),
            _ => None, // auto: transformers' choice (sdpa where available)
        };
        if let Some(a) = a {
            r.set("attention", json!(a), format!("flash_attn {f}"));
        }
    }
    method(doc, r)?;
    if bool_of(doc, "packing")? == Some(true) || bool_of(doc, "neat_packing")? == Some(true) {
        r.technique("packing / neat_packing", "packing", json!(true));
    }
    if bool_of(doc, "enable_liger_kernel")? == Some(true) {
        r.set("loss", json!("chunked"), "enable_liger_kernel");
    }
    if let Some(stage) = str_of(doc, "stage")? {
        match stage.to_ascii_lowercase().as_str() {
            "sft" | "pt" => {}
            s => r.not_modelled(&format!("stage {s}"), &format!("task rl, rl.algorithm {s}")),
        }
    }
    Ok(())
}

/// `pure_bf16` trains bf16 parameters without an fp32 copy; otherwise LLaMA-Factory upcasts the
/// trainable parameters to fp32 (`model/adapter.py`, `cast_trainable_params_to_fp32`) and
/// autocasts: the `bf16: true` of TrainingArguments, `bf16-mixed`.
fn precision(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    if bool_of(doc, "pure_bf16")? == Some(true) {
        r.fields.retain(|f| f.path != "precision");
        r.set("precision", json!("bf16"), "pure_bf16");
    }
    Ok(())
}

/// LLaMA-Factory checkpoints by default (`model/model_utils/checkpointing.py`: enabled unless
/// `disable_gradient_checkpointing`).
fn checkpointing(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let off = bool_of(doc, "disable_gradient_checkpointing")? == Some(true);
    if r.value_of("checkpointing").is_none() {
        let key = if off {
            "disable_gradient_checkpointing"
        } else {
            "(LLaMA-Factory default: on)"
        };
        r.set(
            "checkpointing",
            json!(if off { "none" } else { "full" }),
            key,
        );
    }
    checkpoint_kind(doc, r)
}

/// The checkpoint's kind (`reentrant.rs`): LLaMA-Factory enables checkpointing itself
/// (`model/model_utils/checkpointing.py` `prepare_model_for_training`, commit ff6d4d1) with
/// `{"use_reentrant": model_args.use_reentrant_gc}`, `use_reentrant_gc` defaulting to `True`
/// (`hparams/model_args.py`): reentrant unless the recipe says otherwise; `use_unsloth_gc`
/// runs Unsloth's `autograd.Function` (forward under `no_grad`: the reentrant kind). FSDP2
/// (`FSDP_VERSION=2` in accelerate's environment) and KTransformers (`use_kt`) make it
/// `False`.
fn checkpoint_kind(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let unsloth = bool_of(doc, "use_unsloth_gc")? == Some(true);
    let kt = bool_of(doc, "use_kt")? == Some(true);
    let (on, key, strength) = match bool_of(doc, "use_reentrant_gc")? {
        _ if kt => (false, "use_kt", Strength::Stated),
        _ if unsloth => (true, "use_unsloth_gc", Strength::Stated),
        Some(on) => (on, "use_reentrant_gc", Strength::Stated),
        None => (
            true,
            "(LLaMA-Factory default: use_reentrant_gc true)",
            Strength::Weak,
        ),
    };
    if r.value_of("checkpointing").and_then(Value::as_str) == Some("full") {
        super::reentrant::set(r, on, key, strength);
        if strength == Strength::Weak {
            r.note("checkpoint_reentrant true: LLaMA-Factory's use_reentrant_gc default (false under FSDP2)");
        }
    }
    Ok(())
}

/// `finetuning_type` lora/full/freeze with `lora_rank` (default 8), `lora_alpha` (default
/// 2 × rank), `lora_target` (`all` = every linear layer), and `quantization_bit` (bitsandbytes
/// by default: 4 → nf4 with double quantization, `quantization_type`/`double_quantization`
/// defaults nf4/true; 8 → int8).
fn method(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let bits = count_of(doc, "quantization_bit")?;
    let kind = str_of(doc, "quantization_type")?
        .unwrap_or("nf4")
        .to_ascii_lowercase();
    let dq = bool_of(doc, "double_quantization")?.unwrap_or(true);
    let weights = match bits {
        None => None,
        Some(4) => Some(match (kind.as_str(), dq) {
            ("fp4", _) => "fp4",
            (_, true) => "nf4-dq",
            _ => "nf4",
        }),
        Some(8) => Some("int8"),
        Some(b) => {
            r.not_modelled(&format!("quantization_bit {b}"), "weights");
            None
        }
    };
    if let Some(w) = weights {
        r.set(
            "weights",
            json!(w),
            format!("quantization_bit {}", bits.unwrap_or(0)),
        );
    }
    let ft = str_of(doc, "finetuning_type")?
        .unwrap_or("lora")
        .to_ascii_lowercase();
    match ft.as_str() {
        "lora" => {
            let method = if bits == Some(4) { "qlora" } else { "lora" };
            let mut p = lora_of(doc, method, "lora_rank", (Some(8), None))?;
            let targets = names_of(doc, "lora_target")?.unwrap_or_else(|| vec!["all".into()]);
            let targets: Vec<String> = if targets.iter().any(|t| t == "all") {
                r.note("lora_target all: every linear layer, read as the Llama-style names q/k/v/o/gate/up/down_proj");
                vramscope_core::job::LLAMA_LINEARS
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            } else {
                targets
            };
            p.insert("targets".into(), json!(targets));
            if let Some(d) = number_of(doc, "lora_dropout")? {
                p.insert("dropout".into(), json!(d));
            }
            r.set("peft", Value::Object(p), "finetuning_type lora");
        }
        "full" => {}
        other => r.not_modelled(&format!("finetuning_type {other}"), "peft"),
    }
    Ok(())
}
