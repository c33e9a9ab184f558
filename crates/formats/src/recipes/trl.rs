//! TRL trainer configs as YAML (`trl sft|dpo|grpo --config x.yaml`, open-r1's recipes): the
//! TrainingArguments they extend and TRL's `ModelConfig` (both read by `training_args`), plus
//! what each trainer adds (`trl/trainer/{sft,dpo,grpo}_config.py`): sequence lengths, packing,
//! the DPO reference model, GRPO's generations and its vLLM generator. These map to the
//! contract's `rl` field when this build's job accepts it, else they are listed as not
//! modelled yet.

use super::doc::{bool_of, count_of, number_of, str_of, Doc, Reading};
use serde_json::{json, Map, Value};

/// Keys only TRL's trainer configs write.
const GRPO_KEYS: &[&str] = &[
    "num_generations",
    "use_vllm",
    "vllm_mode",
    "max_completion_length",
    "reward_funcs",
];
const DPO_KEYS: &[&str] = &[
    "beta",
    "loss_type",
    "precompute_ref_log_probs",
    "ref_model_init_kwargs",
    "rpo_alpha",
];
const SFT_KEYS: &[&str] = &[
    "packing",
    "dataset_text_field",
    "max_seq_length",
    "completion_only_loss",
    "assistant_only_loss",
];

const QUIET: &[&str] = &[
    "system_prompt",
    "log_completions",
    "reward_funcs",
    "reward_weights",
    "temperature",
    "top_p",
    "top_k",
    "dataset_text_field",
    "dataset_num_proc",
    "num_iterations",
    "epsilon",
    "scale_rewards",
    "loss_type",
    "mask_truncated_completions",
    "chat_template",
];

/// Which TRL trainer a document configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trainer {
    Grpo,
    Dpo,
    Sft,
}

/// Whether a document is a TRL trainer config, and which.
pub(crate) fn detect(m: &Map<String, Value>) -> Option<Trainer> {
    let any = |keys: &[&str]| keys.iter().any(|k| m.contains_key(*k));
    if any(GRPO_KEYS) {
        Some(Trainer::Grpo)
    } else if any(DPO_KEYS) {
        Some(Trainer::Dpo)
    } else if any(SFT_KEYS) {
        Some(Trainer::Sft)
    } else {
        None
    }
}

/// Reads a TRL config into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading, t: Trainer) -> Result<(), String> {
    doc.skip(QUIET);
    super::training_args::read_trainer(doc, r)?;
    super::training_args::read_model_args(doc, r)?;
    default_checkpointing(doc, r);
    if bool_of(doc, "packing")? == Some(true) {
        r.technique("packing", "packing", json!(true));
    }
    if bool_of(doc, "padding_free")? == Some(true) {
        r.technique("padding_free", "packing", json!(true));
    }
    match t {
        Trainer::Sft => {
            let len = count_of(doc, "max_length")?.map(|n| (n, "max_length"));
            let len = len.or(count_of(doc, "max_seq_length")?.map(|n| (n, "max_seq_length")));
            if let Some((n, key)) = len {
                r.set("seq", json!(n), key);
            }
            Ok(())
        }
        Trainer::Dpo => dpo(doc, r),
        Trainer::Grpo => grpo(doc, r),
    }
}

/// TRL ≥ 0.22 defaults every trainer config's `gradient_checkpointing` to True (#3510, commit
/// a222aeb; v1.9 `trainer/base_config.py`), so a file that leaves it out checkpoints (non-
/// reentrant under transformers ≥ 5). A file naming `vllm_device` is TRL ≤ 0.16's, whose
/// default was False. Weak: another file's stated value replaces it.
fn default_checkpointing(doc: &Doc, r: &mut Reading) {
    if r.value_of("checkpointing").is_some() || doc.has("vllm_device") {
        return;
    }
    let key = "(TRL ≥ 0.22 default: gradient_checkpointing true)";
    r.set_weak("checkpointing", json!("full"), key);
    r.note("gradient_checkpointing not set: TRL ≥ 0.22 defaults it to true (before 0.22, false)");
}

