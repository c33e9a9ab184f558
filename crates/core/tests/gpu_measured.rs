//! The H200 measurements (`validation/gpu-h200-measured.json`, made by
//! `scripts/gpu_cases_from_results.py` from `../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl`:
//! one NVIDIA H200, torch 2.11.0+cu130, transformers 5.17.0, driver 580.159.04) run through the
//! estimator in-process, each figure against its tolerance; and the figures the estimator takes
//! from that run (Hopper's CUDA context, the cuBLAS workspace) read off it again here.

mod common;
use common::h200_results;

use serde_json::Value;
use vramscope_core::estimate::estimate;
use vramscope_core::estimate::overhead;
use vramscope_core::gpu::find;
use vramscope_core::job::{merge_if_supported, CudaModuleLoading, Job, TorchVersion};

/// One figure's tolerance and whether the test holds every case to it (all three are: the
/// reserve comes from the simulated caching allocator, `docs/allocator-stream.md`).
struct Check {
    metric: &'static str,
    tolerance: f64,
    asserted: bool,
}

const CHECKS: [Check; 3] = [
    Check {
        metric: "per_gpu.peak_allocated",
        tolerance: 0.02,
        asserted: true,
    },
    Check {
        metric: "per_gpu.peak_reserved",
        tolerance: 0.03,
        asserted: true,
    },
    Check {
        metric: "per_gpu.device_total",
        tolerance: 0.03,
        asserted: true,
    },
];

fn cases() -> Vec<Value> {
    common::validation("gpu-h200-measured.json")
}

/// The results file's lines whose spec finished (`status: ok`).
fn results() -> Vec<Value> {
    h200_results()
}

fn metric(report: &Value, path: &str) -> Option<f64> {
    let mut v = report;
    for part in path.split('.') {
        v = v.get(part)?;
    }
    v.as_f64()
}

/// The estimate of a case's job (its `job_if_supported` merged: the run's `torch_version`,
/// and for one run `cuda_module_loading`) at the case's metric.
fn estimated(case: &Value) -> f64 {
    let job = merge_if_supported(&case["job"], case.get("job_if_supported"));
    let job: Job = serde_json::from_value(job).unwrap();
    let (input, resolved) = common::prepared(&job);
    let report = serde_json::to_value(estimate(&input, &resolved).unwrap()).unwrap();
    metric(&report, case["metric"].as_str().unwrap()).unwrap()
}

/// Every case is a figure of the results file as it stands (the spec's `measured` value), with
/// the provenance the lead asked for and the tolerance of its figure.
#[test]
fn gpu_cases_are_the_results_file() {
    let results = results();
    let cases = cases();
    // 19 specs measured; the expandable-segments run has no reserved or device-total case
    // (the job has no field for the allocator's settings yet): 19 + 18 + 18.
    assert_eq!(results.len(), 19);
    assert_eq!(cases.len(), 55);
    for c in &cases {
        let spec = c["provenance"]["spec"].as_str().unwrap();
        let r = results.iter().find(|r| r["id"] == spec).unwrap();
        let key = c["metric"].as_str().unwrap().trim_start_matches("per_gpu.");
        assert_eq!(c["expected_bytes"], r["measured"][key], "{}", c["id"]);
        assert_eq!(c["job"], r["job"], "{}", c["id"]);
        let p = &c["provenance"];
        assert_eq!(p["file"], "results-h200-2026-12-04.jsonl");
        assert_eq!(p["gpu"], "NVIDIA H200");
        assert_eq!(p["driver"], "580.159.04");
        assert_eq!(p["torch"], "2.11.0+cu130");
        assert_eq!(p["transformers"], "5.17.0");
        assert!(p["date"].as_str().unwrap().starts_with("2026-12-04"));
        assert_eq!(c["job_if_supported"]["torch_version"], "2.11");
        let check = CHECKS.iter().find(|k| k.metric == c["metric"]).unwrap();
        assert_eq!(
            c["tolerance"].as_f64(),
            Some(check.tolerance),
            "{}",
            c["id"]
        );
    }
}

/// Runs held apart, with why: printed, not asserted. None today: the static-cache generate at
/// 4096 prompt tokens, held here until the inference stream wrote Python's name lifetimes
/// under `no_grad` (docs/allocator-stream.md, "Inference"), is asserted like every other run.
const NOT_EXPRESSIBLE: &[(&str, &str)] = &[];

