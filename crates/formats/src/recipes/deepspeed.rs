//! DeepSpeed config JSON (`ds_config.json`): ZeRO stage and offload, bf16/fp16, the optimizer,
//! and the batch triple with DeepSpeed's own consistency rule. `"auto"` values are left for the
//! trainer's arguments, as transformers' integration fills them
//! (`transformers/integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig.trainer_config_process`:
//! `train_micro_batch_size_per_gpu` ← `per_device_train_batch_size`,
//! `gradient_accumulation_steps` ← `gradient_accumulation_steps`, `train_batch_size` ← world
//! size × both, `fp16.enabled` ← `fp16`, `bf16.enabled` ← `bf16`; `trainer_config_finalize`:
//! `reduce_bucket_size` ← hidden², `stage3_prefetch_bucket_size` ← 0.9 × hidden²,
//! `stage3_param_persistence_threshold` ← 10 × hidden).

use super::doc::{as_count, count_of, is_auto, short, str_of, Batch, Doc, Reading};
use serde_json::{json, Map, Value};

/// Keys that say nothing about memory (logging, schedules, clipping, checkpoint saving).
const QUIET: &[&str] = &[
    "scheduler",
    "gradient_clipping",
    "steps_per_print",
    "wall_clock_breakdown",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "comms_config",
    "monitor_config",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "flops_profiler",
    "dump_state",
    "prescale_gradients",
    "gradient_predivide_factor",
    "seed",
];

/// Whether a document is a DeepSpeed config: only DeepSpeed writes these keys at the top.
pub(crate) fn detect(m: &Map<String, Value>) -> bool {
    [
        "zero_optimization",
        "train_micro_batch_size_per_gpu",
        "train_batch_size",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
    ]
    .iter()
    .any(|k| m.contains_key(*k))
}

/// Reads a DeepSpeed config into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET);
    r.set("framework", json!("deepspeed"), "zero_optimization");
    read_zero(doc, r)?;
    read_precision(doc, r)?;
    read_optimizer(doc, r)?;
    let batch = read_batch(doc)?;
    batch_fields(&batch, r);
    r.ds_batch = Some(batch);
    if let Some(a) = doc.section("activation_checkpointing") {
        let on: Vec<String> = ["partition_activations", "cpu_checkpointing"]
            .iter()
            .filter(|k| a.get(k).and_then(super::doc::as_bool) == Some(true))
            .map(|k| k.to_string())
            .collect();
        if !on.is_empty() {
            r.not_modelled(
                &format!("activation_checkpointing.{}", on.join(", ")),
                "DeepSpeed's own activation partitioning/offload",
            );
        }
    }
    Ok(())
}

fn read_zero(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let Some(z) = doc.section("zero_optimization") else {
        if doc.has("zero_optimization") {
            return Err("zero_optimization: expected an object".into());
        }
        r.set("parallel.zero", json!(0), "(no zero_optimization: stage 0)");
        return Ok(());
    };
    let stage = count_of(&z, "stage")?.unwrap_or(0);
    if stage > 3 {
        return Err(format!(
            "zero_optimization.stage: {stage} is not a ZeRO stage (0-3)"
        ));
    }
    r.set("parallel.zero", json!(stage), "zero_optimization.stage");
    let device = |key: &str| -> Result<Option<String>, String> {
        let Some(s) = z.object(key)? else {
            return Ok(None);
        };
        // Pinned or not, the offloaded bytes live in host memory.
        s.skip(&[
            "pin_memory",
            "buffer_count",
            "fast_init",
            "ratio",
            "nvme_path",
        ]);
        Ok(str_of(&s, "device")?.map(str::to_ascii_lowercase))
    };
    let opt = device("offload_optimizer")?.filter(|d| d != "none");
    let par = device("offload_param")?.filter(|d| d != "none");
    let offload = match (&opt, &par) {
        (None, None) => "none",
        (Some(_), None) => "optimizer",
        (Some(_), Some(_)) => "optimizer+params",
        (None, Some(_)) => {
            r.not_modelled(
                "zero_optimization.offload_param without offload_optimizer",
                "parallel.offload has no params-only value; read as optimizer+params",
            );
            "optimizer+params"
        }
    };
    r.set(
        "parallel.offload",
        json!(offload),
        "zero_optimization.offload_*",
    );
    if opt.as_deref() == Some("nvme") || par.as_deref() == Some("nvme") {
        r.note("offload device nvme: the GPU side is as for cpu offload");
    }
    read_buckets(&z, r);
    Ok(())
}

