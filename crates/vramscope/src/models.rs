//! MODEL resolution for every command and the server: one call into `vramscope-hub` (local
//! path, preset, Hugging Face cache, vramscope's cache, the Hub) with the session's fetch flags
//! (`--refresh`, `--verbose`); before it, the models the session holds in memory by id (the
//! server's uploads, `Session::hold`).
//!
//! A `Session` is built by each shell — the CLI per run from its flags, the server once for
//! its life, the Python package per call — and passed to the app functions that resolve a
//! model, so nothing a caller did before changes how MODEL resolves now.

use std::sync::Mutex;
use vramscope_formats::hf_config::ReadOptions;
use vramscope_formats::model_source::LoadedModel;
use vramscope_formats::FormatError;
use vramscope_hub::{Options, Reached, Resolved};

/// How a shell resolves MODEL: its fetch flags and the models it holds in memory by id.
#[derive(Debug, Default)]
pub struct Session {
    /// `--refresh`: fetch from the Hub again even when vramscope's cache has the commit.
    pub refresh: bool,
    /// `--verbose`: say on stderr what is fetched from where.
    pub verbose: bool,
    /// Models held in memory, by id: read once from an upload's bytes, never written to disk.
    held: Mutex<Vec<(String, LoadedModel)>>,
}

impl Session {
    /// A session with these fetch flags and no model held.
    pub fn new(refresh: bool, verbose: bool) -> Self {
        Session {
            refresh,
            verbose,
            held: Mutex::default(),
        }
    }

    /// The options a command resolves with. (A server bound beyond loopback refuses Hub ids
    /// before they get here unless it was started with `--allow-hub`.)
    pub fn options(&self, assume_llama: bool) -> Options {
        Options {
            read: ReadOptions { assume_llama },
            refresh: self.refresh,
            verbose: self.verbose,
            no_network: false,
        }
    }

    /// Holds `model` under `id` (an id no path or preset can be: the server's `upload:N/NAME`).
    pub fn hold(&self, id: &str, model: LoadedModel) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id.to_string(), model));
    }

    /// Lets go of the model held under `id`.
    pub fn release(&self, id: &str) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(i, _)| i != id);
    }

    /// Whether a model is held under `id`.
    pub fn is_held(&self, id: &str) -> bool {
        self.held(id).is_some()
    }

    fn held(&self, id: &str) -> Option<LoadedModel> {
        let list = self.held.lock().unwrap_or_else(|e| e.into_inner());
        list.iter().find(|(i, _)| i == id).map(|(_, m)| m.clone())
    }

    /// Resolves MODEL: a model held under that id, else the one resolution (local path,
    /// preset, Hugging Face cache, vramscope's cache, the Hub).
    pub fn resolve(&self, arg: &str, opts: &Options) -> Result<Resolved, FormatError> {
        if let Some(model) = self.held(arg) {
            return Ok(Resolved { model, peft: None });
        }
        vramscope_hub::resolve(arg, opts)
    }

    /// Resolves MODEL to a model or a diffusers pipeline (`vramscope_hub::resolve_any`), a
    /// model held under that id first.
    pub fn resolve_any(&self, arg: &str, opts: &Options) -> Result<Reached, FormatError> {
        if let Some(model) = self.held(arg) {
            return Ok(Reached::Model(Resolved { model, peft: None }));
        }
        vramscope_hub::resolve_any(arg, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sessions are independent: a flag set on one is not seen by the other (the hidden
    /// input the process-wide statics were), and a model held by one is not held by the other.
    #[test]
    fn sessions_do_not_share_flags_or_held_models() {
        let a = Session::new(true, true);
        let b = Session::default();
        assert!(a.options(false).refresh && a.options(false).verbose);
        assert!(!b.options(false).refresh && !b.options(false).verbose);
        assert!(b.options(true).read.assume_llama);
        // gpt2 is a built-in preset: resolved without the network.
        let model = vramscope_hub::resolve("gpt2", &b.options(false))
            .unwrap()
            .model;
        a.hold("upload:0/x.gguf", model);
        assert!(a.is_held("upload:0/x.gguf"));
        assert!(!b.is_held("upload:0/x.gguf"));
        a.release("upload:0/x.gguf");
        assert!(!a.is_held("upload:0/x.gguf"));
    }
}
