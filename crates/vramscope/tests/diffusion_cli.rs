//! `inspect` on a diffusers pipeline directory (the real FLUX.1-dev and SDXL configs in
//! crates/formats/tests/fixtures/diffusers, sources in its README).

mod common;
use common::*;

use common::diffusers_fixture as fixture;

/// FLUX.1-dev: four models, 123,060,480 + 4,762,310,656 + 11,901,408,320 + 83,819,683 =
/// 16,870,599,139 parameters (diffusers' meta-device counts); in 16-bit 33,741,198,278 B all
/// resident, and under model offload the transformer's 2 · 11,901,408,320 = 23,802,816,640 B.
#[test]
fn inspect_lists_flux_components_as_json() {
    let v = run_json(&["inspect", &fixture("flux.1-dev"), "--json"]);
    assert_eq!(v["pipeline"], "FluxPipeline");
    assert_eq!(v["params_total"], 16_870_599_139u64);
    assert_eq!(v["resident_bytes_16bit"], 33_741_198_278u64);
    assert_eq!(v["resident_bytes_16bit_model_offload"], 23_802_816_640u64);
    assert_eq!(v["cfg_doubles_batch"], false);
    let names = strs_at(&v["components"], "name");
    assert_eq!(
        names,
        ["text_encoder", "text_encoder_2", "transformer", "vae"]
    );
    assert_eq!(v["components"][2]["role"], "denoiser");
    assert_eq!(v["components"][2]["params"], 11_901_408_320u64);
}

/// The terminal view names the UNet and its count (2,567,463,684) and says CFG doubles it.
#[test]
fn inspect_shows_sdxl_unet() {
    inspect_shows(
        &fixture("sdxl-base-1.0"),
        &[
            "StableDiffusionXLPipeline",
            "UNet2DConditionModel",
            "2,567,463,684",
            "twice the batch",
        ],
    );
}

/// A pipeline with a component class vramscope does not read is refused in one line, exit 2.
#[test]
fn unknown_component_class_exits_2() {
    let dir = std::env::temp_dir().join(format!("vramscope-pipe-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("controlnet")).unwrap();
    std::fs::write(
        dir.join("model_index.json"),
        r#"{"_class_name": "X", "controlnet": ["diffusers", "ControlNetModel"]}"#,
    )
    .unwrap();
    std::fs::write(dir.join("controlnet/config.json"), "{}").unwrap();
    let out = vramscope()
        .args(["inspect", dir.to_str().unwrap()])
        .assert()
        .code(2);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(err.contains("ControlNetModel"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
