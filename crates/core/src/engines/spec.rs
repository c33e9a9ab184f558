//! What the job's vocabulary knows of each engine: which of the `engine` settings it reads
//! (and their defaults), and how it spells its flags. One `EngineSpec` per engine, in
//! `engines/<engine>/settings.rs`, listed once in `engines/settings.rs`. This half imports
//! nothing of the estimator, so the job may read it; the engine's arithmetic is the other
//! half, `engines::Engine`.

use crate::error::CoreError;
use crate::job::engine_settings::EngineSettings;
use crate::job::Framework;
use serde_json::{Map, Value};

/// An engine's settings and spellings.
pub trait EngineSpec: Sync {
    /// The job's `framework` this engine serves.
    fn framework(&self) -> Framework;

    /// Reads this engine's own settings from the object as written into `s`, checking each;
    /// the error names the setting. The others stay `None`.
    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError>;

    /// The setting or flag that sets the layers on the GPU (llama.cpp's `-ngl`); `None` for an
    /// engine that holds every layer on the GPU.
    fn layers_flag(&self) -> Option<&'static str> {
        None
    }

    /// The flag that sets the tensor-parallel degree; `None` for an engine without one.
    fn tp_flag(&self) -> Option<&'static str> {
        None
    }

    /// Tokens per KV page: the pool hands out whole pages (vLLM's `block_size`); 1 for an
    /// engine whose cache grows token by token.
    fn kv_page(&self, _s: &EngineSettings) -> u64 {
        1
    }
}
