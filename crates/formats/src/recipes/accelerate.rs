//! accelerate config YAML (`accelerate config` / `default_config.yaml`): distributed type,
//! FSDP settings, the DeepSpeed plugin, mixed precision, processes. Field meanings are
//! accelerate's (`accelerate/commands/config/config_args.py`, `utils/dataclasses.py`:
//! `FullyShardedDataParallelPlugin`, `DeepSpeedPlugin`).

use super::doc::{bool_of, count_of, str_of, Doc, Reading};
use serde_json::{json, Map, Value};

const QUIET: &[&str] = &[
    "compute_environment",
    "debug",
    "downcast_bf16",
    "machine_rank",
    "main_training_function",
    "rdzv_backend",
    "same_network",
    "tpu_env",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "main_process_ip",
    "main_process_port",
    "gpu_ids",
    "enable_cpu_affinity",
    "num_machines",
];

/// Whether a document is an accelerate config.
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    m.contains_key("distributed_type") || m.contains_key("compute_environment")
}

/// Reads an accelerate config into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    let dist = str_of(doc, "distributed_type")?
        .unwrap_or("NO")
        .to_ascii_uppercase();
    match dist.as_str() {
        "DEEPSPEED" => r.set(
            "framework",
            json!("deepspeed"),
            "distributed_type DEEPSPEED",
        ),
        "FSDP" => r.set("framework", json!("fsdp"), "distributed_type FSDP"),
        "MEGATRON_LM" => r.set(
            "framework",
            json!("megatron"),
            "distributed_type MEGATRON_LM",
        ),
        "NO" | "MULTI_GPU" => {}
        other => r.not_modelled(&format!("distributed_type {other}"), "framework"),
    }
    // accelerate's num_processes is the total over all machines ("the number of GPUs in all
    // nodes"; `accelerate launch --num_processes`: "The total number of processes to be
    // launched in parallel").
    if let Some(n) = count_of(doc, "num_processes")? {
        if dist != "NO" || n > 1 {
            r.set("parallel.gpus", json!(n), "num_processes");
        }
    }
    if let Some(mp) = str_of(doc, "mixed_precision")? {
        let p = match mp.to_ascii_lowercase().as_str() {
            "bf16" => Some("bf16-mixed"),
            "fp16" => Some("fp16-mixed"),
            "no" => Some("fp32"),
            _ => None,
        };
        match p {
            // Weak: the trainer's own bf16/fp16 (or a DeepSpeed config) decides in the end.
            Some(p) => r.set_weak("precision", json!(p), format!("mixed_precision {mp}")),
            None => r.not_modelled(&format!("mixed_precision {mp}"), "precision"),
        }
    }
    if bool_of(doc, "use_cpu")? == Some(true) {
        r.note("use_cpu: true: the job runs on the CPU; the GPU estimate does not apply");
    }
    if let Some(d) = doc.section("dynamo_config") {
        let backend = str_of(&d, "dynamo_backend")?.unwrap_or("NO");
        if !backend.eq_ignore_ascii_case("no") {
            r.technique(
                &format!("dynamo_config.dynamo_backend {backend}"),
                "compile",
                json!(true),
            );
        }
        d.skip(&[
            "dynamo_mode",
            "dynamo_use_fullgraph",
            "dynamo_use_dynamic",
            "dynamo_use_regional_compilation",
        ]);
    }
    if let Some(ds) = doc.section("deepspeed_config") {
        deepspeed_plugin(&ds, r)?;
    }
    if let Some(f) = doc.section("fsdp_config") {
        fsdp_config(&f, r)?;
    }
    Ok(())
}

