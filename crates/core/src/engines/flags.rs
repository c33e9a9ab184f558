//! What every engine's launch flags are built with (contract `fit.launch`): the argv with a
//! reason per flag, and how the engine is told which model to load.

use crate::report::Launch;
use std::collections::BTreeMap;

/// A launch being written: the argv, the reason for each flag, the model options.
pub(crate) struct Builder {
    pub(crate) argv: Vec<String>,
    pub(crate) why: BTreeMap<String, String>,
    pub(crate) options: BTreeMap<String, u64>,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            argv: Vec::new(),
            why: BTreeMap::new(),
            options: BTreeMap::new(),
        }
    }

    /// The launch of `engine` whose flags `write` puts down; `None` when it writes none
    /// (nothing fits).
    pub(crate) fn launch(
        engine: &str,
        write: impl FnOnce(&mut Builder) -> Option<()>,
    ) -> Option<Launch> {
        let mut b = Builder::new();
        write(&mut b)?;
        Some(b.into_launch(engine))
    }

    /// The launch of `engine` with these flags; its command is written when the model is
    /// named (`Launch::serve`).
    pub(crate) fn into_launch(self, engine: &str) -> Launch {
        Launch {
            engine: engine.into(),
            argv: self.argv,
            command: String::new(),
            why: self.why,
            options: self.options,
        }
    }

    pub(crate) fn flag(&mut self, flag: &str, value: impl ToString, why: String) {
        self.argv.push(flag.to_string());
        let v = value.to_string();
        if !v.is_empty() {
            self.argv.push(v);
        }
        self.why.insert(flag.to_string(), why);
    }

    /// An environment variable, `KEY=VALUE` in argv.
    pub(crate) fn env(&mut self, key: &str, value: impl ToString, why: String) {
        self.argv.push(format!("{key}={}", value.to_string()));
        self.why.insert(key.to_string(), why);
    }

    /// A model option (ollama's `num_gpu`, `num_ctx`).
    pub(crate) fn option(&mut self, key: &str, value: u64, why: String) {
        self.options.insert(key.to_string(), value);
        self.why.insert(key.to_string(), why);
    }
}

/// How the engine is told which model to load: what the user named (a Hub repo, a path), its
/// revision, and whether it names a GGUF file of a Hub repo (`ORG/NAME:QUANT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModel {
    pub name: String,
    pub revision: Option<String>,
    /// `ORG/NAME:QUANT`: llama.cpp downloads it with `-hf`.
    pub hub_gguf: bool,
}

impl ServedModel {
    /// A model by a name the engine takes as it is.
    pub fn named(name: &str) -> Self {
        ServedModel {
            name: name.to_string(),
            revision: None,
            hub_gguf: false,
        }
    }
}

/// ` FLAG REVISION` when the model names a revision, else nothing.
pub(crate) fn revision(model: &ServedModel, flag: &str) -> String {
    model
        .revision
        .as_ref()
        .map(|r| format!(" {flag} {r}"))
        .unwrap_or_default()
}
