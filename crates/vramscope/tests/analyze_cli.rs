//! `vramscope analyze` / `compare` end to end on the real fixtures in ../shared/fixtures.

mod common;
use common::*;

use common::shared_fixture as fixture;

#[test]
fn analyze_json_has_the_contract_shape() {
    let v = run_json(&["analyze", &fixture("cpu_timeline.json"), "--json"]);
    let g = &v["per_gpu"];
    let c = &g["components"];
    // The categories peak_allocated is the sum of (the contract's per_gpu.components; the
    // CUDA context and the allocator's reserve lie outside what PyTorch allocates).
    let allocated = contract_components::ALLOCATED;
    for k in allocated.iter().chain(&contract_components::OUTSIDE) {
        assert!(c[k].is_u64(), "components.{k} missing");
    }
    // 652,544 fp32 parameters of the fixture's model (fixtures/samples_meta.json): 4 B each.
    assert_eq!(c["parameters"], 4 * 652_544);
    let sum: u64 = allocated.iter().map(|k| c[k].as_u64().unwrap()).sum();
    assert_eq!(g["peak_allocated"].as_u64(), Some(sum));
    assert!(g["peak_reserved"].is_null());
    assert_eq!(g["peak_phase"], "backward");
    let tl = v["timeline"].as_array().unwrap();
    assert!(!tl.is_empty());
    for p in tl {
        assert!(p["phase"].is_string() && p["label"].is_string() && p["allocated"].is_u64());
        assert!(p["by_category"].is_object());
    }
}

#[test]
fn analyze_snapshot_human_output() {
    vramscope()
        .args([
            "analyze",
            &fixture("synthetic/synthetic_cuda_snapshot_p5.pickle"),
        ])
        .assert()
        .success()
        .stdout(predicates::str::contains("optimizer states"))
        .stdout(predicates::str::contains("_multi_tensor_adamw"))
        .stdout(predicates::str::contains("OOM"));
}

