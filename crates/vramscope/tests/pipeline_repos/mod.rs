//! Diffusers pipeline repos for the mock Hub (`hub/mod.rs`): the real configs of
//! `crates/formats/tests/fixtures/diffusers/` (sources in its README) laid out as the Hub lists
//! them, with weights beside them that must never be fetched.

use crate::hub::{text, Body, Repo, SHA};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../formats/tests/fixtures/diffusers/{name}"))
}

/// A pipeline repo as the Hub lists it: the fixture's configs, the tokenizers and scheduler
/// that hold no weights, and weights (a single-file checkpoint at the top and each component's
/// safetensors) that must never be asked for: 12 GB each, served as zeros.
pub fn pipeline_repo(name: &str, gated: Option<&str>) -> Repo {
    let mut files = BTreeMap::new();
    let root = fixture_dir(name);
    files.insert(
        "model_index.json".to_string(),
        text(&std::fs::read_to_string(root.join("model_index.json")).unwrap()),
    );
    for e in std::fs::read_dir(&root).unwrap().flatten() {
        if e.path().is_dir() {
            let comp = e.file_name().to_string_lossy().to_string();
            let cfg = std::fs::read_to_string(e.path().join("config.json")).unwrap();
            files.insert(format!("{comp}/config.json"), text(&cfg));
            files.insert(
                format!("{comp}/diffusion_pytorch_model.safetensors"),
                Body::Virtual(vec![], 12 << 30),
            );
        }
    }
    for extra in [
        "tokenizer/vocab.json",
        "tokenizer/merges.txt",
        "scheduler/scheduler_config.json",
        "README.md",
    ] {
        files.insert(extra.to_string(), text("{}"));
    }
    files.insert(
        "single-file-checkpoint.safetensors".into(),
        Body::Virtual(vec![], 23 << 30),
    );
    Repo {
        sha: SHA.into(),
        files,
        gated: gated.map(str::to_string),
    }
}

pub fn repos() -> BTreeMap<String, Repo> {
    let mut r = BTreeMap::new();
    r.insert(
        "black-forest-labs/FLUX.1-dev".into(),
        pipeline_repo("flux.1-dev", Some("hf_good")),
    );
    r.insert(
        "stabilityai/stable-diffusion-xl-base-1.0".into(),
        pipeline_repo("sdxl-base-1.0", None),
    );
    r.insert(
        "stabilityai/stable-diffusion-3.5-large".into(),
        pipeline_repo("sd3.5-large", None),
    );
    r
}
