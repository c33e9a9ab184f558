//! An engine's arithmetic and advice: what `engines::engine(framework)` answers. Each method
//! has a default for an engine without that part (PyTorch's eager step has no launch
//! flags); the engine's own module (`engines/<engine>/mod.rs`) overrides what it has.

use crate::engines::flags::ServedModel;
use crate::job::{Framework, ResolvedJob};
use crate::report::{FitAnswer, Launch};

/// One serving (or eager) engine.
pub trait Engine: Sync {
    /// The job's `framework` this engine serves.
    fn framework(&self) -> Framework;

    /// The engine's flags for a serving job's fit answer (contract `fit.launch`), the command
    /// not yet naming the model; `None` when nothing fits or the engine has no launcher.
    /// `n_blocks`: the model's transformer blocks (llama.cpp counts the output layer as one
    /// more).
    fn launch(&self, _job: &ResolvedJob, _fit: &FitAnswer, _n_blocks: u64) -> Option<Launch> {
        None
    }

    /// The program and its model argument (`vllm serve MODEL`); `None` when the engine's
    /// command names no model (ollama's Modelfile does).
    fn program(&self, _model: &ServedModel) -> Option<String> {
        None
    }
}