/// Each case against the estimate, one table per figure: every asserted figure within its
/// tolerance on every case but the `NOT_EXPRESSIBLE` ones; the others printed with their
/// errors.
#[test]
fn gpu_measured_cases() {
    let cases = cases();
    for check in &CHECKS {
        let mut errors = Vec::new();
        println!("{} (tolerance {}):", check.metric, check.tolerance);
        for c in cases.iter().filter(|c| c["metric"] == check.metric) {
            let expected = c["expected_bytes"].as_f64().unwrap();
            let got = estimated(c);
            let err = (got - expected) / expected;
            println!(
                "  {:64} {expected:>16.0} {got:>16.0} {:>+8.2}%",
                c["id"].as_str().unwrap(),
                err * 100.0
            );
            errors.push((c["id"].as_str().unwrap().to_string(), err));
        }
        let within = errors
            .iter()
            .filter(|(_, e)| e.abs() <= check.tolerance)
            .count();
        let mut sorted: Vec<f64> = errors.iter().map(|(_, e)| *e).collect();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let worst = sorted
            .iter()
            .copied()
            .max_by(|a, b| a.abs().partial_cmp(&b.abs()).unwrap())
            .unwrap();
        println!(
            "  within {within} of {}, median {:+.2}%, worst {:+.2}%{}",
            errors.len(),
            sorted[sorted.len() / 2] * 100.0,
            worst * 100.0,
            if check.asserted {
                ""
            } else {
                " (tracked, not asserted)"
            }
        );
        if check.asserted {
            for (id, e) in &errors {
                if let Some((_, why)) = NOT_EXPRESSIBLE.iter().find(|(p, _)| id.starts_with(p)) {
                    println!("  not asserted: {id} ({why}): {:+.2}%", e * 100.0);
                    continue;
                }
                assert!(e.abs() <= check.tolerance, "{id}: {:+.2}%", e * 100.0);
            }
        }
    }
}

/// Hopper's context is the median, over the lazy-loading runs, of what each process holds
/// outside the allocator at the end of its last step (NVML process used − reserved), and the
/// eager figure the eager run's; every run holds more there than after the context probe's
/// first matmuls (kernels loaded by the step), which is why the after-step figure is the one.
#[test]
fn hopper_context_is_the_h200s_after_a_step() {
    let (mut lazy, mut eager) = (Vec::new(), Vec::new());
    for r in results() {
        let after_step = r["steps"].as_array().unwrap().last().unwrap()["end"]["outside_allocator"]
            .as_u64()
            .unwrap();
        let after_matmul = r["context"]["after_matmul"]["outside_allocator"]
            .as_u64()
            .unwrap();
        assert!(after_step > after_matmul, "{}", r["id"]);
        if r["env"]["CUDA_MODULE_LOADING"] == "EAGER" {
            eager.push(after_step);
        } else {
            lazy.push(after_step);
        }
    }
    lazy.sort_unstable();
    assert_eq!((lazy.len(), eager.len()), (18, 1));
    let median = (lazy[8] + lazy[9]) / 2;
    let h200 = find("h200-141gb").unwrap();
    let ctx = |l| overhead::cuda_context_bytes_with(Some(h200), l);
    assert_eq!(ctx(CudaModuleLoading::Lazy), median);
    assert_eq!(ctx(CudaModuleLoading::Eager), eager[0]);
}

/// The first matmul's workspace on the H200 (torch 2.11) is one cuBLAS workspace per handle
/// with no cuBLASLt part (the probe's `mm` runs on cuBLAS): 33,554,432 B in every run.
#[test]
fn cublas_workspace_is_the_h200s() {
    let h200 = find("h200-141gb").unwrap();
    let v211 = TorchVersion::parse("torch_version", "2.11").unwrap();
    let one = overhead::blas_workspaces_bytes_for(Some(h200), false, Some(v211), false);
    for r in results() {
        assert_eq!(
            r["context"]["workspace_allocated_after_matmul"].as_u64(),
            Some(one),
            "{}",
            r["id"]
        );
    }
}

/// What `vramscope validate` takes off a CPU-measured case's peak
/// (`activations::job_blas_workspaces_bytes`) is the workspace figure the estimate's step starts
/// with (its first timeline point's temporaries, nothing else being there on one GPU). GPT-2
/// (`Conv1D` runs `addmm` with a bias: a cuBLASLt GEMM) training on the H200 under torch 2.11:
/// two cuBLAS workspaces of 33,554,432 B (the test above) plus cuBLASLt's own 1,048,576 B
/// (2.9 ≤ torch < 2.12) = 68,157,440 B; inference one of each, 34,603,008 B; with no GPU and
/// today's torch, cuBLAS's default `:4096:2:16:8` (2 × 4 MiB + 8 × 16 KiB = 8,519,680 B) per
/// handle, 17,039,360 B for training.
#[test]
fn validate_nets_the_workspaces_the_step_starts_with() {
    use vramscope_formats::model_source::load_job_model;
    for (gpu, torch, task, want) in [
        (Some("h200-141gb"), Some("2.11"), "train", 68_157_440u64),
        (Some("h200-141gb"), Some("2.11"), "infer", 34_603_008),
        (None, None, "train", 17_039_360),
    ] {
        let job: Job = serde_json::from_value(serde_json::json!({"model": "gpt2", "task": task,
            "batch": 1, "seq": 128, "precision": "fp32", "gpu": gpu, "torch_version": torch}))
        .unwrap();
        let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
        let resolved = job.resolve(Some(1024)).unwrap();
        let nets = vramscope_core::estimate::activations::job_blas_workspaces_bytes(
            model.spec.as_ref(),
            &resolved,
        )
        .unwrap();
        assert_eq!(nets, want, "{gpu:?} {task}");
        let r = estimate(&model.into_input(), &resolved).unwrap();
        assert_eq!(r.timeline[0].by_category.get("temporaries"), Some(&want));
    }
}
