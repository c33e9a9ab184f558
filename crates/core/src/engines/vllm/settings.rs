//! vLLM's settings (contract `engine`: `gpu_memory_utilization`, `block_size`,
//! `max_num_batched_tokens`, `max_num_seqs`, `max_model_len`) and their defaults.

use crate::engines::spec::{EngineSpec, Traits};
use crate::error::CoreError;
use crate::job::engine_settings::{fraction, whole, EngineSettings};
use crate::job::weight_format::DEFAULT_GROUP;
use crate::job::{Framework, KvDtype, WeightFormat};
use serde_json::{Map, Value};

/// vLLM V1 engine defaults for the OpenAI API server (`vllm/engine/arg_utils.py`,
/// `EngineArgs`: `gpu_memory_utilization=0.9`, `block_size=16`; with chunked prefill the
/// API server's `max_num_batched_tokens=8192` and `max_num_seqs=256`).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;
pub const VLLM_BLOCK_SIZE: u64 = 16;
pub const VLLM_MAX_NUM_BATCHED_TOKENS: u64 = 8192;
pub const VLLM_MAX_NUM_SEQS: u64 = 256;

/// The engine: its settings here, its device (`device.rs`), its fit, launch and advice (`mod.rs`).
pub struct Vllm;

impl EngineSpec for Vllm {
    /// vLLM's `--tensor-parallel-size` (`vllm/engine/arg_utils.py`); CUDA graphs on decode.
    fn traits(&self) -> Traits {
        Traits::served(Framework::Vllm)
            .tp("--tensor-parallel-size")
            .graphs()
    }

    fn read_settings(
        &self,
        w: &Map<String, Value>,
        s: &mut EngineSettings,
    ) -> Result<(), CoreError> {
        s.gpu_memory_utilization =
            fraction("gpu_memory_utilization", w.get("gpu_memory_utilization"))?;
        s.block_size = whole(w, "block_size")?;
        s.max_num_batched_tokens = whole(w, "max_num_batched_tokens")?;
        s.max_num_seqs = whole(w, "max_num_seqs")?;
        s.max_model_len = whole(w, "max_model_len")?;
        Ok(())
    }

    /// vLLM's pool hands out blocks of `block_size` tokens (`vllm/v1/core/kv_cache_utils.py`).
    fn kv_page(&self, s: &EngineSettings) -> u64 {
        s.block_size_or_default()
    }

    /// vLLM's `--kv-cache-dtype fp8`; no 4-bit KV cache.
    fn kv_quant(&self, bits: u64) -> Option<(KvDtype, &'static str)> {
        (bits == 8).then_some((KvDtype::Byte, "fp8"))
    }

    /// vLLM's `--quantization fp8` at 8 bits, an AWQ checkpoint at 4.
    fn weights_quant(&self, bits: u64) -> (WeightFormat, &'static str) {
        if bits == 8 {
            (WeightFormat::Fp8 { block: None }, "fp8")
        } else {
            (
                WeightFormat::Awq {
                    bits: 4,
                    group: Some(DEFAULT_GROUP),
                },
                "awq:4",
            )
        }
    }
}

impl EngineSettings {
    /// `gpu_memory_utilization`, or vLLM's default 0.9.
    pub fn utilization_or_default(&self) -> f64 {
        self.gpu_memory_utilization
            .unwrap_or(VLLM_GPU_MEMORY_UTILIZATION)
    }

    /// `block_size`, or vLLM's default 16.
    pub fn block_size_or_default(&self) -> u64 {
        self.block_size.unwrap_or(VLLM_BLOCK_SIZE)
    }

    /// `max_num_batched_tokens`, or the API server's default 8192.
    pub fn max_num_batched_tokens_or_default(&self) -> u64 {
        self.max_num_batched_tokens
            .unwrap_or(VLLM_MAX_NUM_BATCHED_TOKENS)
    }

    /// `max_num_seqs`, or the API server's default 256.
    pub fn max_num_seqs_or_default(&self) -> u64 {
        self.max_num_seqs.unwrap_or(VLLM_MAX_NUM_SEQS)
    }
}