#[test]
fn bad_file_exits_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("vramscope-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let evil = dir.join("evil.pickle");
    std::fs::write(&evil, b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsR.").unwrap();
    for path in [
        evil.to_string_lossy().into_owned(),
        fixture("tiny_llama_q8.gguf"),
        dir.join("missing.pickle").to_string_lossy().into_owned(),
    ] {
        let out = vramscope().args(["analyze", &path]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{path}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(&path), "{err}");
    }
    let out = vramscope()
        .args(["analyze", &evil.to_string_lossy()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("GLOBAL"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_puts_estimate_and_measurement_side_by_side() {
    // The fixture's model as a bare parameter count: model states are exact.
    let job = temp_file(
        "compare",
        "job.json",
        r#"{"model": {"params": 652544}, "task": "train", "batch": 8, "seq": 64,
            "precision": "fp32", "optimizer": "adamw"}"#,
    );
    let out = vramscope()
        .args([
            "compare",
            "--job",
            &job.to_string_lossy(),
            &fixture("cpu_timeline.json"),
            "--json",
        ])
        .output()
        .unwrap();
    let v = json_ok(&out);
    let rows = v["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["category"] == name).unwrap().clone();
    // Parameters: 4 B × 652,544 in both.
    assert_eq!(row("parameters")["estimated"], 4 * 652_544);
    assert_eq!(row("parameters")["measured"], 4 * 652_544);
    assert_eq!(row("parameters")["difference"], 0);
    assert!(v["residual"]["unattributed"].is_u64());
    let _ = std::fs::remove_file(&job);
}

#[test]
fn calibrated_fit_carries_the_measured_residual() {
    let snap = fixture("synthetic/synthetic_cuda_snapshot_p5.pickle");
    let out = vramscope()
        .args([
            "fit",
            &fixture("hf_tiny_llama"),
            "--batch",
            "8",
            "--seq",
            "64",
            "--gpu",
            "a100-80gb",
            "--measured",
            &snap,
            "--json",
        ])
        .output()
        .unwrap();
    let v = json_ok(&out);
    let rules = v["calibration"]["rules"].as_array().unwrap();
    let rule = |n: &str| rules.iter().find(|r| r["category"] == n).unwrap().clone();
    // The script (fixtures/scripts/make_synthetic_cuda_snapshot.py) allocates 4 MiB − 100 bytes
    // under the optimizer step: a model state, carried as a fixed residual. It counts as its
    // block, as max_memory_allocated does: rounded to 512 B (`round_size`), 4 MiB.
    let opt = rule("optimizer_states");
    assert_eq!(opt["measured"], 4 * 1024 * 1024);
    assert_eq!(opt["rule"], "fixed");
    assert_eq!(
        opt["add"].as_i64().unwrap(),
        4 * 1024 * 1024 - opt["estimated"].as_i64().unwrap()
    );
    // Peak allocated, in blocks = 8 MiB + 4 MiB + 512 + 512 (500 B in a 512 B block) =
    // 12,583,936 bytes under segments of 20 MiB + 2 MiB: reserved / allocated =
    // 23,068,672 / 12,583,936.
    let k = v["calibration"]["reserve_ratio"].as_f64().unwrap();
    assert!((k - 23_068_672.0 / 12_583_936.0).abs() < 1e-9, "{k}");
    // The prediction fits, and says how much of it the calibration supplies.
    let at = &v["at_max_batch"];
    let total = at["device_total"].as_u64().unwrap();
    assert!(total <= v["capacity"].as_u64().unwrap());
    let correction = total as i64 - at["estimated_device_total"].as_i64().unwrap();
    assert!(correction != 0);
    assert!(v["max_batch"].as_u64().unwrap() >= 1);
    assert_eq!(v["measured_batch"], 8);
}

#[test]
fn calibrated_fit_errors_are_one_line() {
    let snap = fixture("synthetic/synthetic_cuda_snapshot_p5.pickle");
    for args in [
        // No GPU to fit.
        vec!["fit", "gpt2", "--measured", &snap],
        // A bare parameter count: no activations to scale.
        vec![
            "fit",
            "125000000",
            "--gpu",
            "a100-80gb",
            "--measured",
            &snap,
        ],
        // A measurement that is not a record.
        vec![
            "fit",
            "gpt2",
            "--gpu",
            "a100-80gb",
            "--measured",
            "/nonexistent/snapshot.pickle",
        ],
    ] {
        let out = vramscope().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn watch_without_a_driver_is_one_line_and_exit_2() {
    let out = vramscope()
        .args(["watch", "--json", "--interval", "20", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) {
        // No libnvidia-ml.so.1 here (the CI and build machines have no GPU): named, one line.
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("NVML"), "{err}");
    } else {
        // A driver is present: `true` ran under watch and its exit code (0) came back.
        assert_eq!(out.status.code(), Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["exit_code"], 0);
        assert!(v["samples"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn analyze_replays_a_trace_and_leaves_records_without_one_alone() {
    // A snapshot with a trace (GPT-2 on an H200, history from the first tensor): `allocator`
    // in the JSON, and the expandable-segments line in the human output.
    let gpt2 = fixture("gpu-h200/snapshot-gpt2-snap-fp32-adamw-eager-b4s512.pickle");
    let out = vramscope()
        .args(["analyze", &gpt2, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let x = &v["allocator"];
    for k in ["replayed_peak_reserved", "fragmentation", "whatif"] {
        assert!(!x[k].is_null(), "allocator.{k} missing: {x}");
    }
    assert!(x["whatif"]["expandable_segments"].is_u64());
    let out = vramscope().args(["analyze", &gpt2]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("with expandable_segments:True this run would have reserved"),
        "{text}"
    );
    // A profiler timeline and a snapshot without a trace: no `allocator` key at all.
    for rel in ["cpu_timeline.json", "cpu_only_empty_cuda_snapshot.pickle"] {
        let out = vramscope()
            .args(["analyze", &fixture(rel), "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.get("allocator").is_none(), "{rel}");
    }
}
