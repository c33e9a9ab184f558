//! The environment a test runs `vramscope` in against the mock Hub: its own HF home and
//! vramscope cache in a temporary folder (removed when the test ends), the Hub at the mock's
//! address, and none of the caller's tokens, offline switches, caches or proxies.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

pub struct Env {
    pub dir: PathBuf,
}

impl Env {
    /// A fresh folder named by the test binary (`tag`) and the test (`name`): the binaries of
    /// this crate run at once.
    pub fn new(tag: &str, name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("vramscope-{tag}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hf_home")).unwrap();
        Env { dir }
    }

    /// `vramscope` with the Hub at `endpoint`, a 5 s timeout, and this folder's caches.
    pub fn cmd(&self, endpoint: &str) -> Command {
        hub_cmd(&self.dir, endpoint)
    }
}

/// `vramscope` with the Hub at `endpoint`, a 5 s timeout, and the HF home and vramscope cache
/// under `home` (`hf_home/`, `cache/`).
pub fn hub_cmd(home: &Path, endpoint: &str) -> Command {
    let mut c = Command::cargo_bin("vramscope").unwrap();
    for k in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
        "RUST_BACKTRACE",
    ] {
        c.env_remove(k);
    }
    c.env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", home.join("hf_home"))
        .env("VRAMSCOPE_CACHE", home.join("cache"))
        .env("VRAMSCOPE_HUB_TIMEOUT", "5");
    c
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `c`'s refusal: exit 2 and one line on stderr (returned trimmed).
pub fn fails(c: &mut Command) -> String {
    let out = c.assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}