/// Bucket and live-parameter settings: no job field holds them yet (the estimator uses
/// DeepSpeed's defaults, `deepspeed/runtime/zero/config.py`).
fn read_buckets(z: &Doc, r: &mut Reading) {
    const HF_AUTO: [(&str, &str); 3] = [
        ("reduce_bucket_size", "hidden_size²"),
        ("stage3_prefetch_bucket_size", "0.9 × hidden_size²"),
        ("stage3_param_persistence_threshold", "10 × hidden_size"),
    ];
    for key in [
        "reduce_bucket_size",
        "allgather_bucket_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
        "stage3_max_reuse_distance",
        "max_live_parameters",
        "max_reuse_distance",
        "sub_group_size",
    ] {
        let Some(v) = z.get(key) else { continue };
        let what = match HF_AUTO.iter().find(|(k, _)| *k == key) {
            Some((_, rule)) if is_auto(v) => {
                format!("\"auto\" = {rule} in transformers' integration; estimated at DeepSpeed's default")
            }
            _ => format!("{}; estimated at DeepSpeed's default", short(v)),
        };
        r.not_modelled(&format!("zero_optimization.{key}"), &what);
    }
    // Communication buffers DeepSpeed sizes from these (overlap_comm doubles-and-more the
    // buckets; contiguous_gradients copies gradients into one buffer): not in the estimate yet.
    for key in ["overlap_comm", "contiguous_gradients"] {
        if let Some(v) = z.get(key) {
            r.not_modelled(
                &format!("zero_optimization.{key} {}", short(v)),
                "communication buffers",
            );
        }
    }
    z.skip(&[
        "allgather_partitions",
        "reduce_scatter",
        "round_robin_gradients",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
        "gather_16bit_weights_on_model_save",
    ]);
}

fn read_precision(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let enabled = |key: &str| -> Result<Option<Value>, String> {
        let Some(s) = doc.object(key)? else {
            return Ok(None);
        };
        // The loss-scale settings change no bytes.
        s.skip(&[
            "loss_scale",
            "loss_scale_window",
            "initial_scale_power",
            "hysteresis",
            "min_loss_scale",
            "auto_cast",
            "consecutive_hysteresis",
            "immediate_grad_update",
        ]);
        Ok(s.get("enabled").cloned().or(Some(Value::Bool(false))))
    };
    let (bf, fp) = (enabled("bf16")?, enabled("fp16")?);
    let on = |v: &Option<Value>| v.as_ref().and_then(super::doc::as_bool) == Some(true);
    let auto = |v: &Option<Value>| v.as_ref().is_some_and(is_auto);
    if on(&bf) && on(&fp) {
        return Err("bf16.enabled and fp16.enabled are both true".into());
    }
    // DeepSpeed keeps 16-bit parameters and an fp32 master copy: the contract's *-mixed.
    if on(&bf) {
        r.set("precision", json!("bf16-mixed"), "bf16.enabled");
    } else if on(&fp) {
        r.set("precision", json!("fp16-mixed"), "fp16.enabled");
    } else if auto(&bf) || auto(&fp) {
        r.autos.push(("precision", "bf16/fp16.enabled".into()));
    } else if bf.is_none() && fp.is_none() {
        r.note("no bf16/fp16 section: DeepSpeed trains in fp32 unless the trainer says otherwise");
    } else {
        r.set("precision", json!("fp32"), "bf16/fp16.enabled false");
    }
    Ok(())
}

