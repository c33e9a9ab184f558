//! MODEL resolution for every command and the server: one call into `vramscope-hub` (local
//! path, preset, Hugging Face cache, vramscope's cache, the Hub), with the process's fetch
//! flags (`--refresh`, `--verbose`); before it, the models this process holds in memory by id
//! (the server's uploads, `hold`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use vramscope_formats::hf_config::ReadOptions;
use vramscope_formats::model_source::LoadedModel;
use vramscope_formats::FormatError;
use vramscope_hub::{Options, Reached, Resolved};

static REFRESH: AtomicBool = AtomicBool::new(false);
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Records `--refresh` and `--verbose` for this process (each `cli_main` call sets its own).
pub fn set_fetch_flags(refresh: bool, verbose: bool) {
    REFRESH.store(refresh, Ordering::Relaxed);
    VERBOSE.store(verbose, Ordering::Relaxed);
}

/// The options a command resolves with. (A server bound beyond loopback refuses Hub ids before
/// they get here unless it was started with `--allow-hub`.)
pub fn options(assume_llama: bool) -> Options {
    let (refresh, verbose) = (
        REFRESH.load(Ordering::Relaxed),
        VERBOSE.load(Ordering::Relaxed),
    );
    Options {
        read: ReadOptions { assume_llama },
        refresh,
        verbose,
        no_network: false,
    }
}

/// Models held in memory, by id: read once from an upload's bytes, never written to disk.
static HELD: Mutex<Vec<(String, LoadedModel)>> = Mutex::new(Vec::new());

/// Holds `model` under `id` (an id no path or preset can be: the server's `upload:N/NAME`).
pub fn hold(id: &str, model: LoadedModel) {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id.to_string(), model));
}

/// Lets go of the model held under `id`.
pub fn release(id: &str) {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(i, _)| i != id);
}

/// Whether a model is held under `id`.
pub fn is_held(id: &str) -> bool {
    held(id).is_some()
}

fn held(id: &str) -> Option<LoadedModel> {
    let list = HELD.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().find(|(i, _)| i == id).map(|(_, m)| m.clone())
}

/// Resolves MODEL with this process's flags: a model held under that id, else the one
/// resolution (local path, preset, Hugging Face cache, vramscope's cache, the Hub).
pub fn resolve(arg: &str, opts: &Options) -> Result<Resolved, FormatError> {
    if let Some(model) = held(arg) {
        return Ok(Resolved { model, peft: None });
    }
    vramscope_hub::resolve(arg, opts)
}

/// Resolves MODEL to a model or a diffusers pipeline (`vramscope_hub::resolve_any`), a model
/// held under that id first.
pub fn resolve_any(arg: &str, opts: &Options) -> Result<Reached, FormatError> {
    if let Some(model) = held(arg) {
        return Ok(Reached::Model(Resolved { model, peft: None }));
    }
    vramscope_hub::resolve_any(arg, opts)
}
