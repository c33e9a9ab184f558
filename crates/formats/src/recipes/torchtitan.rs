//! torchtitan's TOML job configs (`torchtitan/models/*/train_configs/*.toml`), read as
//! `torchtitan/config/job_config.py` defines them: `[model]` name/flavor, `[training]` batch
//! and sequence length, `[parallelism]` degrees, `[activation_checkpoint]`, compile (the older
//! `[training] compile` and the newer `[compile] enable`), float8. torchtitan trains with FSDP2
//! (`fully_shard`) over the data-parallel shard dimension and with bf16 parameters in compute
//! (`mixed_precision_param = "bfloat16"`, fp32 master and reduction:
//! `torchtitan/distributed/utils.py` and `parallelize.py`'s `MixedPrecisionPolicy`).

use super::doc::{bool_of, count_of, str_of, Doc, Reading};
use serde_json::{json, Value};

/// Sections that carry nothing about GPU memory.
const QUIET_SECTIONS: &[&str] = &[
    "job",
    "profiling",
    "metrics",
    "lr_scheduler",
    "checkpoint",
    "validation",
    "comm",
    "fault_tolerance",
    "experimental",
    "memory_estimation",
];

/// Whether a document is a torchtitan job config: `[model]` with `flavor`, and `[training]`.
pub(crate) fn detect(m: &serde_json::Map<String, Value>) -> bool {
    let model_flavor = m
        .get("model")
        .and_then(Value::as_object)
        .is_some_and(|o| o.contains_key("flavor"));
    model_flavor && m.get("training").is_some_and(Value::is_object)
}

/// Reads a torchtitan config into `r`.
pub(crate) fn read(doc: &Doc, r: &mut Reading) -> Result<(), String> {
    doc.skip(QUIET_SECTIONS);
    if let Some(m) = doc.section("model") {
        model(&m, r)?;
    }
    let mut fsdp = true;
    if let Some(p) = doc.section("parallelism") {
        fsdp = parallelism(&p, r)?;
    }
    if let Some(t) = doc.section("training") {
        training(&t, r, fsdp)?;
    }
    if let Some(a) = doc.section("activation_checkpoint") {
        checkpointing(&a, r)?;
    }
    if let Some(c) = doc.section("compile") {
        if let Some(e) = bool_of(&c, "enable")? {
            r.technique("compile.enable", "compile", json!(e));
        }
        c.skip(&["components", "backend"]);
    }
    if let Some(o) = doc.section("optimizer") {
        optimizer(&o, r)?;
    }
    if let Some(f) = doc.section("float8") {
        float8(&f, r)?;
    }
    Ok(())
}

/// `[model] name` + `flavor` → a preset: torchtitan's `llama3` flavors 8B/70B/405B are the
/// Llama 3.1 shapes (`torchtitan/models/llama3/__init__.py`: dim 4096/8192/16384, 32/80/126
/// layers, 8 KV heads, vocabulary 128,256 from the 3.1 tokenizer); other model names map by
/// `name-flavor` (`qwen3` `0.6B` → `qwen3-0.6b`). `converters = ["float8"]` is float8 training.
fn model(m: &Doc, r: &mut Reading) -> Result<(), String> {
    m.skip(&[
        "tokenizer_path",
        "hf_assets_path",
        "norm_type",
        "print_after_conversion",
    ]);
    let name = str_of(m, "name")?;
    let flavor = str_of(m, "flavor")?;
    if let (Some(n), Some(f)) = (name, flavor) {
        let n = n.to_ascii_lowercase();
        let f = f.to_ascii_lowercase();
        let id = match n.as_str() {
            "llama3" => format!("llama-3.1-{f}"),
            "llama2" => format!("llama-2-{f}"),
            _ => format!("{n}-{f}"),
        };
        match crate::presets::find(&id) {
            Some(p) => r.set(
                "model",
                json!(p.id),
                format!("model.name {n}, model.flavor {f}"),
            ),
            None => r.note(format!(
                "model {n} flavor {f}: no preset of that shape; give MODEL (a preset, \
                 config.json or Hub repo)"
            )),
        }
    }
    if let Some(c) = super::doc::names_of(m, "converters")? {
        for conv in c {
            r.not_modelled(&format!("model.converters {conv}"), "float8 linear layers");
        }
    }
    Ok(())
}

