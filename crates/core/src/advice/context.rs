//! What an advice technique is applied with (`techniques.rs`' table; the engines' own rows
//! in `engines/<engine>/advice.rs`): the model's facts beside the job, and a checked change
//! of an engine setting.

use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// What the search knows about the job beside its fields.
pub struct Ctx<'a> {
    pub spec: Option<&'a ModelSpec>,
    /// The model has `q_proj` weights (LoRA's default targets).
    pub lora_targets: bool,
    /// The model ends in a language-model head (the loss's b·s·V terms).
    pub lm_head: bool,
    /// The GPU computes in bf16 (Ampere and later).
    pub bf16: bool,
    /// The checkpoint already fixes the weights' format (a GGUF file, a quantized config).
    pub weights_fixed: bool,
    /// vLLM: the longest request the job's KV pool holds, at most its current `max_model_len`
    /// (`engines::vllm_longest_request`); `None` for other engines or an empty pool.
    pub vllm_longest_request: Option<u64>,
}

/// Sets an engine setting; false (the technique does not apply) if the engine refuses it.
pub(crate) fn set_engine(j: &mut ResolvedJob, key: &str, v: serde_json::Value) -> bool {
    j.set_engine(key, v).is_ok()
}

/// Whether `j` is an inference job served by `framework`.
pub(crate) fn serves(j: &ResolvedJob, framework: crate::job::Framework) -> bool {
    j.task == crate::job::Task::Infer && j.framework == framework
}

/// A context setting as the engine holds it: the job's `setting`, else the model's
/// `max_position_embeddings` (the engines' default context), else unbounded.
pub(crate) fn context_or_model(setting: Option<u64>, c: &Ctx) -> u64 {
    setting
        .or_else(|| c.spec.and_then(|s| s.max_position_embeddings))
        .unwrap_or(u64::MAX)
}

/// Sets `framework`'s context setting `key` to `need` when `j` is served by it and the
/// setting now (`current`) is longer: the rule of vLLM's `max_model_len`, SGLang's
/// `context_length` and ollama's `num_ctx` rows.
pub(crate) fn shorten_context(
    j: &mut ResolvedJob,
    framework: crate::job::Framework,
    key: &str,
    current: u64,
    need: u64,
) -> bool {
    serves(j, framework) && current > need && set_engine(j, key, need.into())
}

/// Whether `j` is an inference job of an engine that splits the layers between the GPU and
/// the host (llama.cpp, and ollama with llama-server underneath): the same layer split and KV
/// types.
pub(crate) fn splits_layers(j: &ResolvedJob) -> bool {
    j.task == crate::job::Task::Infer
        && crate::engines::settings::spec(j.framework).is_some_and(|e| e.layers_flag().is_some())
}
