//! A model remembers the parts of its estimates that depend on it and a few job fields
//! (`estimate::memo`): every report must be the one a model that remembers nothing gives.
//! Here jobs that differ in one field at a time — each field the model states or the forward
//! plan read, and fields they do not — are estimated one after another on one shared model,
//! in two orders, and each report (warnings included) is compared, as JSON, with the report
//! of the same job on a model loaded afresh for it alone.

use serde_json::{json, Value};
use vramscope_core::estimate::{estimate, ModelInput};
use vramscope_core::fit::what_if;
use vramscope_core::job::{Job, ResolvedJob, LLAMA_LINEARS};
use vramscope_formats::model_source::load_job_model;

fn model(name: &str) -> ModelInput {
    load_job_model(&json!(name)).unwrap().into_input()
}

fn resolve(m: &ModelInput, job: &Value) -> ResolvedJob {
    let job: Job = serde_json::from_value(job.clone()).unwrap();
    job.resolve(m.spec.as_ref().and_then(|s| s.max_position_embeddings))
        .unwrap()
}

/// The report of `job` as JSON, or its error as text.
fn answer(m: &ModelInput, job: &Value) -> String {
    match estimate(m, &resolve(m, job)) {
        Ok(r) => serde_json::to_string(&r).unwrap(),
        Err(e) => format!("error: {e}"),
    }
}

/// A base job and variations of one field each (on top of the base).
fn variations(base: Value) -> Vec<Value> {
    let changes = [
        json!({}),
        json!({"batch": 2}),
        json!({"seq": 1024}),
        json!({"seq": 1_000_000}), // longer than the positions: a forward-plan warning
        json!({"grad_accum": 4}),
        json!({"precision": "bf16"}),
        json!({"precision": "fp32"}),
        json!({"optimizer": "sgd"}),
        json!({"optimizer": "adamw-8bit"}),
        json!({"optimizer": "adafactor"}),
        json!({"checkpointing": "full"}),
        json!({"checkpointing": "selective"}),
        json!({"attention": "eager"}),
        json!({"loss": "chunked"}),
        json!({"peft": {"method": "lora", "rank": 16}}),
        json!({"peft": {"method": "qlora", "rank": 8}}),
        json!({"weights": "int8"}),
        json!({"framework": "deepspeed", "parallel": {"gpus": 8, "zero": 3}}),
        json!({"framework": "deepspeed", "parallel": {"gpus": 8, "zero": 2,
               "offload": "optimizer"}}),
        json!({"parallel": {"gpus": 2, "zero": 1}}), // zero without deepspeed: a states warning
        json!({"parallel": {"gpus": 4, "tp": 2, "pp": 2}}),
        json!({"framework": "megatron", "parallel": {"gpus": 4, "tp": 4, "sp": true}}),
        json!({"task": "infer", "batch": 8}),
        json!({"task": "infer", "new_tokens": 256}),
        json!({"gpu": "a100-40gb"}),
        json!({"reserve": 4}),
        json!({"cuda_module_loading": "eager"}),
        json!({"task": "infer", "kv_dtype": "fp8"}),
    ];
    changes
        .into_iter()
        .map(|c| {
            let mut j = base.clone();
            for (k, v) in c.as_object().unwrap() {
                j[k.as_str()] = v.clone();
            }
            j
        })
        .collect()
}

/// Each job's answer on `shared`, in the order given, against a fresh model's.
fn agrees_with_fresh(name: &str, jobs: &[Value]) {
    let shared = model(name);
    let mut refused = Vec::new();
    for job in jobs {
        let fresh = model(name);
        let a = answer(&shared, job);
        assert_eq!(
            a,
            answer(&fresh, job),
            "{name}: {job} differs on a model that estimated the jobs before it"
        );
        if a.starts_with("error") {
            refused.push(a);
        }
    }
    // The comparison means something only if the jobs are estimated: few refusals (GPT-2 has
    // no `q_proj` for LoRA's default targets).
    assert!(refused.len() * 10 <= jobs.len(), "{name}: {refused:?}");
}

#[test]
fn remembered_parts_give_the_reports_of_a_fresh_model() {
    for name in ["llama-3.1-8b", "gpt2", "mixtral-8x7b"] {
        let jobs = variations(json!({"batch": 1, "seq": 2048, "gpu": "h100-80gb"}));
        agrees_with_fresh(name, &jobs);
        let reversed: Vec<Value> = jobs.iter().rev().cloned().collect();
        agrees_with_fresh(name, &reversed);
        // Twice over: every job's parts are then remembered.
        let twice: Vec<Value> = jobs.iter().chain(&jobs).cloned().collect();
        agrees_with_fresh(name, &twice);
    }
}

#[test]
fn a_what_if_table_is_the_same_on_a_model_that_remembers() {
    let job = json!({"batch": 4, "seq": 4096, "gpu": "h100-80gb"});
    let shared = model("llama-3.1-8b");
    let r = resolve(&shared, &job);
    let first = what_if(&shared, &r).unwrap();
    let again = what_if(&shared, &r).unwrap();
    let fresh = what_if(&model("llama-3.1-8b"), &r).unwrap();
    assert_eq!(first, fresh);
    assert_eq!(again, fresh);
}

#[test]
fn a_clone_is_independent_of_its_original() {
    // A clone starts with nothing remembered; estimates on either agree with a fresh model.
    let original = model("llama-3.2-1b");
    let job = json!({"batch": 2, "seq": 1024, "optimizer": "adafactor"});
    let before = answer(&original, &job);
    let clone = original.clone();
    assert_eq!(answer(&clone, &job), before);
    assert_eq!(
        answer(&original, &json!({"batch": 2, "seq": 1024})),
        answer(&model("llama-3.2-1b"), &json!({"batch": 2, "seq": 1024}))
    );
}

#[test]
fn the_step_time_model_counts_loras_adapters_from_the_remembered_match() {
    // Llama-3.1-8B (hidden 4096, 8 KV heads of 128 → k/v out 1024, MLP 14336, 32 layers), LoRA
    // r16 on all seven projections: r × (in + out) per module, per layer
    //   q, o: 16 × (4096 + 4096) = 131,072 each; k, v: 16 × (4096 + 1024) = 81,920 each;
    //   gate, up, down: 16 × (4096 + 14336) = 294,912 each
    //   = 2 × 131,072 + 2 × 81,920 + 3 × 294,912 = 1,310,720; × 32 layers = 41,943,040
    // (PEFT's print_trainable_parameters for this model and config: 41,943,040).
    let m = model("llama-3.1-8b");
    // The seven projections are PEFT's `all-linear` on a Llama layer.
    let targets = LLAMA_LINEARS;
    let job = resolve(
        &m,
        &json!({"gpu": "h100-80gb", "peft": {"method": "lora", "rank": 16, "targets": targets}}),
    );
    let first = vramscope_core::throughput::trainable_params(&m, &job);
    let remembered = vramscope_core::throughput::trainable_params(&m, &job);
    assert_eq!(first, 41_943_040.0);
    assert_eq!(remembered, 41_943_040.0);
    let report = estimate(&m, &job).unwrap();
    assert_eq!(report.model.params_trainable, 41_943_040);
    // A target no module has: all parameters count (the estimate itself refuses the job).
    let none = resolve(
        &m,
        &json!({"peft": {"method": "lora", "rank": 16, "targets": ["no_such_proj"]}}),
    );
    assert_eq!(
        vramscope_core::throughput::trainable_params(&m, &none),
        m.params_total as f64
    );
}