/// accelerate's DeepSpeed plugin: the stage and offload devices inline, or a config file.
fn deepspeed_plugin(ds: &Doc, r: &mut Reading) -> Result<(), String> {
    ds.skip(&[
        "deepspeed_multinode_launcher",
        "zero3_init_flag",
        "zero3_save_16bit_model",
        "deepspeed_hostfile",
    ]);
    if let Some(p) = str_of(ds, "deepspeed_config_file")? {
        r.refs.push((
            "deepspeed_config.deepspeed_config_file".into(),
            p.to_string(),
        ));
    }
    if let Some(z) = count_of(ds, "zero_stage")? {
        if z > 3 {
            return Err(format!(
                "deepspeed_config.zero_stage: {z} is not a ZeRO stage (0-3)"
            ));
        }
        r.set("parallel.zero", json!(z), "deepspeed_config.zero_stage");
    }
    let dev = |k: &str| -> Result<Option<bool>, String> {
        Ok(str_of(ds, k)?.map(|d| !d.eq_ignore_ascii_case("none")))
    };
    let (opt, par) = (
        dev("offload_optimizer_device")?,
        dev("offload_param_device")?,
    );
    if opt.is_some() || par.is_some() {
        let v = match (opt == Some(true), par == Some(true)) {
            (false, false) => "none",
            (true, false) => "optimizer",
            _ => "optimizer+params",
        };
        r.set(
            "parallel.offload",
            json!(v),
            "deepspeed_config.offload_*_device",
        );
    }
    if let Some(a) = count_of(ds, "gradient_accumulation_steps")? {
        // Weak: the trainer's own gradient_accumulation_steps is what transformers hands the
        // DeepSpeed plugin (`integrations/deepspeed.py`, `trainer_config_process`).
        r.set_weak(
            "grad_accum",
            json!(a),
            "deepspeed_config.gradient_accumulation_steps",
        );
    }
    Ok(())
}

/// FSDP settings (accelerate's `fsdp_config`, also TrainingArguments' `fsdp_config` without
/// the `fsdp_` prefix). Sharding strategy → the contract's FSDP mapping of `parallel.zero`
/// (0 = NO_SHARD, 2 = SHARD_GRAD_OP, 3 = FULL_SHARD); FSDP2's `reshard_after_forward` false is
/// SHARD_GRAD_OP's layout.
pub(crate) fn fsdp_config(f: &Doc, r: &mut Reading) -> Result<(), String> {
    let key = |k: &str| {
        if f.has(&format!("fsdp_{k}")) {
            format!("fsdp_{k}")
        } else {
            k.to_string()
        }
    };
    f.skip(&[
        "fsdp_auto_wrap_policy",
        "fsdp_backward_prefetch",
        "fsdp_forward_prefetch",
        "fsdp_cpu_ram_efficient_loading",
        "fsdp_state_dict_type",
        "fsdp_sync_module_states",
        "fsdp_use_orig_params",
        "fsdp_transformer_layer_cls_to_wrap",
        "fsdp_min_num_params",
        "fsdp_version",
        "auto_wrap_policy",
        "backward_prefetch",
        "forward_prefetch",
        "cpu_ram_efficient_loading",
        "state_dict_type",
        "sync_module_states",
        "use_orig_params",
        "transformer_layer_cls_to_wrap",
        "min_num_params",
        "version",
        "xla",
    ]);
    let strategy = key("sharding_strategy");
    if let Some(v) = f.get(&strategy) {
        let s = super::doc::short(v).to_ascii_uppercase();
        let zero = match s.as_str() {
            "FULL_SHARD" | "1" | "HYBRID_SHARD" | "4" => 3,
            "SHARD_GRAD_OP" | "2" | "HYBRID_SHARD_ZERO2" | "5" => 2,
            "NO_SHARD" | "3" => 0,
            _ => {
                return Err(format!(
                    "{strategy}: '{s}' is not an FSDP sharding strategy"
                ))
            }
        };
        if s.starts_with("HYBRID") || s == "4" || s == "5" {
            r.note(format!(
                "{strategy} {s}: sharded within a node, replicated across nodes"
            ));
        }
        r.set("parallel.zero", json!(zero), format!("{strategy} {s}"));
    }
    let reshard = key("reshard_after_forward");
    if let Some(b) = bool_of(f, &reshard)? {
        r.set(
            "parallel.zero",
            json!(if b { 3 } else { 2 }),
            format!("{reshard} {b}"),
        );
    }
    let offload = key("offload_params");
    if let Some(b) = bool_of(f, &offload)? {
        // FSDP's CPUOffload(offload_params=True) keeps parameters and gradients on the host and
        // steps the optimizer there.
        r.set(
            "parallel.offload",
            json!(if b { "optimizer+params" } else { "none" }),
            offload,
        );
    }
    r.set_checkpointing(f, &key("activation_checkpointing"))?;
    Ok(())
}
