//! The shared validation cases (`../shared/validation/`): published and measured figures run
//! through the estimator in-process.

use serde_json::Value;
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
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
            let job: Job = serde_json::from_value(c["job"].clone()).ok()?;
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

/// Real PyTorch training steps measured tensor by tensor: every case within its tolerance,
/// median |error| ≤ 5 %, worst ≤ 15 % (the project's goal per file).
#[test]
fn cpu_measured_cases() {
    let rows = run("dev-cases-cpu-measured.json");
    let (pass, median, worst) = summary(&rows);
    assert_eq!(pass, rows.len(), "every measured case within tolerance");
    assert!(
        median <= 0.05 && worst <= 0.15,
        "median {median}, worst {worst}"
    );
}

/// The project's own CPU-measured steps (validation/README.md): families and mechanisms the
/// shared cases lack (MoE through grouped_mm, MLA, Gemma-2 soft-capping, GQA with biases, pure
/// bf16, parallel residuals). Same goal as the shared measured file.
#[test]
fn project_measured_cases() {
    let rows = run_path(&format!(
        "{}/../../validation/cpu-measured-extra.json",
        env!("CARGO_MANIFEST_DIR")
    ));
    assert!(rows.len() >= 30, "{} cases", rows.len());
    let (pass, median, worst) = summary(&rows);
    assert_eq!(pass, rows.len(), "every measured case within tolerance");
    assert!(
        median <= 0.05 && worst <= 0.15,
        "median {median}, worst {worst}"
    );
}

/// Published figures. Three cases are known misses and stay visible here rather than tuned
/// away: HF's 2022 BERT-large benchmark on a V100 (nvidia-smi totals) ran a CUDA context
/// without lazy loading (1,343 MiB), `zero_grad()` keeping zeroed gradients alive
/// (set_to_none=False before torch 2.0) and transformers' own per-tensor AdamW; vramscope
/// models today's defaults (ACCURACY.md explains each).
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

/// `path` in ../shared, or a panic naming the missing path: these tests read the shared
/// fixtures and validation cases from ../shared beside the repository.
fn shared<P: AsRef<std::path::Path>>(path: P) -> P {
    assert!(
        path.as_ref().exists(),
        "missing {}: the tests read ../shared (fixtures, validation cases) beside the repository",
        path.as_ref().display()
    );
    path
}
