//! The engine's own flags for a fit answer (contract: `fit.launch`): what to pass to `vllm
//! serve` or `llama-server` so the engine runs at the limits the search found, each value with
//! the reason for it.
//!
//! Each engine's own flags are in its module (`engines/<engine>/launch.rs`, behind
//! `Engine::launch`); this file asks the job's engine and names the model in the command.

pub use crate::engines::flags::ServedModel;
use crate::job::{ResolvedJob, Task};
use crate::report::FitAnswer;
pub use crate::report::Launch;

/// The launch flags for a serving job's fit answer; `None` for training, other frameworks, or
/// when nothing fits. `n_blocks`: the model's transformer blocks (llama.cpp counts the output
/// layer as one more).
pub fn launch(model: &str, job: &ResolvedJob, fit: &FitAnswer, n_blocks: u64) -> Option<Launch> {
    if job.task != Task::Infer {
        return None;
    }
    let mut l = crate::engines::engine(job.framework).launch(job, fit, n_blocks)?;
    l.serve(&ServedModel::named(model));
    Some(l)
}

impl Launch {
    /// Names `model` in the command (vLLM's `serve MODEL [--revision R]`, SGLang's
    /// `--model-path`, llama.cpp's `-m FILE` or `-hf ORG/NAME:QUANT`); ollama's command names
    /// no model (the Modelfile does).
    pub fn serve(&mut self, model: &ServedModel) {
        let Some(program) = crate::engines::named(&self.engine).and_then(|e| e.program(model))
        else {
            return;
        };
        self.command = std::iter::once(program)
            .chain(self.argv.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
    }
}