/// `[parallelism]`: the degrees multiply to the GPU count
/// (`torchtitan/distributed/parallel_dims.py`: dp_replicate · dp_shard · cp · tp · pp = world
/// size, with `data_parallel_shard_degree = -1` taking whatever the world size leaves). Returns
/// whether FSDP shards the model (dp_shard ≠ 1).
fn parallelism(p: &Doc, r: &mut Reading) -> Result<bool, String> {
    p.skip(&[
        "enable_async_tensor_parallel",
        "fsdp_reshard_after_forward",
        "pipeline_parallel_schedule",
        "pipeline_parallel_split_points",
        "enable_compiled_autograd",
        "disable_loss_parallel",
        "context_parallel_rotate_method",
    ]);
    let degree = |key: &str| -> Result<Option<i64>, String> {
        match p.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .filter(|d| *d == -1 || *d >= 1)
                .map(Some)
                .ok_or_else(|| format!("{}: {v} is not a degree (-1 or ≥ 1)", p.path(key))),
        }
    };
    let replicate = degree("data_parallel_replicate_degree")?.unwrap_or(1);
    let shard = degree("data_parallel_shard_degree")?.unwrap_or(-1);
    let mut product = replicate.max(1);
    for (key, field) in [
        ("tensor_parallel_degree", "parallel.tp"),
        ("pipeline_parallel_degree", "parallel.pp"),
        ("context_parallel_degree", "parallel.cp"),
        ("expert_parallel_degree", "parallel.ep"),
    ] {
        match degree(key)? {
            Some(d) if d > 1 => {
                r.set(field, json!(d), format!("parallelism.{key} {d}"));
                if field != "parallel.ep" {
                    product *= d;
                }
                // torchtitan's tensor parallel plan shards the norms' activations over the
                // sequence (SequenceParallel in `parallelize.py`): Megatron's sequence parallel.
                if field == "parallel.tp" {
                    r.set("parallel.sp", json!(true), format!("parallelism.{key} {d}"));
                }
            }
            Some(-1) => {
                return Err(format!(
                    "parallelism.{key}: -1 is only for the shard degree"
                ))
            }
            _ => {}
        }
    }
    if shard > 0 {
        r.set(
            "parallel.gpus",
            json!(product * shard),
            "parallelism degrees multiplied",
        );
    } else {
        r.note(
            "parallelism.data_parallel_shard_degree -1: the shard degree is whatever the GPU \
             count leaves, so give --gpus (torchtitan's NGPU × nodes)",
        );
    }
    let fsdp = shard != 1;
    if fsdp {
        r.set(
            "framework",
            json!("fsdp"),
            "parallelism.data_parallel_shard_degree (FSDP2)",
        );
        r.set(
            "parallel.zero",
            json!(3),
            "parallelism.data_parallel_shard_degree (FSDP2 fully_shard)",
        );
    }
    Ok(fsdp)
}

/// `[training]`: the per-rank batch (`local_batch_size`, before 2025 `batch_size`), sequence
/// length, the older `compile` switch, and the parameters' compute dtype.
fn training(t: &Doc, r: &mut Reading, fsdp: bool) -> Result<(), String> {
    t.skip(&[
        "dataset",
        "dataset_path",
        "max_norm",
        "steps",
        "warmup_steps",
        "seed",
        "deterministic",
        "gc_freq",
        "enable_cpu_offload",
    ]);
    for key in ["local_batch_size", "batch_size"] {
        if let Some(b) = count_of(t, key)? {
            r.set("batch", json!(b), format!("training.{key}"));
        }
    }
    if let Some(s) = count_of(t, "seq_len")? {
        r.set("seq", json!(s), "training.seq_len");
    }
    if let Some(c) = bool_of(t, "compile")? {
        r.technique("training.compile", "compile", json!(c));
    }
    if let (Some(g), Some(b)) = (
        count_of(t, "global_batch_size")?,
        r.value_of("batch").and_then(Value::as_u64),
    ) {
        r.note(format!(
            "training.global_batch_size {g}: accumulation is {g} / ({b} × data-parallel ranks); \
             give --grad-accum"
        ));
    }
    // FSDP2's MixedPrecisionPolicy casts the parameters to this dtype for compute and keeps
    // the fp32 sharded master; without FSDP torchtitan runs the forward under autocast in it
    // (`maybe_enable_amp`). Either way the contract's `bf16-mixed` (default bfloat16).
    let mp = str_of(t, "mixed_precision_param")?.unwrap_or("bfloat16");
    let p = match mp {
        "bfloat16" => "bf16-mixed",
        "float16" => "fp16-mixed",
        "float32" => "fp32",
        other => {
            return Err(format!(
                "training.mixed_precision_param: '{other}' is not bfloat16, float16 or float32"
            ))
        }
    };
    let key = if fsdp {
        "training.mixed_precision_param (FSDP2 MixedPrecisionPolicy)"
    } else {
        "training.mixed_precision_param (autocast)"
    };
    r.set_weak("precision", json!(p), format!("{key} {mp}"));
    t.skip(&["mixed_precision_reduce"]);
    Ok(())
}

