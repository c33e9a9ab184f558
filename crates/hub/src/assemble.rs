//! A repo's files → a model, whichever place they are read from: config.json; the safetensors
//! index and each shard's header (first bytes only, same caps as local files); a GGUF header by
//! growing range reads; a PEFT adapter pointing at its base model; or a diffusers pipeline
//! (`model_index.json` and its components' configs, `pipeline.rs`).

use crate::fetch::Fetch;
use serde_json::{json, Value};
use std::path::PathBuf;
use vramscope_formats::hf_config::{parse_config_str_with, ReadOptions};
use vramscope_formats::model_source::{
    apply_preprocessor_text, model_of_checkpoint, model_of_config, model_of_gguf, LoadedModel,
    MAX_CONFIG_BYTES, PREPROCESSOR_NAME,
};
use vramscope_formats::safetensors::{
    checkpoint_of_files, checkpoint_of_shards, parse_index, read_header, Checkpoint, INDEX_NAME,
    MAX_HEADER_SIZE, MAX_INDEX_SIZE, SINGLE_NAME,
};
use vramscope_formats::{gguf, FormatError};

/// First read of a safetensors file: the 8-byte length and, in the same request, the header of
/// a typical shard (tens of KB), so most shards take one request.
const FIRST_READ: u64 = 64 << 10;

/// First read of a GGUF file; grown ×4 while the header runs past it.
const GGUF_FIRST_READ: u64 = 1 << 20;

/// Most bytes of a GGUF header fetched (the vocabulary lives in it: a few MB for 256k tokens).
pub const MAX_GGUF_HEADER: u64 = 64 << 20;

/// What a repo turned out to be.
pub enum Assembled {
    Model(Box<LoadedModel>),
    /// A PEFT adapter: the base model's name and the job's `peft`.
    Adapter {
        base: String,
        peft: Value,
    },
    /// A diffusers pipeline: its `model_index.json` and each model component's config.
    Pipeline(Box<vramscope_core::diffusion::Pipeline>),
}

/// The repo's files as a model. `label` (`ORG/NAME@commit`) names it in errors.
pub fn assemble(
    f: &mut dyn Fetch,
    label: &str,
    quant: Option<&str>,
    opts: ReadOptions,
) -> Result<Assembled, FormatError> {
    let sib = f.siblings().to_vec();
    let has = |n: &str| sib.iter().any(|s| s == n);
    let ggufs: Vec<&String> = sib
        .iter()
        .filter(|s| s.to_ascii_lowercase().ends_with(".gguf") && !s.contains("mmproj"))
        .collect();
    // A diffusers pipeline by its model_index.json (whatever single-file checkpoints sit beside
    // it, as FLUX.1-dev's flux1-dev.safetensors and SDXL's sd_xl_base_1.0.safetensors do).
    if quant.is_none() && crate::pipeline::is_pipeline(&sib) {
        return crate::pipeline::pipeline(f, label).map(|p| Assembled::Pipeline(Box::new(p)));
    }
    if quant.is_some() || (!has("config.json") && !has("adapter_config.json") && !ggufs.is_empty())
    {
        let file = pick_gguf(&ggufs, quant, label)?;
        return gguf_model(f, &file, label).map(|m| Assembled::Model(Box::new(m)));
    }
    if !has("config.json") && has("adapter_config.json") {
        return adapter(f, label);
    }

    let parsed = if has("config.json") {
        let text = f.text("config.json", MAX_CONFIG_BYTES)?;
        let mut p = parse_config_str_with(&text, &format!("{label}/config.json"), opts)?;
        // A vision-language repo's image-size rules (`preprocessor_config.json`, optional).
        if p.spec.vision.is_some() && has(PREPROCESSOR_NAME) {
            let text = f.text(PREPROCESSOR_NAME, MAX_CONFIG_BYTES)?;
            apply_preprocessor_text(&mut p, &text, &format!("{label}/{PREPROCESSOR_NAME}"))?;
        }
        Some(p)
    } else {
        None
    };
    let ckpt = checkpoint(f, &sib, label)?;
    let model = match (parsed, ckpt) {
        (Some(p), None) => model_of_config(p, label)?,
        (p, Some(c)) => model_of_checkpoint(c, p, label)?,
        (None, None) => {
            return Err(FormatError::Remote(format!(
                "{label} has neither config.json nor safetensors or GGUF weights (a dataset, a \
                 space, or weights in another format?); pass a local config.json"
            )))
        }
    };
    Ok(Assembled::Model(Box::new(model)))
}

