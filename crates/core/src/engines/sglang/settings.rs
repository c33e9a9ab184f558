//! SGLang's settings (contract `engine`: `mem_fraction_static`, `context_length`,
//! `max_running_requests`, `chunked_prefill_size`, `cuda_graph_max_bs`;
//! `python/sglang/srt/server_args.py`).

use crate::engines::spec::{EngineSpec, Traits};
use crate::error::CoreError;
use crate::job::engine_settings::{fraction, whole, EngineSettings};
use crate::job::{Framework, KvDtype};
use serde_json::{Map, Value};

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct Sglang;

impl EngineSpec for Sglang {
    /// SGLang's `--tp` (`server_args.py`); CUDA graphs on decode.
    fn traits(&self) -> Traits {
        Traits::served(Framework::Sglang).tp("--tp").graphs()
    }

    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        s.mem_fraction_static = fraction("mem_fraction_static", w.get("mem_fraction_static"))?;
        // `max_model_len` (the CLI's --max-model-len) reads as SGLang's context_length.
        s.context_length = match whole(w, "context_length")? {
            Some(n) => Some(n),
            None => whole(w, "max_model_len")?,
        };
        s.max_running_requests = whole(w, "max_running_requests")?;
        s.chunked_prefill_size = whole(w, "chunked_prefill_size")?;
        s.cuda_graph_max_bs = whole(w, "cuda_graph_max_bs")?;
        Ok(())
    }

    /// SGLang's `--kv-cache-dtype fp8_e5m2` (`server_args.py` choices); no 4-bit KV cache.
    fn kv_quant(&self, bits: u64) -> Option<(KvDtype, &'static str)> {
        (bits == 8).then_some((KvDtype::Byte, "fp8_e5m2"))
    }
}
