//! The `fit` command's answer as plain data: the largest batch, sequence or context, the
//! engine's launch flags and llama.cpp's speed per `-ngl`. The searches are `fit`'s,
//! `fit_engines`'s and `fit_vision`'s; the flags `launch`'s; the speeds `fit_speed`'s.

use super::{TargetGpu, Throughput};
use serde::Serialize;
use std::collections::BTreeMap;

/// The contract's fit answer (train: `max_batch`, `max_seq`; infer: `max_batch`,
/// `max_context`), with what the search found along the way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitAnswer {
    /// The GPU (`gpu`, `capacity`).
    #[serde(flatten)]
    pub target: TargetGpu,
    /// Bytes the job's `reserve` keeps free for other applications: the searches fit
    /// `capacity − reserve` (absent when 0).
    #[serde(skip_serializing_if = "super::is_zero")]
    pub reserve: u64,
    /// Largest micro-batch (train) or number of concurrent sequences (infer) at the job's
    /// sequence/context; `null` when even 1 does not fit.
    pub max_batch: Option<u64>,
    /// train: largest sequence at the job's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<u64>,
    /// infer: largest context (prompt + generated tokens) per sequence at the job's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
    /// Whether the sequence search stopped at the model's maximum positions.
    pub seq_limited_by_model: bool,
    /// The model's maximum positions, when known.
    pub model_max_positions: Option<u64>,
    /// llama.cpp: the most layers `-ngl` can put on the GPU (the block count + 1 means the
    /// output layer too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gpu_layers: Option<u64>,
    /// Estimates evaluated.
    pub evaluations: u64,
    pub notes: Vec<String>,
    /// Vision-language models: the most images of the job's size per sequence that fit at
    /// the job's batch and text length (`null` when not even one does; absent without images).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_images: Option<Option<u64>>,
    /// vLLM: the longest single request the KV pool holds, at most the model's (or the job's)
    /// `max_model_len`: the largest `--max-model-len` vLLM starts with
    /// (`estimate::engines::vllm_longest_request`); `null` when not one token fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub longest_request: Option<u64>,
    /// A serving engine's own flags for this answer (`launch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// The modelled time at the answer: the Report's `throughput` (contract) of the job at
    /// `max_batch` (train: its step time and tokens/s per GPU at the job's sequence; infer:
    /// prefill and decode rates at its context); `null` without a `max_batch` or where the
    /// GPU's speeds are unknown.
    pub throughput_at_max_batch: Option<Throughput>,
    /// llama.cpp and ollama inference: decode and prefill speed per `-ngl` choice, from the
    /// most layers that fit down to none (`fit_speed`); absent for other jobs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_layers_speed: Vec<LayersSpeed>,
}

impl FitAnswer {
    /// The answer on `gpu` before any search has run: no limit found, nothing evaluated, no
    /// notes, no launch flags, speeds or throughput; the searches fill in what they find.
    pub fn on(gpu: &crate::gpu::Gpu, reserve: u64) -> FitAnswer {
        FitAnswer {
            target: TargetGpu::from(gpu),
            reserve,
            max_batch: None,
            max_seq: None,
            max_context: None,
            seq_limited_by_model: false,
            model_max_positions: None,
            max_gpu_layers: None,
            evaluations: 0,
            notes: Vec::new(),
            launch: None,
            throughput_at_max_batch: None,
            max_images: None,
            longest_request: None,
            gpu_layers_speed: Vec::new(),
        }
    }
}

/// `fit.launch`: the argument vector, one line to paste, and why each flag has its value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    pub engine: String,
    pub argv: Vec<String>,
    pub command: String,
    pub why: BTreeMap<String, String>,
    /// ollama: the model options (`num_gpu`, `num_ctx`) a Modelfile or an API request sets.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, u64>,
}

/// One `-ngl` choice and what it gives (contract: `fit.gpu_layers_speed` rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayersSpeed {
    pub n_gpu_layers: u64,
    /// Tokens per second over the job's sequences while decoding.
    pub decode_tokens_per_s: f64,
    pub prefill_tokens_per_s: f64,
    /// One `generate` of the job (prefill and new tokens), seconds.
    pub generate_s: f64,
    /// Host RAM the choice needs (weights and KV left on the host).
    pub host_bytes: u64,
    /// Whether the choice fits the GPU.
    pub fits: bool,
}
