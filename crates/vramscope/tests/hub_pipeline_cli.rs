//! Diffusers pipelines by Hub id, end to end through the binary, against the mock Hub of
//! `hub/mod.rs` on loopback: a repo is a pipeline by its `model_index.json`; the components'
//! `config.json` files are all that is fetched (never the weights beside them); gated repos,
//! the offline second run from vramscope's cache, and hostile answers, one line each.
//!
//! The repos serve the real configs of `crates/formats/tests/fixtures/diffusers/` (sources in
//! its README). Parameter counts are diffusers' and transformers' own, from models built on the
//! meta device from those files (`count_params.py` there, diffusers 0.42.1, transformers 5.24):
//! FLUX.1-dev 123,060,480 (CLIP) + 4,762,310,656 (T5) + 11,901,408,320 (transformer) +
//! 83,819,683 (VAE) = 16,870,599,139; SDXL base's UNet 2,567,463,684.

mod common;
use common::argv;

#[allow(dead_code)]
mod hub;
mod pipeline_repos;

use assert_cmd::Command;
use hub::env::{fails, Env};
use hub::{text, Body, SHA};
use pipeline_repos::{fixture_dir, pipeline_repo, repos};

fn ok_json(c: &mut Command) -> serde_json::Value {
    let out = c.assert().success().get_output().clone();
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// The report less where the model was read (name, source, origin).
fn figures(mut v: serde_json::Value) -> serde_json::Value {
    for k in ["name", "source", "origin"] {
        v["model"].as_object_mut().unwrap().remove(k);
    }
    v
}

/// FLUX.1-dev by Hub id: gated (401 without a token, named); with the token, the listing,
/// model_index.json and the four components' configs — six requests, no weights — give the
/// pipeline the local directory gives (the same report, figure for figure), the count of the
/// file header above, and a second run with the network forbidden reads vramscope's cache.
#[test]
fn flux_by_hub_id_fetches_configs_only_and_matches_the_local_directory() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hubpipe", "flux");
    let e = fails(
        env.cmd(&mock.url())
            .args(argv("estimate black-forest-labs/FLUX.1-dev --width 1024")),
    );
    assert!(e.contains("black-forest-labs/FLUX.1-dev is gated"), "{e}");
    assert!(e.contains("HF_TOKEN"), "{e}");

    let mock = hub::start(hub::hub(repos(), None));
    let args = [
        "estimate",
        "black-forest-labs/FLUX.1-dev",
        "--width",
        "1024",
        "--height",
        "768",
        "--gpu",
        "rtx4090-24gb",
        "--offload",
        "model",
        "--json",
    ];
    let v = ok_json(env.cmd(&mock.url()).env("HF_TOKEN", "hf_good").args(args));
    assert_eq!(v["model"]["params_total"], 16_870_599_139u64);
    assert_eq!(v["model"]["pipeline"], "FluxPipeline");
    assert_eq!(v["model"]["name"], "black-forest-labs/FLUX.1-dev");
    assert_eq!(v["model"]["source"], "hub");
    assert_eq!(v["model"]["origin"]["commit"], SHA);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6, "{reqs:?}");
    assert!(!reqs.iter().any(|r| r.path.contains(".safetensors")
        || r.path.contains("tokenizer")
        || r.path.contains("scheduler")));
    assert!(mock.served() < 100_000, "{} bytes", mock.served());

    let mut local_args = args.to_vec();
    let dir = fixture_dir("flux.1-dev");
    local_args[1] = dir.to_str().unwrap();
    let local = ok_json(env.cmd("http://127.0.0.1:9").args(&local_args));
    assert_eq!(local["model"]["source"], "file");
    assert_eq!(figures(v.clone()), figures(local));

    let again = ok_json(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(args),
    );
    assert_eq!(figures(again), figures(v));
    assert_eq!(mock.requests().len(), 6, "the second run is offline");
}