/// `[activation_checkpoint] mode`: `none`, `full` (every block recomputed from its input), or
/// `selective` with `selective_ac_option` either `op` (torchtitan's op-level policy saves the
/// attention kernel's and every other matmul's outputs, recomputes the rest) or an integer N
/// (every N-th block fully checkpointed). Neither selective form is the contract's
/// `selective` (attention core recomputed), so they are listed as not modelled and estimated
/// without checkpointing (an upper bound).
fn checkpointing(a: &Doc, r: &mut Reading) -> Result<(), String> {
    let Some(mode) = str_of(a, "mode")? else {
        return Ok(());
    };
    match mode {
        "none" => r.set(
            "checkpointing",
            json!("none"),
            "activation_checkpoint.mode none",
        ),
        "full" => r.set(
            "checkpointing",
            json!("full"),
            "activation_checkpoint.mode full",
        ),
        "selective" => {
            let opt = match a.get("selective_ac_option") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => super::doc::short(v),
                None => "2".into(),
            };
            let what = if opt == "op" {
                "op-level selective checkpointing; estimated without checkpointing".to_string()
            } else {
                format!("one block in every {opt} checkpointed; estimated without checkpointing")
            };
            r.not_modelled(
                &format!("activation_checkpoint.mode selective ({opt})"),
                &what,
            );
        }
        other => {
            return Err(format!(
                "activation_checkpoint.mode: '{other}' is not none, selective or full"
            ))
        }
    }
    a.skip(&["per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop"]);
    Ok(())
}

/// `[optimizer] name` (torch.optim class) and `implementation` (`fused`/`foreach`/`for-loop`;
/// `torchtitan/components/optimizer.py`).
fn optimizer(o: &Doc, r: &mut Reading) -> Result<(), String> {
    o.skip(&[
        "lr",
        "eps",
        "weight_decay",
        "beta1",
        "beta2",
        "early_step_in_backward",
    ]);
    let Some(name) = str_of(o, "name")? else {
        return Ok(());
    };
    let imp = str_of(o, "implementation")?;
    let (opt, label) = match (name.to_ascii_lowercase().as_str(), imp) {
        ("adamw", Some("fused")) => ("adamw-fused", format!("optimizer.name {name}, fused")),
        ("adamw", _) => ("adamw", format!("optimizer.name {name}")),
        ("adam", _) => ("adam", format!("optimizer.name {name}")),
        _ => {
            r.not_modelled(&format!("optimizer.name {name}"), "optimizer");
            return Ok(());
        }
    };
    r.set("optimizer", json!(opt), label.clone());
    if imp == Some("for-loop") {
        r.set("optimizer_impl", json!("for-loop"), label);
    }
    Ok(())
}

/// `[float8]`: the FSDP float8 all-gather and dynamic scales only matter with the float8
/// converter, which is listed with the model.
fn float8(f: &Doc, r: &mut Reading) -> Result<(), String> {
    f.skip(&[
        "filter_fqns",
        "recipe_name",
        "emulate",
        "precompute_float8_dynamic_scale_for_fsdp",
    ]);
    if bool_of(f, "enable_fsdp_float8_all_gather")? == Some(true) {
        r.not_modelled(
            "float8.enable_fsdp_float8_all_gather",
            "float8 parameter all-gather",
        );
    }
    Ok(())
}