/// The safetensors headers the repo has: its index's shards, else `model.safetensors`, else
/// every top-level `*.safetensors` (adapters apart); `None` when it has none.
fn checkpoint(
    f: &mut dyn Fetch,
    sib: &[String],
    label: &str,
) -> Result<Option<Checkpoint>, FormatError> {
    if sib.iter().any(|s| s == INDEX_NAME) {
        let shown = format!("{label}/{INDEX_NAME}");
        let index = parse_index(&f.text(INDEX_NAME, MAX_INDEX_SIZE)?, &shown)?;
        let shards: Vec<String> = index
            .shards(&shown)?
            .keys()
            .map(|s| s.to_string())
            .collect();
        let mut headers = Vec::with_capacity(shards.len());
        for s in &shards {
            headers.push((PathBuf::from(s), st_header(f, s, label)?));
        }
        return checkpoint_of_shards(&index, headers, &shown).map(Some);
    }
    let files: Vec<&String> = if sib.iter().any(|s| s == SINGLE_NAME) {
        sib.iter().filter(|s| *s == SINGLE_NAME).collect()
    } else {
        sib.iter()
            .filter(|s| {
                s.ends_with(".safetensors") && !s.contains('/') && !s.starts_with("adapter_model")
            })
            .collect()
    };
    if files.is_empty() {
        return Ok(None);
    }
    let mut headers = Vec::with_capacity(files.len());
    for s in files {
        headers.push((PathBuf::from(s), st_header(f, s, label)?));
    }
    checkpoint_of_files(headers).map(Some)
}

/// One safetensors file's header: the 8-byte length N (checked against the limit and the file
/// before anything more is asked for), then 8 + N bytes, parsed as a local file's header is.
fn st_header(
    f: &mut dyn Fetch,
    file: &str,
    label: &str,
) -> Result<vramscope_formats::safetensors::SafetensorsHeader, FormatError> {
    let shown = format!("{label}/{file}");
    let (mut bytes, size) = f.head(file, FIRST_READ)?;
    if bytes.len() >= 8 {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
        let want = 8u64.saturating_add(n);
        if n <= MAX_HEADER_SIZE && want <= size && (bytes.len() as u64) < want {
            bytes = f.head(file, want)?.0;
        }
    }
    read_header(&bytes[..], size, &shown)
}

