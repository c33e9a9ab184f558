//! `inspect`: a model's exact parameter inventory — totals, per component, per dtype, per
//! layer, every tensor.

use super::{AppError, Session};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vramscope_core::inventory::Tally;
use vramscope_core::{Inventory, ModelSummary, Tensor};
use vramscope_formats::model_source::LoadedModel;

/// `inspect`'s input: MODEL as the CLI takes it (preset, Hub repo, config, directory,
/// .safetensors, .gguf).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectInput {
    pub model: String,
    /// Read an unknown family as a Llama-style decoder (`--assume-llama`).
    #[serde(default)]
    pub assume_llama: bool,
}

/// What `inspect MODEL --json` prints: the contract's `model` and `tensors`, plus tallies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InspectReport {
    pub model: ModelSummary,
    pub origin: String,
    pub tensors: Vec<Tensor>,
    pub by_component: BTreeMap<String, Tally>,
    pub by_dtype: BTreeMap<String, Tally>,
    pub per_layer: Vec<LayerRow>,
    pub warnings: Vec<String>,
}

/// One layer's parameters and bytes, and its parameters by component.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerRow {
    pub layer: u32,
    pub params: u64,
    pub bytes: u64,
    pub by_component: BTreeMap<String, u64>,
}

/// `inspect` of MODEL.
pub fn inspect(session: &Session, input: &InspectInput) -> Result<InspectReport, AppError> {
    Ok(report(&load(session, &input.model, input.assume_llama)?))
}

/// MODEL loaded as every command loads it, through the shell's session (`Session::resolve`).
pub fn load(session: &Session, model: &str, assume_llama: bool) -> Result<LoadedModel, AppError> {
    Ok(session
        .resolve(model, &session.options(assume_llama))?
        .model)
}

/// The inventory report of a loaded model.
pub fn report(loaded: &LoadedModel) -> InspectReport {
    let empty = Inventory::default();
    let inv = loaded.inventory.as_ref().unwrap_or(&empty);
    InspectReport {
        model: summarize(loaded),
        origin: loaded.origin.name().to_string(),
        tensors: inv.tensors.clone(),
        by_component: inv
            .by_component()
            .into_iter()
            .map(|(c, t)| (c.name().to_string(), t))
            .collect(),
        by_dtype: inv
            .by_dtype()
            .into_iter()
            .map(|(d, t)| (d.to_string(), t))
            .collect(),
        per_layer: layer_rows(inv),
        warnings: loaded.warnings.clone(),
    }
}

/// The contract's model object for whatever was loaded.
pub fn summarize(m: &LoadedModel) -> ModelSummary {
    let mut s = match (&m.spec, &m.inventory) {
        (Some(spec), inv) => {
            let mut s = ModelSummary::from_spec(spec, m.params_total, inv.as_ref());
            s.name = m.name.clone();
            s
        }
        (None, Some(inv)) => ModelSummary::from_inventory(&m.name, inv),
        (None, None) => ModelSummary::from_params(&m.name, m.params_total),
    };
    s.read_from = m.source.read_from();
    s
}

fn layer_rows(inv: &Inventory) -> Vec<LayerRow> {
    let mut rows: BTreeMap<u32, LayerRow> = BTreeMap::new();
    for t in &inv.tensors {
        let Some(l) = t.layer else { continue };
        let row = rows.entry(l).or_insert_with(|| LayerRow {
            layer: l,
            params: 0,
            bytes: 0,
            by_component: BTreeMap::new(),
        });
        row.params += t.elements();
        row.bytes += t.bytes;
        *row.by_component
            .entry(t.component.name().to_string())
            .or_default() += t.elements();
    }
    rows.into_values().collect()
}
