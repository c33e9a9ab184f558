//! What the job's vocabulary knows of each engine: which of the `engine` settings it reads
//! (and their defaults), and how it spells its flags. One `EngineSpec` per engine, in
//! `engines/<engine>/settings.rs`, listed once in `engines/settings.rs`. This half imports
//! nothing of the estimator, so the job may read it; the engine's arithmetic is the other
//! half, `engines::Engine`.

use crate::error::CoreError;
use crate::job::engine_settings::EngineSettings;
use crate::job::{Framework, KvDtype, WeightFormat};
use serde_json::{Map, Value};

/// What an engine is, stated once per engine (its `EngineSpec::traits`): the job's framework
/// it serves, how it spells its layer and tensor-parallel flags, and which memory, cache and
/// decode it runs. [`Traits::eager`] is PyTorch's; [`Traits::served`] a serving engine's.
#[derive(Clone, Copy, Debug)]
pub struct Traits {
    /// The job's `framework` this engine serves.
    pub framework: Framework,
    /// The setting or flag that sets the layers on the GPU (llama.cpp's `-ngl`); `None` for an
    /// engine that holds every layer on the GPU.
    pub layers_flag: Option<&'static str>,
    /// The flag that sets the tensor-parallel degree; `None` for an engine without one.
    pub tp_flag: Option<&'static str>,
    /// Whether the engine sizes its own memory (a KV pool, a layer split) rather than leaving
    /// it to PyTorch's caching allocator, whose reserve vramscope estimates.
    pub sizes_own_memory: bool,
    /// Whether the engine's inference cache is transformers' (`cache_utils.py`), whose
    /// recurrent layers keep the SSM state in fp32 ([`crate::model::Ssm::state_bytes`]); an
    /// engine with its own cache (vLLM's and SGLang's `mamba_ssm_cache_dtype` "auto", the
    /// model's dtype) says no.
    pub transformers_cache: bool,
    /// Whether the engine decodes with captured CUDA graphs (vLLM's and SGLang's
    /// `cuda_graph` capture), so a decode step is one graph replay, not eager launches.
    pub cuda_graphs: bool,
}

impl Traits {
    /// PyTorch eager's (transformers' `generate`): every layer on the GPU, no flags, the
    /// caching allocator's memory, transformers' cache, eager launches.
    pub const fn eager(framework: Framework) -> Self {
        Traits {
            framework,
            layers_flag: None,
            tp_flag: None,
            sizes_own_memory: false,
            transformers_cache: true,
            cuda_graphs: false,
        }
    }

    /// A serving engine's: it sizes its own memory and keeps its own cache.
    pub const fn served(framework: Framework) -> Self {
        Traits {
            sizes_own_memory: true,
            transformers_cache: false,
            ..Self::eager(framework)
        }
    }

    /// With `flag` setting the layers on the GPU.
    pub const fn layers(self, flag: &'static str) -> Self {
        Traits {
            layers_flag: Some(flag),
            ..self
        }
    }

    /// With `flag` setting the tensor-parallel degree.
    pub const fn tp(self, flag: &'static str) -> Self {
        Traits {
            tp_flag: Some(flag),
            ..self
        }
    }

    /// Decoding with captured CUDA graphs.
    pub const fn graphs(self) -> Self {
        Traits {
            cuda_graphs: true,
            ..self
        }
    }
}

/// An engine's settings and spellings.
pub trait EngineSpec: Sync {
    /// What the engine is ([`Traits`]).
    fn traits(&self) -> Traits;

    /// Reads this engine's own settings from the object as written into `s`, checking each;
    /// the error names the setting. The others stay `None`.
    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError>;

    /// The job's `framework` this engine serves ([`Traits::framework`]).
    fn framework(&self) -> Framework {
        self.traits().framework
    }

    /// [`Traits::layers_flag`].
    fn layers_flag(&self) -> Option<&'static str> {
        self.traits().layers_flag
    }

    /// [`Traits::tp_flag`].
    fn tp_flag(&self) -> Option<&'static str> {
        self.traits().tp_flag
    }

    /// Tokens per KV page: the pool hands out whole pages (vLLM's `block_size`); 1 for an
    /// engine whose cache grows token by token.
    fn kv_page(&self, _s: &EngineSettings) -> u64 {
        1
    }

    /// [`Traits::sizes_own_memory`].
    fn sizes_own_memory(&self) -> bool {
        self.traits().sizes_own_memory
    }

    /// [`Traits::transformers_cache`].
    fn transformers_cache(&self) -> bool {
        self.traits().transformers_cache
    }

    /// [`Traits::cuda_graphs`].
    fn cuda_graphs(&self) -> bool {
        self.traits().cuda_graphs
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