fn read_optimizer(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    let Some(o) = doc.section("optimizer") else {
        return Ok(());
    };
    o.skip(&["params"]);
    let Some(t) = str_of(&o, "type")? else {
        return Ok(());
    };
    // deepspeed/runtime/engine.py `_configure_basic_optimizer`: Adam/AdamW build FusedAdam
    // (DeepSpeedCPUAdam when offloaded): one fused kernel, the states of AdamW.
    let mapped = match t.to_ascii_lowercase().as_str() {
        "adam" | "adamw" => Some("adamw-fused"),
        "lion" => Some("lion"),
        "sgd" => Some("sgd"),
        _ => None,
    };
    r.set_known("optimizer", mapped, format!("optimizer.type {t}"));
    Ok(())
}

fn read_batch(doc: &Doc) -> Result<Batch, String> {
    let one = |key: &str| -> Result<Option<Option<u64>>, String> {
        match doc.get(key) {
            None => Ok(None),
            Some(v) if is_auto(v) => Ok(Some(None)),
            Some(_) => count_of(doc, key).map(Some),
        }
    };
    Ok(Batch {
        train: one("train_batch_size")?,
        micro: one("train_micro_batch_size_per_gpu")?,
        accum: one("gradient_accumulation_steps")?,
    })
}

/// The batch figures as job fields: stated ones set, `"auto"` ones left to other files.
pub(crate) fn batch_fields(b: &Batch, r: &mut Reading) {
    match b.micro {
        Some(Some(m)) => r.set("batch", json!(m), "train_micro_batch_size_per_gpu"),
        Some(None) => r
            .autos
            .push(("batch", "train_micro_batch_size_per_gpu".into())),
        None => {}
    }
    match b.accum {
        Some(Some(a)) => r.set("grad_accum", json!(a), "gradient_accumulation_steps"),
        Some(None) => r
            .autos
            .push(("grad_accum", "gradient_accumulation_steps".into())),
        None => {}
    }
}

/// DeepSpeed's rule once every file is read (`deepspeed/runtime/config.py`,
/// `_set_batch_related_parameters` and `_batch_assertion`): `train_batch_size ==
/// train_micro_batch_size_per_gpu × gradient_accumulation_steps × world size`; two given
/// derive the third (integer division, as DeepSpeed does). `job` holds the merged fields; a
/// figure the rule derives is written back, with a note. Errors name the three figures.
pub(crate) fn settle(
    b: &Batch,
    job: &mut Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(Some(train)) = b.train else {
        return Ok(());
    };
    let get = |job: &Map<String, Value>, k: &str| job.get(k).and_then(as_count);
    let gpus = job
        .get("parallel")
        .and_then(|p| p.get("gpus"))
        .and_then(as_count);
    let (micro, accum) = (get(job, "batch"), get(job, "grad_accum"));
    match (micro, accum, gpus) {
        (Some(m), Some(a), Some(w)) => {
            if m * a * w != train {
                return Err(format!(
                    "train_batch_size {train} is not train_micro_batch_size_per_gpu {m} × \
                     gradient_accumulation_steps {a} × world size {w} = {} (DeepSpeed's rule)",
                    m * a * w
                ));
            }
        }
        (Some(m), Some(a), None) if m * a > 0 && train % (m * a) == 0 => {
            let w = train / (m * a);
            super::set_path(job, "parallel.gpus", json!(w));
            notes.push(format!(
                "parallel.gpus {w} = train_batch_size {train} / (micro-batch {m} × accumulation {a})"
            ));
        }
        (Some(m), None, Some(w)) if m * w > 0 => {
            let a = (train / m / w).max(1);
            job.insert("grad_accum".into(), json!(a));
            notes.push(format!(
                "grad_accum {a} = train_batch_size {train} / micro-batch {m} / world size {w}"
            ));
        }
        (None, Some(a), Some(w)) if a * w > 0 => {
            let m = (train / w / a).max(1);
            job.insert("batch".into(), json!(m));
            notes.push(format!(
                "batch {m} = train_batch_size {train} / world size {w} / accumulation {a}"
            ));
        }
        _ => notes.push(format!(
            "train_batch_size {train}: the micro-batch, accumulation and GPU count it implies are \
             not all known; give two of them"
        )),
    }
    Ok(())
}
