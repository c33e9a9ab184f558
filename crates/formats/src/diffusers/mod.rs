//! A diffusers pipeline: `model_index.json` → its components, each read from
//! `<component>/config.json` (diffusers `DiffusionPipeline.from_pretrained` layout). Tokenizers,
//! schedulers and feature extractors hold no weights and are skipped; a model class vramscope
//! does not know is refused naming it.

mod components;

use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use std::path::Path;
use vramscope_core::diffusion::{Component, Pipeline};

/// Most components a pipeline may list (real ones have under 12).
const MAX_COMPONENTS: usize = 64;

/// Largest `model_index.json` or component config.json read (they are a few KiB).
const MAX_PIPELINE_JSON: u64 = 4 << 20;

/// Whether `dir` holds a diffusers pipeline (a `model_index.json`).
pub fn is_pipeline_dir(dir: &Path) -> bool {
    dir.join("model_index.json").is_file()
}

/// Reads the pipeline in a local directory.
pub fn read_pipeline_dir(dir: &Path) -> Result<Pipeline> {
    let index_path = dir.join("model_index.json");
    let shown = index_path.display().to_string();
    let index = crate::files::read_regular_text(&index_path, MAX_PIPELINE_JSON, "model_index.json")
        .map_err(|e| FormatError::io(&shown, e))?;
    pipeline_from_texts(&index, &shown, |name| {
        let p = dir.join(name).join("config.json");
        crate::files::read_regular_text(&p, MAX_PIPELINE_JSON, "a config.json")
            .map(|t| (t, p.display().to_string()))
            .map_err(|e| FormatError::io(p.display().to_string(), e))
    })
}

/// The component keys of `model_index.json` whose configs the pipeline needs (for a fetcher).
pub fn model_components(index: &str, shown: &str) -> Result<Vec<String>> {
    Ok(entries(&parse_index(index, shown)?, shown)?
        .into_iter()
        .map(|(name, _, _)| name)
        .collect())
}

/// Builds the pipeline from `model_index.json`'s text and a reader of each component's
/// `config.json` (returning its text and the name to show in errors).
pub fn pipeline_from_texts(
    index: &str,
    shown: &str,
    mut config_of: impl FnMut(&str) -> Result<(String, String)>,
) -> Result<Pipeline> {
    let obj = parse_index(index, shown)?;
    let class = obj
        .get("_class_name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            FormatError::malformed(shown, "no _class_name: not a diffusers model_index.json")
        })?
        .to_string();
    let mut out = Vec::new();
    for (name, library, class) in entries(&obj, shown)? {
        let (text, path) = config_of(&name)?;
        let cfg: Value = serde_json::from_str(&crate::python_json::to_strict(&text))
            .map_err(|e| FormatError::malformed(&path, format!("not JSON: {e}")))?;
        let cfg = cfg
            .as_object()
            .ok_or_else(|| FormatError::malformed(&path, "not a JSON object"))?;
        let arch = components::arch_of(&class, cfg, &path)?;
        out.push(Component {
            name,
            library,
            class,
            arch,
        });
    }
    Ok(Pipeline {
        class,
        components: out,
    })
}

fn parse_index(text: &str, shown: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(&crate::python_json::to_strict(text)) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(FormatError::malformed(shown, "not a JSON object")),
        Err(e) => Err(FormatError::malformed(shown, format!("not JSON: {e}"))),
    }
}

/// `(key, library, class)` of every entry that is a model: `[library, class]` pairs whose
/// class is not a tokenizer, scheduler, processor or feature extractor, in key order.
fn entries(obj: &Map<String, Value>, shown: &str) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for (key, v) in obj {
        if key.starts_with('_') {
            continue;
        }
        let Some([lib, class]) = v.as_array().map(Vec::as_slice) else {
            continue;
        };
        let (Some(lib), Some(class)) = (lib.as_str(), class.as_str()) else {
            continue; // `[null, null]`: an optional component left out
        };
        if holds_no_weights(class) {
            continue;
        }
        if key.contains('/') || key.contains("..") || key.is_empty() {
            return Err(FormatError::malformed(
                shown,
                format!("component key '{key}' is not a folder name"),
            ));
        }
        out.push((key.clone(), lib.to_string(), class.to_string()));
    }
    if out.len() > MAX_COMPONENTS {
        return Err(FormatError::malformed(
            shown,
            format!("{} components (at most {MAX_COMPONENTS})", out.len()),
        ));
    }
    Ok(out)
}

fn holds_no_weights(class: &str) -> bool {
    [
        "Tokenizer",
        "Scheduler",
        "Processor",
        "FeatureExtractor",
        "ImageProcessor",
    ]
    .iter()
    .any(|s| class.contains(s))
}

#[cfg(test)]
mod tests;
