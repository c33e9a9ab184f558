//! The diffusion estimate against measurements: `validation/cpu-measured-diffusion.json` holds
//! the peak live tensor bytes of a tiny Flux transformer's forward and a tiny VAE's decode
//! (plain, tiled, sliced), measured op by op on the CPU with diffusers 0.42.1 and torch 2.15
//! (`scripts/measure_diffusion.patch`), and LoRA training steps of a tiny Flux transformer
//! (`scripts/measure_diffusion_train.patch`: the VAE encode and the forward/backward phases'
//! whole live bytes, weights and optimizer states included); each phase's estimate must be
//! within the case's tolerance (3 %): its activations (`phases.NAME.activations`), or its
//! allocated bytes net of the cuBLAS workspaces a CPU run has none of
//! (`phases.NAME.allocated`).

use serde_json::Value;
use std::path::PathBuf;
use vramscope_core::diffusion::estimate::phases;
use vramscope_core::diffusion::job::DiffusionJob;
use vramscope_formats::diffusers::read_pipeline_dir;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn estimates_within_tolerance_of_measured() {
    let text =
        std::fs::read_to_string(root().join("validation/cpu-measured-diffusion.json")).unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(cases.len() >= 16, "{} cases", cases.len());
    let mut worst: f64 = 0.0;
    for c in &cases {
        let mut job = c["job"].clone();
        let dir = root().join(job["model"].as_str().unwrap());
        job.as_object_mut().unwrap().remove("model");
        let p = read_pipeline_dir(&dir).unwrap();
        let j: DiffusionJob = serde_json::from_value(job).unwrap();
        let r = j.resolve(&p).unwrap();
        let metric: Vec<&str> = c["metric"].as_str().unwrap().split('.').collect();
        let ph = phases(&p, &r, None)
            .unwrap()
            .into_iter()
            .find(|x| x.phase == metric[1])
            .unwrap();
        let got = match metric[2] {
            "activations" => ph.activations,
            "allocated" => ph.allocated - ph.temporaries,
            m => panic!("{}: metric {m}", c["id"]),
        } as f64;
        let want = c["expected_bytes"].as_f64().unwrap();
        let err = (got - want).abs() / want;
        worst = worst.max(err);
        assert!(
            err <= c["tolerance"].as_f64().unwrap(),
            "{}: estimate {got} vs measured {want} ({:.2} %)",
            c["id"],
            err * 100.0
        );
    }
    assert!(worst < 0.03, "worst {worst}");
}
