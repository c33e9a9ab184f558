//! SGLang (`framework: sglang`): its settings, its launch flags.

mod device;
mod launch;
pub mod settings;

use crate::engines::engine::{Engine, Served};
use crate::engines::flags::{revision, Builder, ServedModel};
use crate::error::CoreError;
use crate::estimate::serving::Device;
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// SGLang.
pub struct Sglang;

impl Engine for Sglang {
    fn framework(&self) -> Framework {
        Framework::Sglang
    }

    fn device(&self, s: &Served, warnings: &mut Vec<String>) -> Result<Option<Device>, CoreError> {
        device::sglang_device(s.spec, s.job, s.gpu, s.states, warnings).map(Some)
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