/// The GGUF file a quant tag names (or the only one).
fn pick_gguf(ggufs: &[&String], quant: Option<&str>, label: &str) -> Result<String, FormatError> {
    let tag = |name: &str| gguf_tag(name);
    let choices = || {
        let mut t: Vec<String> = ggufs.iter().filter_map(|g| tag(g)).collect();
        t.sort();
        t.dedup();
        t.join(", ")
    };
    if ggufs.is_empty() {
        return Err(FormatError::Remote(format!(
            "{label} has no .gguf file{}",
            quant
                .map(|q| format!(" (asked for :{q})"))
                .unwrap_or_default()
        )));
    }
    let chosen: Vec<&String> = match quant {
        Some(q) => ggufs
            .iter()
            .copied()
            .filter(|g| tag(g).is_some_and(|t| t.eq_ignore_ascii_case(q)))
            .collect(),
        None => ggufs.to_vec(),
    };
    // A split GGUF (`-00001-of-00003.gguf`): its first part holds the whole header's metadata.
    let first_parts: Vec<&String> = chosen
        .iter()
        .copied()
        .filter(|g| !g.contains("-of-") || g.contains("-00001-of-"))
        .collect();
    match (first_parts.as_slice(), quant) {
        ([one], _) => Ok(one.to_string()),
        ([], Some(q)) => Err(FormatError::Remote(format!(
            "{label} has no GGUF file of quant {q}; choices: {}",
            choices()
        ))),
        (_, Some(q)) => Err(FormatError::Remote(format!(
            "{label}: quant {q} names several GGUF files ({}); pass a local file",
            first_parts
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        (_, None) => Err(FormatError::Remote(format!(
            "{label} holds several GGUF files: pick one with {label_repo}:QUANT (choices: {})",
            choices(),
            label_repo = label.split('@').next().unwrap_or(label)
        ))),
    }
}

/// The llama-quantize type a GGUF file name carries (`...-Q4_K_M.gguf` → `Q4_K_M`).
pub fn gguf_tag(name: &str) -> Option<String> {
    let base = name.rsplit('/').next()?.strip_suffix(".gguf")?;
    let base = match base.find("-0000") {
        Some(i) => &base[..i],
        None => base,
    };
    let upper = base.to_ascii_uppercase();
    const TYPES: &[&str] = &[
        "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S",
        "IQ3_M", "IQ4_XS", "IQ4_NL", "Q2_K_S", "Q2_K_L", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
        "Q3_K_XL", "Q4_K_S", "Q4_K_M", "Q4_K_L", "Q4_K_XL", "Q4_0", "Q4_1", "Q5_K_S", "Q5_K_M",
        "Q5_K_L", "Q5_0", "Q5_1", "Q6_K_L", "Q6_K", "Q8_0", "BF16", "F16", "F32",
    ];
    TYPES
        .iter()
        .filter(|t| {
            upper.ends_with(*t) && upper[..upper.len() - t.len()].ends_with(['-', '.', '_'])
        })
        .max_by_key(|t| t.len())
        .map(|t| t.to_string())
}

/// A GGUF header by growing range reads, bounded by [`MAX_GGUF_HEADER`].
fn gguf_model(f: &mut dyn Fetch, file: &str, label: &str) -> Result<LoadedModel, FormatError> {
    let shown = format!("{label}/{file}");
    let mut need = GGUF_FIRST_READ;
    loop {
        let (bytes, size) = f.head(file, need)?;
        match gguf::read_gguf(&bytes[..], size, &shown) {
            Ok(g) => {
                let mut m = model_of_gguf(&g, file.trim_end_matches(".gguf"), &shown)?;
                m.name = label.split('@').next().unwrap_or(label).to_string();
                return Ok(m);
            }
            Err(_) if (bytes.len() as u64) < size && need < MAX_GGUF_HEADER => {
                need = (need * 4).min(MAX_GGUF_HEADER);
            }
            Err(e) if (bytes.len() as u64) < size => {
                return Err(FormatError::malformed(
                    shown,
                    format!(
                        "the GGUF header does not end within its first {MAX_GGUF_HEADER} bytes \
                         ({e})"
                    ),
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

/// A PEFT adapter repo: `adapter_config.json` names the base model, the rank, alpha and target
/// modules (peft `LoraConfig`: `base_model_name_or_path`, `r`, `lora_alpha`, `target_modules`).
fn adapter(f: &mut dyn Fetch, label: &str) -> Result<Assembled, FormatError> {
    let shown = format!("{label}/adapter_config.json");
    let text = f.text("adapter_config.json", MAX_CONFIG_BYTES)?;
    let v: Value = serde_json::from_str(&vramscope_formats::python_json::to_strict(&text))
        .map_err(|e| FormatError::malformed(&shown, format!("not valid JSON: {e}")))?;
    let field = |k: &str, reason: &str| FormatError::Field {
        path: shown.clone(),
        field: k.into(),
        reason: reason.into(),
    };
    let kind = v.get("peft_type").and_then(Value::as_str).unwrap_or("LORA");
    if !kind.eq_ignore_ascii_case("LORA") {
        return Err(field(
            "peft_type",
            &format!("{kind} adapters are not modelled (LoRA only)"),
        ));
    }
    let base = v
        .get("base_model_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            field(
                "base_model_name_or_path",
                "missing: the base model is unknown",
            )
        })?
        .to_string();
    let rank = v
        .get("r")
        .and_then(Value::as_u64)
        .filter(|r| *r > 0)
        .ok_or_else(|| field("r", "missing or not a positive integer"))?;
    let alpha = v.get("lora_alpha").and_then(Value::as_f64).unwrap_or(8.0);
    let targets: Value = match v.get("target_modules") {
        Some(Value::Array(a)) => Value::Array(
            a.iter()
                .filter(|t| t.is_string())
                .cloned()
                .collect::<Vec<_>>(),
        ),
        Some(Value::String(s)) => json!([s]),
        _ => Value::Null,
    };
    let mut peft = json!({"method": "lora", "rank": rank, "alpha": alpha});
    if !targets.is_null() {
        peft["targets"] = targets;
    }
    Ok(Assembled::Adapter { base, peft })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file served from memory: `bytes` are its first bytes, `size` its claimed length.
    struct Mem {
        sib: Vec<String>,
        bytes: Vec<u8>,
        size: u64,
    }

    impl Fetch for Mem {
        fn siblings(&self) -> &[String] {
            &self.sib
        }
        fn text(&mut self, _: &str, limit: u64) -> Result<String, FormatError> {
            let n = (limit as usize).min(self.bytes.len());
            Ok(String::from_utf8_lossy(&self.bytes[..n]).into_owned())
        }
        fn head(&mut self, _: &str, need: u64) -> Result<(Vec<u8>, u64), FormatError> {
            let n = (need as usize).min(self.bytes.len());
            Ok((self.bytes[..n].to_vec(), self.size))
        }
    }

    proptest::proptest! {
        /// Whatever a server sends as a safetensors or GGUF head, index, adapter config or
        /// pipeline index and component config, the answer is a model or an error, never a
        /// panic.
        #[test]
        fn hostile_bytes_never_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            extra in 0u64..1 << 40,
            which in 0usize..5,
        ) {
            let size = bytes.len() as u64 + extra;
            let sib = match which {
                0 => vec!["model.safetensors".to_string()],
                1 => vec!["m-Q4_K_M.gguf".to_string()],
                2 => vec![INDEX_NAME.to_string()],
                3 => vec!["adapter_config.json".to_string()],
                // A diffusers pipeline: model_index.json and a component's config.
                _ => vec!["model_index.json".to_string(), "unet/config.json".to_string()],
            };
            let mut f = Mem { sib, bytes, size };
            let _ = assemble(&mut f, "o/n@c", None, ReadOptions::default());
        }

        #[test]
        fn quant_tags_never_panic(s in "\\PC{0,60}") {
            let _ = gguf_tag(&s);
        }
    }

    #[test]
    fn quant_tags_come_from_file_names() {
        assert_eq!(
            gguf_tag("Llama-3.2-1B-Instruct-Q4_K_M.gguf").as_deref(),
            Some("Q4_K_M")
        );
        assert_eq!(
            gguf_tag("qwen2.5-7b-instruct-q8_0.gguf").as_deref(),
            Some("Q8_0")
        );
        assert_eq!(
            gguf_tag("model-IQ2_XXS-00001-of-00002.gguf").as_deref(),
            Some("IQ2_XXS")
        );
        assert_eq!(gguf_tag("model.F16.gguf").as_deref(), Some("F16"));
        assert_eq!(gguf_tag("notes.txt"), None);
    }
}
