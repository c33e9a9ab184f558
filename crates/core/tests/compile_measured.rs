//! `compile`: steps compiled with `torch.compile` (inductor) measured on the CPU with
//! `../shared/measure/measure.py` patched as `scripts/measure_compile.patch` (torch 2.15.0,
//! transformers 5.24.0; specs in `validation/specs/*-compile.json`, results in
//! `validation/results/`), against the estimate of the same job with `compile: true`
//! (`docs/techniques.md`: the partitioner's cut, `estimate/tape/compile.rs`). Each measured
//! figure is the
//! step-2 peak of the c10 allocation series (`peak_raw` of `r512`) read off the result
//! file; the estimate is compared net of the two cuBLAS workspaces a CPU run does not have.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::estimate;
use vramscope_core::estimate::overhead::blas_workspaces_bytes;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

/// The estimate's peak for a spec of `validation/specs/`, net of the cuBLAS workspaces.
fn estimated_net(run_id: &str) -> u64 {
    let v = common::spec_job(
        run_id,
        json!({"task": "train"}),
        &[&common::SPEC_KEYS[..], &["compile"]].concat(),
    );
    let r = common::run_job(v);
    r.per_gpu.peaks.peak_allocated.unwrap() - blas_workspaces_bytes(None, true)
}

/// `err` of the estimate for `run_id` against `measured`, asserted within 3 %.
fn within_3_percent(run_id: &str, measured: u64) {
    let est = estimated_net(run_id);
    let err = (est as f64 - measured as f64) / measured as f64;
    println!(
        "{run_id}: estimate {est}, measured {measured}, {:+.2} %",
        err * 100.0
    );
    assert!(
        err.abs() <= 0.03,
        "{run_id}: {est} vs {measured} ({err:+.4})"
    );
}

/// The compiled steps, fp32, foreach AdamW, batch 2: a 4-layer GPT-2 (n_embd 256, the 50,257-token
/// tied vocabulary, eager attention, dropout, seq 128; dynamo: 2 graphs, 3 breaks at
/// transformers' `warning_once`, between the model and its loss) measured 363,793,408 B; a
/// 4-layer Llama (h 256, GQA 4/2, 8,192-token untied vocabulary, SDPA, seq 256; one graph)
/// 175,736,832 B; a 4-layer BERT masked LM (h 256, 30,522 tokens, eager attention, dropout,
/// seq 128; one graph) 251,356,160 B. Each peak is in the backward.
#[test]
fn compiled_fp32_steps_within_3_percent() {
    for (id, measured) in [
        (
            "cpu-tiny-gpt2-fp32-adamw-eager-b2s128-compile",
            363_793_408u64,
        ),
        ("cpu-tiny-llama-fp32-adamw-sdpa-b2s256-compile", 175_736_832),
        (
            "cpu-bert-mini-mlm-fp32-adamw-eager-b2s128-compile",
            251_356_160,
        ),
    ] {
        within_3_percent(id, measured);
    }
}

/// The eager counterparts of the compiled runs (same specs without `compile`): GPT-2
/// 385,064,960 B, Llama 184,245,248 B, BERT 251,616,768 B; compile saved 5.5 %, 4.6 % and 0.1 %
/// of them. The eager estimates stay within 3 % too (their answers are unchanged by compile's
/// model).
#[test]
fn eager_counterparts_within_3_percent() {
    for (id, measured) in [
        ("cpu-tiny-gpt2-fp32-adamw-eager-b2s128", 385_064_960u64),
        ("cpu-tiny-llama-fp32-adamw-sdpa-b2s256", 184_245_248),
        ("cpu-bert-mini-mlm-fp32-adamw-eager-b2s128", 251_616_768),
    ] {
        within_3_percent(id, measured);
    }
}

/// Compile lowers the estimate of GPT-2 and Llama (GELU's and SiLU's chains, RMSNorm's
/// normalized tensor recomputed) and leaves BERT's within 0.5 % (F.gelu saves its input
/// eagerly too; its peak is the masked-LM loss), as the measured pairs do.
#[test]
fn compile_lowers_what_it_measurably_lowers() {
    let pair = |id: &str| (estimated_net(id), estimated_net(&format!("{id}-compile")));
    for id in [
        "cpu-tiny-gpt2-fp32-adamw-eager-b2s128",
        "cpu-tiny-llama-fp32-adamw-sdpa-b2s256",
    ] {
        let (eager, compiled) = pair(id);
        assert!(compiled < eager, "{id}: {compiled} >= {eager}");
    }
    let (eager, compiled) = pair("cpu-bert-mini-mlm-fp32-adamw-eager-b2s128");
    assert!(
        eager.abs_diff(compiled) * 200 <= eager,
        "{eager} vs {compiled}"
    );
}

/// The same compiled runs as validation cases (`validation/cpu-measured-compile.json`, made by
/// `scripts/cases_from_measure.py` from the result files: the peak of the timeline series, the
/// job with `compile: true`): each within 3 %, net of the cuBLAS workspaces.
#[test]
fn compile_case_file_within_3_percent() {
    let cases: Vec<Value> = common::validation("cpu-measured-compile.json");
    assert_eq!(cases.len(), 3);
    for c in &cases {
        assert_eq!(c["metric"], "per_gpu.peak_allocated");
        assert_eq!(c["job"]["compile"], true);
        let j: Job = serde_json::from_value(c["job"].clone()).unwrap();
        let model = load_job_model(j.model.as_ref().unwrap()).unwrap();
        let r = estimate(&model.into_input(), &j.resolve(None).unwrap()).unwrap();
        let got = r.per_gpu.peaks.peak_allocated.unwrap() - blas_workspaces_bytes(None, true);
        let expected = c["expected_bytes"].as_u64().unwrap();
        let err = (got as f64 - expected as f64) / expected as f64;
        assert!(
            err.abs() <= 0.03,
            "{}: {got} vs {expected} ({err:+.4})",
            c["id"]
        );
    }
}
