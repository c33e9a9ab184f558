//! torchtune recipe YAML (`recipes/configs/**`): components named by `_component_`, the
//! model builder with its LoRA settings, batch, accumulation, dtype, and torchtune's memory
//! switches (`enable_activation_checkpointing`, `enable_activation_offloading`,
//! `optimizer_in_bwd`, `compile`), as the recipes read them
//! (`recipes/full_finetune_single_device.py`, `recipes/lora_finetune_single_device.py`).

use super::doc::{bool_of, count_of, number_of, str_of, Doc, Reading};
use serde_json::{json, Map, Value};

const QUIET: &[&str] = &[
    "output_dir",
    "tokenizer",
    "checkpointer",
    "resume_from_checkpoint",
    "save_adapter_weights_only",
    "save_last_epoch_only",
    "epochs_to_save",
    "save_every_n_steps",
    "seed",
    "shuffle",
    "epochs",
    "max_steps_per_epoch",
    "clip_grad_norm",
    "lr_scheduler",
    "metric_logger",
    "log_every_n_steps",
    "log_peak_memory_stats",
    "log_level",
    "device",
    "profiler",
    "low_cpu_ram",
    "dataset",
    "valid_data_files",
    "custom_sharded_layers",
];

/// Whether a document is a torchtune recipe: components named by `_component_`.
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    m.values()
        .any(|v| v.as_object().is_some_and(|o| o.contains_key("_component_")))
}

/// Reads a torchtune recipe into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    r.set_from(doc, "batch_size", "batch", count_of)?;
    r.set_from(doc, "gradient_accumulation_steps", "grad_accum", count_of)?;
    if let Some(t) = doc.section("tokenizer") {
        if let Some(s) = count_of(&t, "max_seq_len")? {
            r.set("seq", json!(s), "tokenizer.max_seq_len");
        }
    }
    if let Some(d) = doc.section("dataset") {
        if bool_of(&d, "packed")? == Some(true) {
            r.technique("dataset.packed", "packing", json!(true));
        }
    }
    // torchtune trains in the dtype it loads (no autocast, no fp32 copy): `dtype: bf16` is the
    // contract's pure `bf16`.
    let mut dtype = None;
    if let Some(d) = str_of(doc, "dtype")? {
        let p = match d.to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => "bf16",
            "fp16" | "float16" => "fp16",
            "fp32" | "float32" => "fp32",
            other => return Err(format!("dtype: '{other}' is not bf16, fp16 or fp32")),
        };
        r.set("precision", json!(p), format!("dtype {d}"));
        dtype = Some(p);
    }
    switches(doc, r)?;
    if let Some(m) = doc.section("model") {
        model(&m, dtype, r)?;
    }
    if let Some(o) = doc.section("optimizer") {
        optimizer(&o, r)?;
    }
    if let Some(l) = doc.section("loss") {
        loss(&l, r)?;
    }
    distributed(doc, r)
}

/// The memory switches: checkpointing, activation offloading, optimizer in backward, compile.
fn switches(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    r.set_checkpointing(doc, "enable_activation_checkpointing")?;
    // A switch the recipe states, on or off, sets the job's field: `False` is the recipe's
    // word as much as `True` (a later file or flag may still override it).
    if let Some(o) = bool_of(doc, "enable_activation_offloading")? {
        let v = json!(if o { "cpu" } else { "none" });
        r.technique("enable_activation_offloading", "activation_offload", v);
    }
    if let Some(b) = bool_of(doc, "optimizer_in_bwd")? {
        r.technique("optimizer_in_bwd", "optimizer_in_backward", json!(b));
    }
    // `compile: True`, or an object of per-part switches (`{model: True, loss: True}`).
    let compile = match doc.get("compile") {
        Some(Value::Object(_)) => Some(true),
        Some(v) => super::doc::as_bool(v),
        None => None,
    };
    if let Some(c) = compile {
        r.technique("compile", "compile", json!(c));
    }
    Ok(())
}

