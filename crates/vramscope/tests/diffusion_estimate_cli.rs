//! `estimate` and `fit` on a diffusers pipeline directory (the real SDXL and FLUX.1 configs in
//! crates/formats/tests/fixtures/diffusers, sources in its README).

mod common;
use common::*;

use common::diffusers_fixture as fixture;

fn json(args: &[&str]) -> serde_json::Value {
    let out = vramscope().args(args).assert().success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

fn phase<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .unwrap()
}

/// SDXL in fp16 at 1024²: the pipeline upcasts the VAE to fp32 for the decode (force_upcast), so
/// the decode's 805,437,440 live elements (768 channels × 1024² + z and post_quant_conv's
/// 2 × 4 × 128², by hand in crates/core/tests/diffusion_memory.rs) are 3,221,749,760 B, the
/// call's largest phase; every weight stays resident: 2 B × (123,060,480 + 694,659,840 +
/// 2,567,463,684) for the text encoders and the UNet plus 4 B × 83,653,863 for the VAE
/// (diffusers' meta-device counts) = 7,104,983,460 B.
#[test]
fn sdxl_decode_is_the_peak() {
    let v = json(&[
        "estimate",
        &fixture("sdxl-base-1.0"),
        "--precision",
        "fp16",
        "--json",
    ]);
    assert_eq!(v["per_gpu"]["peak_phase"], "vae_decode");
    let d = phase(&v, "vae_decode");
    assert_eq!(d["activations"], 3_221_749_760u64);
    assert_eq!(d["parameters"], 7_104_983_460u64);
    assert_eq!(v["per_gpu"]["components"]["activations"], 3_221_749_760u64);
    assert_eq!(v["job"]["cfg"], true);
}

/// FLUX.1-dev under `enable_model_cpu_offload`: the transformer alone during denoising,
/// 2 B × 11,901,408,320 = 23,802,816,640 B.
#[test]
fn flux_model_offload_holds_the_transformer() {
    let v = json(&[
        "estimate",
        &fixture("flux.1-dev"),
        "--offload",
        "model",
        "--json",
    ]);
    assert_eq!(phase(&v, "denoise")["parameters"], 23_802_816_640u64);
    assert_eq!(v["job"]["cfg"], false);
    assert_eq!(v["per_gpu"]["host_bytes"], 33_741_198_278u64);
}

/// Bad input: one line naming the field, exit 2.
#[test]
fn bad_pipeline_jobs_exit_2() {
    for (args, want) in [
        (
            vec!["--width", "1000"],
            "width: 1000 is not a multiple of 16",
        ),
        (
            vec!["--seq", "10"],
            "--seq: not a field of a diffusion pipeline job",
        ),
        (
            vec!["--offload", "disk"],
            "offload: none, model or sequential",
        ),
        (vec!["--cfg", "maybe"], "cfg: on or off"),
    ] {
        let mut cmd = vramscope();
        cmd.args(["estimate", &fixture("flux.1-dev")]).args(&args);
        let out = cmd.assert().code(2);
        let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// `fit` answers the largest batch and square resolution; one more image does not fit.
#[test]
fn fit_answers_batch_and_resolution() {
    let f = json(&[
        "fit",
        &fixture("flux.1-schnell"),
        "--gpu",
        "h100-80gb",
        "--json",
    ]);
    let b = f["max_batch"].as_u64().unwrap();
    assert!(b >= 1);
    assert_eq!(f["side_step"], 16);
    let side = f["max_resolution"].as_u64().unwrap();
    assert_eq!(side % 16, 0);
    let fits = |batch: u64| {
        json(&[
            "estimate",
            &fixture("flux.1-schnell"),
            "--gpu",
            "h100-80gb",
            "--batch",
            &batch.to_string(),
            "--json",
        ])["fit"]["fits"]
            .as_bool()
            .unwrap()
    };
    assert!(fits(b) && !fits(b + 1));
}
