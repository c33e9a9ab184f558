//! `models` and `gpus`: the compiled-in catalogs.

use super::AppError;
use serde::{Deserialize, Serialize};
use vramscope_core::gpu::Gpu;
use vramscope_formats::presets as catalog;

/// One built-in preset, as `models --json` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PresetRow {
    pub id: String,
    pub repo: String,
    pub model_type: String,
    pub architecture: String,
    pub params_total: u64,
    pub layers: u64,
    pub hidden: u64,
    pub dtype: String,
    pub aliases: Vec<String>,
    pub source: String,
}

/// What `models --json` prints and `/api/models` answers: every preset, read from its real
/// config.json and counted.
pub fn models() -> Result<Vec<PresetRow>, AppError> {
    catalog::all().iter().map(row).collect()
}

fn row(p: &catalog::RawPreset) -> Result<PresetRow, AppError> {
    let parsed = catalog::load(p)?;
    let inv = vramscope_core::build_inventory(&parsed.spec)?;
    Ok(PresetRow {
        id: p.id.to_string(),
        repo: p.repo.to_string(),
        model_type: parsed.spec.model_type.clone(),
        architecture: parsed.spec.architecture.clone(),
        params_total: inv.params(),
        layers: parsed.spec.num_layers(),
        hidden: parsed.spec.hidden_size,
        dtype: parsed.spec.dtype.to_string(),
        aliases: p.aliases.iter().map(|a| a.to_string()).collect(),
        source: p.source.to_string(),
    })
}

/// What `gpus --json` prints and `/api/gpus` answers: the GPU catalog with the capacity each
/// device reports and its source.
pub fn gpus() -> Vec<Gpu> {
    vramscope_core::gpu::catalog().to_vec()
}
