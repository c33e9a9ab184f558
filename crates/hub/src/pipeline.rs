//! A diffusers pipeline repo: `model_index.json` at the top names its models, and each is read
//! from `<component>/config.json` (diffusers `DiffusionPipeline.from_pretrained` layout, the
//! configs its `download` fetches before any weights). A repo is a pipeline by its
//! `model_index.json`, never by its weights; tokenizers, schedulers and feature extractors hold
//! no weights and are not fetched.

use crate::fetch::Fetch;
use vramscope_core::diffusion::Pipeline;
use vramscope_formats::diffusers::pipeline_from_texts;
use vramscope_formats::model_source::MAX_CONFIG_BYTES;
use vramscope_formats::FormatError;

/// The file that makes a repo a pipeline.
pub const INDEX: &str = "model_index.json";

/// Whether the repo's listing has a `model_index.json` at its top.
pub fn is_pipeline(siblings: &[String]) -> bool {
    siblings.iter().any(|s| s == INDEX)
}

/// The pipeline: `model_index.json`, then each model component's `config.json`. `label`
/// (`ORG/NAME@commit`) names the repo in errors; a component the index lists whose config the
/// repo lacks is named.
pub fn pipeline(f: &mut dyn Fetch, label: &str) -> Result<Pipeline, FormatError> {
    let shown = format!("{label}/{INDEX}");
    let index = f.text(INDEX, MAX_CONFIG_BYTES)?;
    let listed: Vec<String> = f.siblings().to_vec();
    pipeline_from_texts(&index, &shown, |name| {
        let file = format!("{name}/config.json");
        if !listed.contains(&file) {
            // The Hub's listing lacks it: the repo's own gap, named; a cache directory's: a
            // partial download, so the next place is asked.
            return Err(if f.whole_listing() {
                FormatError::Remote(format!(
                    "{label}: {INDEX} lists the model '{name}' but the repo has no {file}"
                ))
            } else {
                crate::fetch::miss()
            });
        }
        let text = f.text(&file, MAX_CONFIG_BYTES)?;
        Ok((text, format!("{label}/{file}")))
    })
}