/// DPO: chosen and rejected sequences of `max_length`, and a frozen reference model unless
/// `precompute_ref_log_probs` (or a reference-free loss).
fn dpo(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let max_length = count_of(doc, "max_length")?;
    let max_prompt = count_of(doc, "max_prompt_length")?;
    doc.skip(&["beta", "rpo_alpha", "ref_model_init_kwargs"]);
    let precomputed = bool_of(doc, "precompute_ref_log_probs")? == Some(true);
    let mut rl = json!({"algorithm": "dpo", "reference_model": !precomputed});
    // `max_length` is prompt and completion together (`dpo_config.py`: max_prompt_length
    // 512, max_length 1024 by default): the completion is the rest.
    let prompt = max_prompt.unwrap_or(512);
    if let Some(total) = max_length.filter(|&t| t > prompt) {
        rl["prompt_len"] = json!(prompt);
        rl["completion_len"] = json!(total - prompt);
    }
    if super::doc::accepts("rl", &rl) {
        r.set("task", json!("rl"), "DPO trainer");
        r.set("rl", rl, "DPO trainer");
    } else {
        if let Some(n) = max_length {
            r.set("seq", json!(n), "max_length");
        }
        r.not_modelled(
            "DPO (beta, precompute_ref_log_probs)",
            &format!(
                "task rl, rl.algorithm dpo, rl.reference_model {}",
                !precomputed
            ),
        );
    }
    Ok(())
}

/// GRPO: prompt and completion lengths, generations per prompt, the reference model (when
/// `beta` ≠ 0), and the vLLM generator (`use_vllm`, `vllm_mode` colocate/server,
/// `vllm_gpu_memory_utilization`, `vllm_enable_sleep_mode`).
fn grpo(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let prompt = count_of(doc, "max_prompt_length")?;
    let completion = count_of(doc, "max_completion_length")?;
    let gens = count_of(doc, "num_generations")?;
    let beta = number_of(doc, "beta")?;
    let use_vllm = bool_of(doc, "use_vllm")?.unwrap_or(false);
    // TRL's default vllm_mode is "server" (`grpo_config.py`).
    let mode = str_of(doc, "vllm_mode")?
        .unwrap_or("server")
        .to_ascii_lowercase();
    let util = number_of(doc, "vllm_gpu_memory_utilization")?;
    let sleep = bool_of(doc, "vllm_enable_sleep_mode")?;
    // `vllm_device` is TRL ≤ 0.16's (removed in 0.17): vLLM on a GPU of its own, and `beta`
    // defaulting to 0.04 (0.0 from TRL 0.19, `grpo_config.py`).
    let old_trl = doc.has("vllm_device");
    doc.skip(&[
        "vllm_device",
        "vllm_tensor_parallel_size",
        "vllm_server_host",
        "vllm_server_port",
    ]);
    let mut rl = Map::new();
    rl.insert("algorithm".into(), json!("grpo"));
    match beta {
        Some(b) => {
            rl.insert("reference_model".into(), json!(b != 0.0));
        }
        None if old_trl => {
            rl.insert("reference_model".into(), json!(true));
            r.note(
                "beta not set: TRL of vllm_device (≤ 0.16) defaults it to 0.04, so a reference \
                 model is kept (TRL ≥ 0.19 defaults to 0.0: none)",
            );
        }
        None => {
            r.note("beta not set: TRL ≥ 0.19 defaults it to 0.0 (no reference model); before, 0.04")
        }
    }
    if use_vllm && !doc.has("vllm_mode") && !old_trl {
        r.note(
            "vllm_mode not set: read as TRL < 1.0's default server (TRL ≥ 1.0 defaults to \
             colocate; write vllm_mode to say which)",
        );
    }
    if use_vllm {
        let mut g = Map::new();
        g.insert("engine".into(), json!("vllm"));
        g.insert("colocate".into(), json!(mode == "colocate"));
        if let Some(u) = util {
            g.insert("gpu_memory_utilization".into(), json!(u));
        }
        if let Some(s) = sleep {
            g.insert("sleep".into(), json!(s));
        }
        rl.insert("generator".into(), Value::Object(g));
    }
    for (k, v) in [
        ("num_generations", gens),
        ("prompt_len", prompt),
        ("completion_len", completion),
    ] {
        if let Some(v) = v {
            rl.insert(k.into(), json!(v));
        }
    }
    let rl = Value::Object(rl);
    if super::doc::accepts("rl", &rl) {
        r.set("task", json!("rl"), "GRPO trainer");
        r.set("rl", rl, "GRPO trainer");
        return Ok(());
    }
    r.not_modelled("GRPO", &format!("task rl, rl {rl}"));
    // Until `rl` is modelled, the training phase: the policy on prompt + completion tokens.
    if let (Some(p), Some(c)) = (prompt, completion) {
        r.set(
            "seq",
            json!(p + c),
            "max_prompt_length + max_completion_length",
        );
        r.note(format!(
            "seq {} = max_prompt_length {p} + max_completion_length {c}: the policy's training step only",
            p + c
        ));
    }
    Ok(())
}
