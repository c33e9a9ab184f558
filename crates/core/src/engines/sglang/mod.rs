//! SGLang (`framework: sglang`): its settings, its launch flags.

mod launch;
pub mod settings;

use crate::engines::engine::Engine;
use crate::engines::flags::{revision, Builder, ServedModel};
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// SGLang.
pub struct Sglang;

impl Engine for Sglang {
    fn framework(&self) -> Framework {
        Framework::Sglang
    }

    fn launch(&self, job: &ResolvedJob, fit: &FitAnswer, _n_blocks: u64) -> Option<Launch> {
        let mut b = Builder::new();
        launch::flags(&mut b, job, fit)?;
        Some(b.into_launch("sglang"))
    }

    /// `python -m sglang.launch_server --model-path MODEL [--revision R]`.
    fn program(&self, model: &ServedModel) -> Option<String> {
        Some(format!(
            "python -m sglang.launch_server --model-path {}{}",
            model.name,
            revision(model, "--revision")
        ))
    }
}
