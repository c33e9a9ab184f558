//! `vramscope serve` and diffusers pipelines: a job whose `model` is a pipeline directory or a
//! pipeline's Hub id (the mock Hub of `hub/mod.rs` on loopback, serving the real FLUX.1-dev and
//! SDXL configs) is a diffusion job. `/api/estimate`, `/api/fit` and `/api/inspect` answer
//! byte for byte what the CLI prints for the same job; a field a pipeline does not have is a
//! 400 naming it.

mod common;
#[allow(dead_code)]
mod hub;
mod pipeline_repos;

use pipeline_repos::{fixture_dir, repos};
use std::process::{Child, Command};

/// The server (killed when the test ends) and the environment it and the CLI share.
struct Server {
    child: Child,
    addr: String,
    env: Vec<(String, String)>,
    dir: std::path::PathBuf,
    _mock: hub::Mock,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn command(env: &[(String, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    for k in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "HF_HUB_CACHE",
        "RUST_BACKTRACE",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().map(|(k, v)| (k, v)));
    c
}

/// The server against a fresh mock Hub of the pipeline repos (`name` names its folder).
fn start(name: &str) -> Server {
    let mock = hub::start(hub::hub(repos(), None));
    let endpoint = &mock.url();
    let dir =
        std::env::temp_dir().join(format!("vramscope-servepipe-{name}-{}", std::process::id()));
    let env: Vec<(String, String)> = vec![
        ("HF_ENDPOINT".into(), endpoint.into()),
        ("HF_HOME".into(), dir.join("hf_home").display().to_string()),
        (
            "VRAMSCOPE_CACHE".into(),
            dir.join("cache").display().to_string(),
        ),
        ("VRAMSCOPE_HUB_TIMEOUT".into(), "5".into()),
    ];
    let (child, addr) = common::http::spawn_serve(&mut command(&env), &[]);
    Server {
        child,
        addr,
        env,
        dir,
        _mock: mock,
    }
}

/// POST `body` to `path`: the status and the body.
fn post(s: &Server, path: &str, body: &str) -> (u16, String) {
    let r = common::http::post_json(&s.addr, path, body);
    (r.status, r.text())
}

/// What the CLI prints for `args`, in the server's environment.
fn cli(s: &Server, args: &[&str]) -> String {
    let out = command(&s.env).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The local FLUX.1-dev pipeline directory.
fn flux_dir() -> String {
    fixture_dir("flux.1-dev").display().to_string()
}

fn job_file(name: &str, job: &serde_json::Value) -> String {
    let p = std::env::temp_dir().join(format!(
        "vramscope-servepipe-{name}-{}.json",
        std::process::id()
    ));
    std::fs::write(&p, job.to_string()).unwrap();
    p.display().to_string()
}

/// A local FLUX.1-dev directory and SDXL base by Hub id: estimate, fit and inspect over the API
/// equal the CLI's `--json` for the same job; the pipeline's report has its three phases.
#[test]
fn pipeline_jobs_answer_what_the_cli_prints() {
    let s = start("same");
    let flux = flux_dir();
    for (name, job) in [
        (
            "flux",
            serde_json::json!({"model": flux, "width": 1024, "height": 768, "batch": 2,
                               "offload": "model", "gpu": "rtx4090-24gb"}),
        ),
        (
            "sdxl",
            serde_json::json!({"model": "stabilityai/stable-diffusion-xl-base-1.0",
                               "precision": "fp16", "cfg": true, "vae_slicing": true,
                               "vae_tiling": true, "batch": 4, "gpu": "l4-24gb"}),
        ),
    ] {
        let file = job_file(name, &job);
        let (status, body) = post(&s, "/api/estimate", &job.to_string());
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, cli(&s, &["estimate", "--job", &file, "--json"]));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let phases = common::strs_at(&v["phases"], "phase");
        assert!(
            phases.contains(&"denoise") && phases.contains(&"vae_decode"),
            "{phases:?}"
        );
        assert!(
            phases.iter().any(|p| p.starts_with("text_encode:")),
            "{phases:?}"
        );
        let (status, body) = post(&s, "/api/fit", &job.to_string());
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, cli(&s, &["fit", "--job", &file, "--json"]));
    }
    let (status, body) = post(
        &s,
        "/api/inspect",
        r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        cli(
            &s,
            &[
                "inspect",
                "stabilityai/stable-diffusion-xl-base-1.0",
                "--json"
            ]
        )
    );
    // The SDXL base UNet's count (diffusers' meta-device count, fixtures README).
    assert!(body.contains("2567463684"), "{body}");
}

/// Fields of a language-model job are named in a 400, as the CLI names its flags; so are bad
/// values; and the server keeps answering.
#[test]
fn bad_pipeline_jobs_are_400_naming_the_field() {
    let s = start("bad");
    let flux = flux_dir();
    for (job, want) in [
        (serde_json::json!({"model": &flux, "seq": 2048}), "seq"),
        (serde_json::json!({"model": &flux, "width": 1000}), "width"),
        (
            serde_json::json!({"model": &flux, "offload": "disk"}),
            "offload",
        ),
        (serde_json::json!({"model": &flux, "batch": -1}), "batch"),
    ] {
        let (status, body) = post(&s, "/api/estimate", &job.to_string());
        assert_eq!(status, 400, "{body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(e["error"].as_str().unwrap().contains(want), "{body}");
    }
    let (status, _) = post(&s, "/api/estimate", r#"{"model": "gpt2"}"#);
    assert_eq!(status, 200, "a model's job still reads as one");
}