/// `inspect` and `fit` by Hub id: SDXL base's UNet count, the CFG note; SD3.5 Large's three
/// text encoders; hf:// forces the Hub.
#[test]
fn inspect_and_fit_by_hub_id() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hubpipe", "sdxl");
    let v = ok_json(env.cmd(&mock.url()).args([
        "inspect",
        "hf://stabilityai/stable-diffusion-xl-base-1.0",
        "--json",
    ]));
    assert_eq!(v["pipeline"], "StableDiffusionXLPipeline");
    assert_eq!(v["cfg_doubles_batch"], true);
    let unet = v["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "unet")
        .unwrap();
    assert_eq!(unet["params"], 2_567_463_684u64);
    assert_eq!(v["origin"]["kind"], "hub");
    assert!(v["source"].as_str().unwrap().contains("via the Hub"));

    let v = ok_json(env.cmd(&mock.url()).args([
        "inspect",
        "stabilityai/stable-diffusion-3.5-large",
        "--json",
    ]));
    // 123,650,304 + 694,659,840 + 4,762,310,656 (the three text encoders, meta-device counts).
    let te: u64 = v["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "text_encoder")
        .map(|c| c["params"].as_u64().unwrap())
        .sum();
    assert_eq!(te, 5_580_620_800);

    let f = ok_json(env.cmd(&mock.url()).args(argv(
        "fit stabilityai/stable-diffusion-xl-base-1.0 --gpu rtx4090-24gb --json",
    )));
    assert_eq!(f["gpu"], "rtx4090-24gb");
    assert_eq!(f["side_step"], 8, "SDXL: VAE scale 8 × patch 1");
    assert!(f["max_batch"].as_u64().unwrap() >= 1);
    assert!(f["max_resolution"].as_u64().unwrap() >= 1024);
}

/// A repo listing whose model_index.json is not JSON, one that names a model whose config the
/// repo lacks, a component config that never ends, and a model_index.json that is not a
/// pipeline's: each exit 2 with one line naming the file.
#[test]
fn hostile_pipeline_repos_are_one_line_errors() {
    let mut r = repos();
    let mut bad = pipeline_repo("sdxl-base-1.0", None);
    bad.files
        .insert("model_index.json".into(), text("{\"_class_name\": [1, "));
    r.insert("acme/not-json".into(), bad);
    let mut missing = pipeline_repo("sdxl-base-1.0", None);
    missing.files.remove("vae/config.json");
    r.insert("acme/missing-vae".into(), missing);
    let mut endless = pipeline_repo("sdxl-base-1.0", None);
    endless
        .files
        .insert("unet/config.json".into(), Body::Endless);
    r.insert("acme/endless".into(), endless);
    let mut classless = pipeline_repo("sdxl-base-1.0", None);
    classless.files.insert(
        "model_index.json".into(),
        text("{\"unet\": [\"diffusers\", \"UNet2DConditionModel\"]}"),
    );
    r.insert("acme/classless".into(), classless);
    let mut unknown = pipeline_repo("sdxl-base-1.0", None);
    unknown.files.insert(
        "model_index.json".into(),
        text("{\"_class_name\": \"P\", \"prior\": [\"diffusers\", \"PriorTransformer\"]}"),
    );
    unknown
        .files
        .insert("prior/config.json".into(), text("{\"num_layers\": 1e400}"));
    r.insert("acme/unknown".into(), unknown);
    let mock = hub::start(hub::hub(r, None));
    let env = Env::new("hubpipe", "hostile");
    for (repo, want) in [
        ("acme/not-json", "model_index.json"),
        ("acme/missing-vae", "repo has no vae/config.json"),
        ("acme/endless", "unet/config.json"),
        ("acme/classless", "_class_name"),
        ("acme/unknown", "prior/config.json"),
    ] {
        let e = fails(env.cmd(&mock.url()).args(["estimate", repo, "--json"]));
        assert!(e.contains(want), "{repo}: {e}");
    }
    // A pipeline given to a command that reads one model says which commands read it.
    let e = fails(env.cmd(&mock.url()).args(argv(
        "plan stabilityai/stable-diffusion-xl-base-1.0 --gpus 2",
    )));
    assert!(e.contains("a diffusers pipeline"), "{e}");
}

/// Copies a fixture pipeline into the Hugging Face cache layout `huggingface_hub` writes
/// (`models--ORG--NAME/refs/main`, `snapshots/<commit>/...`), leaving out `skip`.
fn into_hf_cache(env: &Env, repo: &str, fixture: &str, skip: Option<&str>) {
    let root = env
        .dir
        .join("hf_home/hub")
        .join(format!("models--{}", repo.replace('/', "--")));
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), SHA).unwrap();
    let snap = root.join("snapshots").join(SHA);
    let src = fixture_dir(fixture);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::copy(src.join("model_index.json"), snap.join("model_index.json")).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if e.path().is_dir() && Some(name.as_str()) != skip {
            std::fs::create_dir_all(snap.join(&name)).unwrap();
            std::fs::copy(
                e.path().join("config.json"),
                snap.join(&name).join("config.json"),
            )
            .unwrap();
        }
    }
}

/// A pipeline the local Hugging Face cache holds is read from it with the network forbidden
/// (`model.source` hf-cache); a partial snapshot (a component's config missing) is not read
/// as the pipeline: the Hub is asked instead, which HF_HUB_OFFLINE forbids, said in one line.
#[test]
fn pipelines_in_the_hf_cache_are_read_offline() {
    let env = Env::new("hubpipe", "hfcache");
    into_hf_cache(&env, "black-forest-labs/FLUX.1-dev", "flux.1-dev", None);
    let v = ok_json(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(["inspect", "black-forest-labs/FLUX.1-dev", "--json"]),
    );
    assert_eq!(v["params_total"], 16_870_599_139u64);
    assert_eq!(v["origin"]["kind"], "hf-cache");
    assert_eq!(v["origin"]["commit"], SHA);

    into_hf_cache(&env, "acme/partial-sdxl", "sdxl-base-1.0", Some("vae"));
    let e = fails(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(["estimate", "acme/partial-sdxl"]),
    );
    assert!(e.contains("HF_HUB_OFFLINE"), "{e}");
}
