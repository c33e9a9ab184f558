//! What the job's vocabulary knows of each engine: which of the `engine` settings it reads
//! (and their defaults), and how it spells its flags. One `EngineSpec` per engine, in
//! `engines/<engine>/settings.rs`, listed once in `engines/settings.rs`. This half imports
//! nothing of the estimator, so the job may read it; the engine's arithmetic is the other
//! half, `engines::Engine`.

use crate::error::CoreError;
use crate::job::engine_settings::EngineSettings;
use crate::job::{Framework, KvDtype, WeightFormat};
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

    /// Whether the engine sizes its own memory (a KV pool, a layer split) rather than leaving
    /// it to PyTorch's caching allocator, whose reserve vramscope estimates.
    fn sizes_own_memory(&self) -> bool {
        false
    }

    /// Whether the engine's inference cache is transformers' (`cache_utils.py`), whose
    /// recurrent layers keep the SSM state in fp32 ([`crate::model::Ssm::state_bytes`]); an
    /// engine with its own cache (vLLM's and SGLang's `mamba_ssm_cache_dtype` "auto", the
    /// model's dtype) says no.
    fn transformers_cache(&self) -> bool {
        true
    }

    /// Whether the engine decodes with captured CUDA graphs (vLLM's and SGLang's
    /// `cuda_graph` capture), so a decode step is one graph replay, not eager launches.
    fn cuda_graphs(&self) -> bool {
        false
    }

    /// The engine's own spelling of a KV cache of `bits` (8 or 4), as advice offers it;
    /// transformers' `int8` (quanto) at 8 bits and none at 4 by default.
    fn kv_quant(&self, bits: u64) -> Option<(KvDtype, &'static str)> {
        (bits == 8).then_some((KvDtype::Byte, "int8"))
    }

    /// The engine's own quantized weights of `bits` (8 or 4), as advice offers them;
    /// bitsandbytes' `int8` and `nf4` (transformers) by default.
    fn weights_quant(&self, bits: u64) -> (WeightFormat, &'static str) {
        if bits == 8 {
            (WeightFormat::Int8, "int8")
        } else {
            (WeightFormat::Nf4, "nf4")
        }
    }
}