/// The model builder (`torchtune.models.llama3_1.lora_llama3_1_8b`): the preset it names, and
/// LoRA/QLoRA with torchtune's module names mapped to the Hugging Face ones
/// (`output_proj` → `o_proj`; `apply_lora_to_mlp` → w1/w2/w3 = gate/down/up_proj;
/// `apply_lora_to_output` → `lm_head`). The adapters are in the recipe's `dtype`: the recipe
/// builds the model under `set_default_dtype(dtype)`, so `LoRALinear`'s `lora_a`/`lora_b`
/// (`torchtune/modules/peft/lora.py`) are made in it, and
/// `recipes/lora_finetune_single_device.py` checks it
/// (`validate_expected_param_dtype(adapter_params, dtype)`): `peft.adapter_dtype`.
fn model(m: &Doc, dtype: Option<&str>, r: &mut Reading) -> Result<(), String> {
    let Some(c) = str_of(m, "_component_")? else {
        return Ok(());
    };
    let builder = c.rsplit('.').next().unwrap_or(c);
    let (method, base) = if let Some(b) = builder.strip_prefix("qlora_") {
        (Some("qlora"), b)
    } else if let Some(b) = builder.strip_prefix("lora_") {
        (Some("lora"), b)
    } else {
        (None, builder)
    };
    match preset_of(base) {
        Some(id) => r.set("model", json!(id), format!("model._component_ {builder}")),
        None => r.note(format!(
            "model._component_ {c}: no preset of that name; give MODEL (a preset, config.json or Hub repo)"
        )),
    }
    m.skip(&["use_dora", "quantize_base"]);
    let Some(method) = method else { return Ok(()) };
    let mut p = super::doc::lora_of(m, method, "lora_rank", (None, None))?;
    let mut targets: Vec<String> = Vec::new();
    let mut push = |t: &str| {
        if !targets.iter().any(|x| x == t) {
            targets.push(t.to_string());
        }
    };
    for t in super::doc::names_of(m, "lora_attn_modules")?.unwrap_or_default() {
        push(if t == "output_proj" {
            "o_proj"
        } else {
            t.as_str()
        });
    }
    if bool_of(m, "apply_lora_to_mlp")? == Some(true) {
        ["gate_proj", "down_proj", "up_proj"]
            .into_iter()
            .for_each(&mut push);
    }
    if bool_of(m, "apply_lora_to_output")? == Some(true) {
        push("lm_head");
    }
    if !targets.is_empty() {
        p.insert("targets".into(), json!(targets));
    }
    if let Some(d) = number_of(m, "lora_dropout")? {
        p.insert("dropout".into(), json!(d));
    }
    if let Some(d) = dtype.filter(|d| *d != "fp32") {
        p.insert("adapter_dtype".into(), json!(d));
    }
    r.set(
        "peft",
        Value::Object(p),
        format!("model._component_ {builder}"),
    );
    Ok(())
}

/// A torchtune builder's model name (`llama3_1_8b`, `qwen2_5_7b_instruct`) as a preset id, when
/// the catalog has it.
fn preset_of(base: &str) -> Option<String> {
    let b = base.trim_end_matches("_instruct").trim_end_matches("_base");
    let candidates = [
        b.replacen("llama3_2_", "llama-3.2-", 1)
            .replacen("llama3_1_", "llama-3.1-", 1)
            .replacen("llama3_3_", "llama-3.3-", 1)
            .replacen("llama3_", "llama-3-", 1)
            .replacen("llama2_", "llama-2-", 1)
            .replacen("qwen2_5_", "qwen2.5-", 1)
            .replacen("qwen3_", "qwen3-", 1)
            .replacen("qwen2_", "qwen2-", 1)
            .replacen("gemma2_", "gemma-2-", 1)
            .replacen("gemma_", "gemma-", 1)
            .replace('_', "-"),
        format!("{}-v0.1", b.replace('_', "-")),
    ];
    candidates
        .into_iter()
        .find_map(|c| crate::presets::find(&c).map(|p| p.id.to_string()))
}

