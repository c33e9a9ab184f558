//! A vision-language repo's `preprocessor_config.json` sets its image-size rules, whether the
//! repo is a local directory or a Hub id (the mock Hub of `hub/mod.rs` on loopback), and the
//! vramscope cache keeps it for the offline run.
//!
//! The model is SmolVLM2-500M-Video-Instruct (its real config and preprocessor config, from
//! `crates/formats/tests/fixtures/vlm/`, sources in the README there). Image tokens of a
//! 1024×768 image, worked by hand in `crates/formats/tests/vlm_families.rs` from
//! `get_number_of_image_patches` and `_prompt_split_image`: with the published
//! `size.longest_edge` 2048 and 512 px tiles, 3 × 4 tiles + the global image → 12·(64 + 2) + 3
//! + 64 + 3 = 862; with `size.longest_edge` 1024, 2 × 2 tiles → 4·66 + 2 + 67 = 333.

mod common;
#[allow(dead_code)]
mod hub;

use hub::{text, Repo, SHA};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../formats/tests/fixtures/vlm");
    std::fs::read_to_string(format!("{dir}/{name}")).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-pre-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `estimate MODEL --images 1x1024x768 --json` → the image tokens the Report echoes.
fn image_tokens(model: &str, home: &std::path::Path, endpoint: &str, offline: bool) -> u64 {
    let mut c = hub::env::hub_cmd(home, endpoint);
    if offline {
        c.env("HF_HUB_OFFLINE", "1");
    }
    c.args(["estimate", model, "--task", "infer", "--seq", "64"])
        .args(["--images", "1x1024x768", "--json"]);
    let v = common::json_of_cmd(&mut c, &model);
    v["job"]["image_tokens"].as_u64().unwrap()
}

const SMALL_EDGE: &str =
    r#"{"size": {"longest_edge": 1024}, "max_image_size": {"longest_edge": 512}}"#;

#[test]
fn a_local_directory_reads_its_preprocessor_config() {
    let dir = tmp("dir");
    let model = dir.join("smolvlm2");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        fixture("smolvlm2-500m-video-instruct.json"),
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let none = "http://127.0.0.1:9";
    assert_eq!(image_tokens(m, &dir, none, true), 862);
    let published = fixture("smolvlm2-500m-video-instruct.preprocessor_config.json");
    std::fs::write(model.join("preprocessor_config.json"), published).unwrap();
    assert_eq!(image_tokens(m, &dir, none, true), 862);
    std::fs::write(model.join("preprocessor_config.json"), SMALL_EDGE).unwrap();
    assert_eq!(image_tokens(m, &dir, none, true), 333);
    // The config.json path itself reads the file beside it.
    let cfg = model.join("config.json");
    assert_eq!(image_tokens(cfg.to_str().unwrap(), &dir, none, true), 333);
    // A broken preprocessor config is bad input: exit 2, one line naming the file.
    std::fs::write(model.join("preprocessor_config.json"), "[1, 2").unwrap();
    let err = hub::env::fails(common::vramscope().args(["inspect", m]));
    assert!(err.contains("preprocessor_config.json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hub_repo_reads_its_preprocessor_config_and_the_cache_keeps_it() {
    let mut files = BTreeMap::new();
    files.insert(
        "config.json".to_string(),
        text(&fixture("smolvlm2-500m-video-instruct.json")),
    );
    files.insert("preprocessor_config.json".to_string(), text(SMALL_EDGE));
    let mut repos = BTreeMap::new();
    let repo = Repo {
        sha: SHA.into(),
        files,
        gated: None,
    };
    repos.insert("acme/smolvlm2".to_string(), repo);
    let mock = hub::start(hub::hub(repos, None));
    let dir = tmp("hub");
    assert_eq!(
        image_tokens("hf://acme/smolvlm2", &dir, &mock.url(), false),
        333
    );
    let asked: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
    assert!(
        asked
            .iter()
            .any(|p| p.ends_with("/preprocessor_config.json")),
        "{asked:?}"
    );
    // Offline, from vramscope's cache: the same rule.
    let n = mock.requests().len();
    let off = "http://127.0.0.1:9";
    assert_eq!(image_tokens("hf://acme/smolvlm2", &dir, off, true), 333);
    assert_eq!(mock.requests().len(), n);
    let _ = std::fs::remove_dir_all(&dir);
}
