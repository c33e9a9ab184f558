//! A checkpoint's own tensors against the family reader's tensors from its config.json. The
//! checkpoint's headers are exact; where the two counts differ the difference is either one
//! transformers itself makes when it loads the checkpoint (it builds no multi-token-prediction
//! layers past `num_hidden_layers`, `_keys_to_ignore_on_load_unexpected`; a tied head saved
//! anyway is the embedding's one parameter, `PreTrainedModel.tie_weights`), a quantized layout
//! (packed weights, scales), or a reader that got the architecture wrong — an error naming both
//! numbers, never a number picked between them.

use crate::error::{FormatError, Result};
use vramscope_core::inventory::{Inventory, Tensor};
use vramscope_core::model::{Head, ModelSpec};
use vramscope_core::DType;

/// The checkpoint's parameters as the model class holds them, and a note on what was left out
/// or why the counts differ; an error when the reader's architecture disagrees with the file.
pub(crate) fn reconcile(
    file: Vec<Tensor>,
    built: &Inventory,
    spec: &ModelSpec,
    shown: &str,
) -> Result<(Vec<Tensor>, Option<String>)> {
    let file_params: u64 = params(&file);
    if file_params == built.params() {
        return Ok((file, None));
    }
    if quantized(&file, spec) {
        return Ok((
            file,
            Some(quantized_note(file_params, built.params(), spec)),
        ));
    }
    let (kept, dropped): (Vec<Tensor>, Vec<Tensor>) =
        file.into_iter().partition(|t| !not_built(t, built, spec));
    let kept_params: u64 = params(&kept);
    if kept_params == built.params() && !dropped.is_empty() {
        let n: u64 = params(&dropped);
        return Ok((
            kept,
            Some(format!(
                "{} tensors of the checkpoint ({n} parameters, e.g. '{}') are not parameters of \
                 {}: layers past num_hidden_layers (multi-token prediction) or a tied head saved \
                 twice, which transformers does not build; left out of the count",
                dropped.len(),
                dropped[0].name,
                spec.architecture
            )),
        ));
    }
    Err(FormatError::Unsupported {
        path: shown.to_string(),
        reason: format!(
            "the checkpoint holds {file_params} parameters and {} built from config.json {}{}: \
             vramscope's reading of this architecture disagrees with the weights, and it will \
             not pick one",
            spec.architecture,
            built.params(),
            first_difference(kept.iter().chain(&dropped), built)
        ),
    })
}

/// Elements over tensors, as [`Inventory::params`] counts them.
fn params(tensors: &[Tensor]) -> u64 {
    tensors
        .iter()
        .fold(0u64, |n, t| n.saturating_add(t.elements()))
}

/// A quantized checkpoint stores packed weights and scales, so its element count is not the
/// model's parameter count: the config names a quantization, or a weight is stored in an integer
/// or 8-bit-or-narrower float type.
fn quantized(file: &[Tensor], spec: &ModelSpec) -> bool {
    spec.quantization.is_some()
        || file.iter().any(|t| {
            !matches!(
                t.dtype,
                DType::F64 | DType::F32 | DType::F16 | DType::BF16 | DType::Bool
            )
        })
}

fn quantized_note(file: u64, built: u64, spec: &ModelSpec) -> String {
    format!(
        "the checkpoint stores {file} elements and {} built from config.json has {built} \
         parameters: a quantized layout (packed weights, scales); the file's tensors are used",
        spec.architecture
    )
}

/// A tensor transformers does not build from this config: a layer past the model's layers
/// (multi-token prediction), or `lm_head.weight` when the head is tied.
fn not_built(t: &Tensor, built: &Inventory, spec: &ModelSpec) -> bool {
    if built.get(&t.name).is_some() {
        return false;
    }
    let past_layers = t.layer.is_some_and(|l| u64::from(l) >= spec.num_layers());
    let tied_head =
        t.name == "lm_head.weight" && matches!(spec.head, Head::LanguageModel { tied: true, .. });
    past_layers || tied_head
}

/// The first tensor whose shape differs between the two, or that only one has: ` (first
/// difference: NAME …)`, empty when names do not line up at all.
fn first_difference<'a>(file: impl Iterator<Item = &'a Tensor>, built: &Inventory) -> String {
    let mut file: Vec<&Tensor> = file.collect();
    file.sort_by(|a, b| a.name.cmp(&b.name));
    let mut matched = 0;
    for t in &file {
        match built.get(&t.name) {
            Some(b) if b.shape == t.shape => matched += 1,
            Some(b) => {
                return format!(
                    " (first difference: '{}' is {:?} in the checkpoint, {:?} from config.json)",
                    t.name, t.shape, b.shape
                )
            }
            None => {}
        }
    }
    if matched == 0 {
        return String::new();
    }
    if let Some(t) = file.iter().find(|t| built.get(&t.name).is_none()) {
        return format!(
            " (first difference: '{}' is only in the checkpoint)",
            t.name
        );
    }
    let names: std::collections::HashSet<&str> = file.iter().map(|t| t.name.as_str()).collect();
    match built
        .tensors
        .iter()
        .find(|b| !names.contains(b.name.as_str()))
    {
        Some(b) => format!(" (first difference: '{}' is only from config.json)", b.name),
        None => String::new(),
    }
}