/// The optimizer component; `fused: True` on torch's AdamW is the fused kernel.
fn optimizer(o: &Doc, r: &mut Reading) -> Result<(), String> {
    o.skip(&["lr", "weight_decay", "betas", "eps", "amsgrad"]);
    let Some(c) = str_of(o, "_component_")? else {
        return Ok(());
    };
    let fused = bool_of(o, "fused")? == Some(true);
    let momentum = number_of(o, "momentum")?.unwrap_or(0.0) > 0.0;
    let name = c.rsplit('.').next().unwrap_or(c);
    let v = match (c, name) {
        (_, "AdamW") if c.starts_with("torch.") && fused => Some("adamw-fused"),
        (_, "AdamW") if c.starts_with("torch.") => Some("adamw"),
        (_, "Adam") if c.starts_with("torch.") => Some("adam"),
        (_, "SGD") => Some(if momentum { "sgd-momentum" } else { "sgd" }),
        (_, "AdamW8bit") if c.starts_with("bitsandbytes") => Some("adamw-8bit"),
        (_, "PagedAdamW8bit") => {
            super::training_args::set_optimizer(
                r,
                &format!("optimizer {name}"),
                "paged_adamw_8bit",
            );
            None
        }
        (_, "PagedAdamW") | (_, "PagedAdamW32bit") => {
            super::training_args::set_optimizer(
                r,
                &format!("optimizer {name}"),
                "paged_adamw_32bit",
            );
            None
        }
        (_, "Adafactor") => Some("adafactor"),
        (_, "Lion") => Some("lion"),
        _ => {
            r.not_modelled(&format!("optimizer {c}"), "optimizer");
            None
        }
    };
    if let Some(v) = v {
        r.set(
            "optimizer",
            json!(v),
            format!("optimizer {c}{}", if fused { " fused" } else { "" }),
        );
    }
    Ok(())
}

/// The loss: torchtune's `LinearCrossEntropyLoss` masks the ignored tokens out, then projects
/// and cross-entropies the hidden state in 8 chunks through autograd (`loss: linear-ce`,
/// `core/src/estimate/linear_ce.rs`); `CEWithChunkedOutputLoss` materializes the 16-bit logits
/// in 8 chunks and upcasts them chunk by chunk (`loss: chunked-output`). Another
/// `num_output_chunks`, or `mask_ignored_tokens: false`, is listed as not modelled.
fn loss(l: &Doc, r: &mut Reading) -> Result<(), String> {
    let Some(c) = str_of(l, "_component_")? else {
        return Ok(());
    };
    let name = c.rsplit('.').next().unwrap_or(c);
    match name {
        "LinearCrossEntropyLoss" => {
            r.set("loss", json!("linear-ce"), format!("loss {name}"));
            if bool_of(l, "mask_ignored_tokens")? == Some(false) {
                r.not_modelled("loss mask_ignored_tokens false", "loss: linear-ce (masked)");
            }
            chunks_modelled(l, r, "linear-ce")?;
        }
        "CEWithChunkedOutputLoss" => {
            r.set("loss", json!("chunked-output"), format!("loss {name}"));
            chunks_modelled(l, r, "chunked-output")?;
        }
        "DPOLoss" | "RSOLoss" | "SimPOLoss" => r.not_modelled(
            &format!("loss {name}"),
            "task rl, rl.algorithm dpo, rl.reference_model",
        ),
        _ => {}
    }
    l.skip(&[
        "num_output_chunks",
        "ignore_index",
        "mask_ignored_tokens",
        "tp_enabled",
    ]);
    Ok(())
}

/// A chunked loss's `num_output_chunks` other than the 8 modelled, listed as not modelled.
fn chunks_modelled(l: &Doc, r: &mut Reading, loss: &str) -> Result<(), String> {
    if let Some(n) = count_of(l, "num_output_chunks")?.filter(|&n| n != 8) {
        r.not_modelled(
            &format!("loss num_output_chunks {n}"),
            &format!("loss: {loss} (8 chunks)"),
        );
    }
    Ok(())
}

/// Distributed recipes' FSDP switches (`fsdp_cpu_offload`, `fsdp_reshard_after_forward`).
fn distributed(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    if let Some(o) = bool_of(doc, "fsdp_cpu_offload")? {
        r.set("framework", json!("fsdp"), "fsdp_cpu_offload");
        r.set(
            "parallel.offload",
            json!(if o { "optimizer+params" } else { "none" }),
            "fsdp_cpu_offload",
        );
    }
    if let Some(re) = bool_of(doc, "fsdp_reshard_after_forward")? {
        r.set("framework", json!("fsdp"), "fsdp_reshard_after_forward");
        r.set(
            "parallel.zero",
            json!(if re { 3 } else { 2 }),
            "fsdp_reshard_after_forward",
        );
    }
    Ok(())
}
