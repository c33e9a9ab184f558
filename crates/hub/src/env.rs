//! What `huggingface_hub` users already set, read the way `huggingface_hub/constants.py` reads
//! it: `HF_ENDPOINT`, `HF_TOKEN` (else the token file `HF_TOKEN_PATH`, else `$HF_HOME/token`),
//! `HF_HUB_OFFLINE` (also `TRANSFORMERS_OFFLINE`), `HF_HUB_CACHE` (else `$HF_HOME/hub`), with
//! `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`. vramscope's
//! own cache of fetched headers is `VRAMSCOPE_CACHE`, else `$XDG_CACHE_HOME/vramscope`, else
//! `~/.cache/vramscope`.

use std::path::PathBuf;
use std::time::Duration;

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Longest token accepted from the environment or the token file.
const MAX_TOKEN_LEN: u64 = 4096;

/// Default bound on each connection attempt and on each whole request.
const DEFAULT_TIMEOUT_S: u64 = 30;

#[derive(Debug, Clone)]
pub struct HubEnv {
    pub endpoint: String,
    pub token: Option<String>,
    pub offline: bool,
    /// The Hugging Face cache (`models--ORG--NAME/...`), when a home directory is known.
    pub hf_cache: Option<PathBuf>,
    /// vramscope's cache of fetched configs and headers.
    pub cache: Option<PathBuf>,
    /// Bound on connecting and on each request as a whole (`VRAMSCOPE_HUB_TIMEOUT`, seconds).
    pub timeout: Duration,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// huggingface_hub's `_is_true`: `1`, `ON`, `YES`, `TRUE` in any case.
fn is_true(name: &str) -> bool {
    var(name).is_some_and(|v| {
        matches!(
            v.trim().to_ascii_uppercase().as_str(),
            "1" | "ON" | "YES" | "TRUE"
        )
    })
}

fn home() -> Option<PathBuf> {
    var("HOME").map(PathBuf::from)
}

fn xdg_cache() -> Option<PathBuf> {
    var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".cache")))
}

fn hf_home() -> Option<PathBuf> {
    var("HF_HOME")
        .map(PathBuf::from)
        .or_else(|| xdg_cache().map(|c| c.join("huggingface")))
}

/// The token: `HF_TOKEN`, else the first line of the token file.
fn token() -> Option<String> {
    if let Some(t) = var("HF_TOKEN") {
        return Some(t.trim().to_string());
    }
    let path = var("HF_TOKEN_PATH")
        .map(PathBuf::from)
        .or_else(|| hf_home().map(|h| h.join("token")))?;
    let text = vramscope_formats::files::read_regular_text(&path, MAX_TOKEN_LEN, "a token").ok()?;
    let t = text.lines().next()?.trim();
    (!t.is_empty()).then(|| t.to_string())
}

impl HubEnv {
    pub fn from_env() -> Self {
        let timeout = var("VRAMSCOPE_HUB_TIMEOUT")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_S));
        HubEnv {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim()
                .trim_end_matches('/')
                .to_string(),
            token: token(),
            offline: is_true("HF_HUB_OFFLINE") || is_true("TRANSFORMERS_OFFLINE"),
            hf_cache: var("HF_HUB_CACHE")
                .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
                .map(PathBuf::from)
                .or_else(|| hf_home().map(|h| h.join("hub"))),
            cache: var("VRAMSCOPE_CACHE")
                .map(PathBuf::from)
                .or_else(|| xdg_cache().map(|c| c.join("vramscope"))),
            timeout,
        }
    }
}
