//! The shared validation cases (`../shared/validation/`): published and measured figures run
//! through the estimator in-process.

mod common;
use common::shared;

use serde_json::Value;
use vramscope_core::estimate::estimate;
use vramscope_core::job::{merge_if_supported, Job};
use vramscope_formats::model_source::load_job_model;

fn metric(report: &Value, path: &str) -> Option<f64> {
    if let Some(sum) = path.strip_prefix("sum:") {
        return sum.split('+').map(|p| metric(report, p)).sum();
    }
    let mut v = report;
    for part in path.split('.') {
        v = v.get(part)?;
    }
    v.as_f64()
}

/// Runs every case of a shared file; returns (id, expected, got, tolerance).
fn run(file: &str) -> Vec<(String, f64, Option<f64>, f64)> {
    run_path(&format!(
        "{}/../../../shared/validation/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn run_path(path: &str) -> Vec<(String, f64, Option<f64>, f64)> {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(shared(path)).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in cases {
        let id = c["id"].as_str().unwrap().to_string();
        let expected = c["expected_bytes"].as_f64().unwrap();
        let tol = c["tolerance"].as_f64().unwrap();
        let got = (|| {
            let job = merge_if_supported(&c["job"], c.get("job_if_supported"));
            let job: Job = serde_json::from_value(job).ok()?;
            let model = load_job_model(job.model.as_ref()?).ok()?;
            let resolved = job
                .resolve(model.spec.as_ref().and_then(|s| s.max_position_embeddings))
                .ok()?;
            let report = estimate(&model.into_input(), &resolved).ok()?;
            metric(&serde_json::to_value(&report).ok()?, c["metric"].as_str()?)
        })();
        out.push((id, expected, got, tol));
    }
    out
}

fn summary(rows: &[(String, f64, Option<f64>, f64)]) -> (usize, f64, f64) {
    let mut errs: Vec<f64> = Vec::new();
    let mut pass = 0;
    for (id, e, g, tol) in rows {
        match g {
            Some(g) => {
                let err = (g - e) / e;
                if err.abs() <= *tol {
                    pass += 1;
                }
                errs.push(err.abs());
                println!(
                    "{id:70} {e:>16.0} {g:>16.0} {:>+8.2}% {}",
                    err * 100.0,
                    if err.abs() <= *tol { "ok" } else { "FAIL" }
                );
            }
            None => println!("{id:70} {e:>16.0} {:>16} error", "-"),
        }
    }
    errs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = errs.get(errs.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = errs.last().copied().unwrap_or(f64::NAN);
    println!(
        "{pass} passed, {} failed; median |err| {:.2}%, worst {:.2}%",
        rows.len() - pass,
        median * 100.0,
        worst * 100.0
    );
    (pass, median, worst)
}

/// The project's goal for a measured file: every case within its tolerance, median |error| ≤
/// 5 %, worst ≤ 15 %.
fn assert_project_goal(rows: &[(String, f64, Option<f64>, f64)]) {
    let (pass, median, worst) = summary(rows);
    assert_eq!(pass, rows.len(), "every measured case within tolerance");
    assert!(
        median <= 0.05 && worst <= 0.15,
        "median {median}, worst {worst}"
    );
}

/// Real PyTorch training steps measured tensor by tensor: every case within its tolerance,
/// median |error| ≤ 5 %, worst ≤ 15 % (the project's goal per file).
#[test]
fn cpu_measured_cases() {
    let rows = run("dev-cases-cpu-measured.json");
    assert_project_goal(&rows);
}

/// The project's own CPU-measured steps (validation/README.md): families and mechanisms the
/// shared cases lack (MoE through grouped_mm, MLA, Gemma-2 soft-capping, GQA with biases, pure
/// bf16, parallel residuals). Same goal as the shared measured file.
#[test]
fn project_measured_cases() {
    let rows = run_path(&common::validation_path("cpu-measured-extra.json"));
    assert!(rows.len() >= 30, "{} cases", rows.len());
    assert_project_goal(&rows);
}

/// Published figures. Three cases are known misses and stay visible here rather than tuned
/// away: HF's 2022 BERT-large benchmark on a V100 (nvidia-smi totals). Their eager CUDA context
/// (1,343 MiB) is now modelled (`job_if_supported: cuda_module_loading eager`, merged above);
/// what remains is that stack's training loop — `zero_grad()` keeping zeroed gradients alive
/// (set_to_none=False before torch 2.0) and transformers' own per-tensor AdamW — which no job
/// field describes; vramscope models today's defaults (ACCURACY.md explains each).
#[test]
fn dev_cases() {
    let rows = run("dev-cases.json");
    summary(&rows);
    let known = [
        "hf-bert-large-vanilla-bs4",
        "hf-bert-large-ga4-bs1-gc",
        "hf-bert-large-fp16-bs4",
    ];
    for (id, e, g, tol) in &rows {
        if known.contains(&id.as_str()) {
            continue;
        }
        let g = g.unwrap_or_else(|| panic!("{id}: no figure"));
        assert!((g - e).abs() / e <= *tol, "{id}: expected {e}, got {g}");
    }
}

/// The phase each project run peaked in (its note says "Steady-state peak in PHASE", read off
/// the measurement by `scripts/cases_from_measure.py`) is the estimate's `peak_phase`: users
/// read it to decide what to change.
#[test]
fn project_peak_phases() {
    let cases: Vec<Value> = common::validation("cpu-measured-extra.json");
    let mut checked = 0;
    for c in cases
        .iter()
        .filter(|c| c["metric"] == "per_gpu.peak_allocated")
    {
        let id = c["id"].as_str().unwrap();
        let note = c["note"].as_str().unwrap_or("");
        let Some(measured) = note
            .split("Steady-state peak in ")
            .nth(1)
            .and_then(|t| t.split(['.', ' ']).next())
        else {
            continue;
        };
        let job: Job = serde_json::from_value(c["job"].clone()).unwrap();
        let (input, resolved) = common::prepared(&job);
        let report = estimate(&input, &resolved).unwrap();
        assert_eq!(
            report.per_gpu.peaks.peak_phase.as_deref(),
            Some(measured),
            "{id}"
        );
        checked += 1;
    }
    assert!(checked >= 27, "{checked} runs with a measured phase");
}

/// Pure-bf16 masked-LM steps (a 4-layer BERT with BERT's own 30,522-token head,
/// `validation/specs/cpu-bert-mini-mlm-*.json`), measured with `../shared/measure/measure.py`
/// on 2026-12-01; the step-2 peak and its phase are read off the result files' "step2 peak ... in
/// PHASE" lines. At this size the two cuBLAS workspaces the estimate counts on a GPU (forward and
/// backward threads, 2 × 8,519,680 B) are a tenth of the peak and a CPU run has none, so the peak
/// is compared net of them (the file's cases check the activations as they are).
#[test]
fn masked_lm_pure_bf16_peaks() {
    let cases: Vec<Value> = common::validation("cpu-measured-extra.json");
    let workspaces = vramscope_core::estimate::overhead::blas_workspaces_bytes(None, true);
    // Two cuBLAS handles of 8,519,680 B; today's cuBLASLt shares them (`overhead.rs`).
    assert_eq!(workspaces, 2 * 8_519_680);
    for (run, measured) in [
        ("cpu-bert-mini-mlm-bf16-adamw-eager-b4s128", 185_525_760u64),
        ("cpu-bert-mini-mlm-bf16-adamw-eager-b2s128", 126_374_400),
    ] {
        let case = cases
            .iter()
            .find(|c| c["source_id"] == run)
            .unwrap_or_else(|| panic!("{run}: no case"));
        let job: Job = serde_json::from_value(case["job"].clone()).unwrap();
        let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
        let resolved = job.resolve(None).unwrap();
        let report = estimate(&model.into_input(), &resolved).unwrap();
        let got = report.per_gpu.peaks.peak_allocated.unwrap() - workspaces;
        let err = (got as f64 - measured as f64) / measured as f64;
        assert!(err.abs() <= 0.02, "{run}: {got} vs {measured} ({err:+.4})");
        assert_eq!(
            report.per_gpu.peaks.peak_phase.as_deref(),
            Some("backward"),
            "{run}"
        );
    }
}
