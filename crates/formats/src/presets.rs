//! The preset catalog: popular models compiled in from their real config.json files
//! (`crates/formats/data/presets/`, sources in its `index.json`), so `vramscope estimate llama-3.1-8b`
//! works offline.

use crate::error::{FormatError, Result};
use crate::hf_config::{parse_config_str, ParsedConfig};

/// One compiled-in preset.
#[derive(Debug)]
pub struct RawPreset {
    /// Lowercase model name without the organisation (`llama-3.1-8b`).
    pub id: &'static str,
    /// Hugging Face repository (`meta-llama/Llama-3.1-8B`).
    pub repo: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    /// Where the config text was taken from.
    pub source: &'static str,
    /// A published exact parameter count, when one exists.
    pub published_params: Option<u64>,
    /// The config.json text.
    pub config: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/presets_gen.rs"));

/// Every preset, in catalog order.
pub fn all() -> &'static [RawPreset] {
    PRESET_TABLE
}

/// Finds a preset by id, repository name or alias, case-insensitively.
pub fn find(name: &str) -> Option<&'static RawPreset> {
    let key = name.trim();
    PRESET_TABLE.iter().find(|p| {
        p.id.eq_ignore_ascii_case(key)
            || p.repo.eq_ignore_ascii_case(key)
            || p.aliases.iter().any(|a| a.eq_ignore_ascii_case(key))
    })
}

/// Parses a preset's config into a model. The model is named by the preset id.
pub fn load(preset: &RawPreset) -> Result<ParsedConfig> {
    let mut parsed = parse_config_str(preset.config, &format!("preset '{}'", preset.id))?;
    parsed.spec.name = preset.id.to_string();
    Ok(parsed)
}

/// Error for a name that is no preset, with the closest ids as a hint.
pub fn unknown(name: &str) -> FormatError {
    let lower = name.to_ascii_lowercase();
    // Ids within 4 edits only: a name longer than every id by more is measured against none
    // (its distance exceeds 4 by length alone), so a hostile name costs no length × table.
    let longest = PRESET_TABLE.iter().map(|p| p.id.len()).max().unwrap_or(0);
    let far = vramscope_core::text::longer_by_more_than(&lower, longest, 4);
    let mut scored: Vec<(usize, &str)> = PRESET_TABLE
        .iter()
        .filter(|_| !far)
        .map(|p| (vramscope_core::text::edit_distance(&lower, p.id), p.id))
        .collect();
    scored.sort();
    let close: Vec<&str> = scored
        .iter()
        .filter(|(d, _)| *d <= 4)
        .take(3)
        .map(|(_, id)| *id)
        .collect();
    let hint = if close.is_empty() {
        "run 'vramscope models' for the list, or pass a config.json, model directory, \
         .safetensors or .gguf path"
            .to_string()
    } else {
        format!(
            "did you mean {}? ('vramscope models' lists all)",
            close.join(", ")
        )
    };
    FormatError::Unsupported {
        path: name.to_string(),
        reason: format!("no such preset or file; {hint}"),
    }
}

#[cfg(test)]
mod tests {
    /// A hostile 1,000,000-character MODEL name is refused without being measured against
    /// every preset id (its length × the ids' lengths: 1,000,000 × about 45 × 15 cells, the
    /// same work as the GPU catalog's hint that took 9.8 s in a debug build); a near miss
    /// still gets its hint ('gpt' is one insertion from 'gpt2').
    #[test]
    fn a_huge_unknown_name_is_refused_at_once() {
        let t = std::time::Instant::now();
        let e = super::unknown(&"x".repeat(1_000_000)).to_string();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        assert!(!e.contains("did you mean"));
        let near = super::unknown("gpt").to_string();
        assert!(near.contains("gpt2"), "{near}");
    }
}
