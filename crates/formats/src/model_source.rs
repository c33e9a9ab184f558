//! Resolves what the user named as MODEL — a preset, a config.json, a model directory, a
//! `.safetensors` or `.gguf` file, an inline config or a bare parameter count — into one
//! [`LoadedModel`].

use crate::error::{FormatError, Result};
use crate::hf_config::{
    parse_config_str_with, parse_config_value, parse_config_value_with, ParsedConfig, ReadOptions,
};
use crate::{gguf, presets, safetensors};
use std::path::Path;
use vramscope_core::summary::ReadFrom;
use vramscope_core::{build_inventory, Inventory, ModelSpec};

/// Where a model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Preset,
    ConfigJson,
    Safetensors,
    Gguf,
    Params,
}

impl Origin {
    pub fn name(&self) -> &'static str {
        match self {
            Origin::Preset => "preset",
            Origin::ConfigJson => "config.json",
            Origin::Safetensors => "safetensors",
            Origin::Gguf => "gguf",
            Origin::Params => "params",
        }
    }
}

/// Where the model's files were read (the Report's `model.source`): `preset`, `file` (a local
/// path), `inline`, `params`, `hf-cache` (the local Hugging Face cache) or `hub`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Source {
    pub kind: String,
    /// `ORG/NAME` for `hf-cache` and `hub`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The revision asked for (branch, tag or commit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The commit the files were read at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The local path or preset id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Source {
    /// The report's `model.source` (this place's kind) and `model.origin` (this place in
    /// full) for a model or pipeline read from here.
    pub fn read_from(&self) -> ReadFrom {
        ReadFrom {
            source: Some(self.kind.clone()),
            origin: serde_json::to_value(self).ok(),
        }
    }

    pub fn local(kind: &str, path: &str) -> Self {
        Source {
            kind: kind.to_string(),
            path: Some(path.to_string()),
            ..Default::default()
        }
    }

    /// One line for human output: `Qwen/Qwen3-8B@<commit> via the Hub`.
    pub fn describe(&self) -> String {
        let at = |repo: &str| match &self.commit {
            Some(c) => format!("{repo}@{c}"),
            None => repo.to_string(),
        };
        match (self.kind.as_str(), &self.repo) {
            ("hub", Some(r)) => format!("{} via the Hub", at(r)),
            ("hf-cache", Some(r)) => format!("{} from the local Hugging Face cache", at(r)),
            ("preset", _) => format!("built-in preset {}", self.path.as_deref().unwrap_or("?")),
            (kind, _) => match &self.path {
                Some(p) => format!("{kind} {p}"),
                None => kind.to_string(),
            },
        }
    }
}

/// A model ready for inspection or estimation.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub name: String,
    pub origin: Origin,
    /// Where it was read.
    pub source: Source,
    /// The architecture, when known (config.json, preset). `None` for a bare count or a file
    /// without config.
    pub spec: Option<ModelSpec>,
    /// Every parameter tensor; `None` for a bare parameter count.
    pub inventory: Option<Inventory>,
    /// Total parameters.
    pub params_total: u64,
    pub warnings: Vec<String>,
}

impl LoadedModel {
    fn from_config(parsed: ParsedConfig, origin: Origin, path: &str) -> Result<Self> {
        let inventory = build_inventory(&parsed.spec).map_err(|source| FormatError::Core {
            path: path.to_string(),
            source,
        })?;
        Ok(LoadedModel {
            name: parsed.spec.name.clone(),
            origin,
            source: Source::local("file", path),
            params_total: inventory.params(),
            spec: Some(parsed.spec),
            inventory: Some(inventory),
            warnings: parsed.warnings,
        })
    }

    /// A model known only by its parameter count (model states can be estimated; activations
    /// cannot).
    pub fn from_params(params: u64) -> Self {
        LoadedModel {
            name: format!("{params} parameters"),
            origin: Origin::Params,
            source: Source {
                kind: "params".into(),
                ..Default::default()
            },
            spec: None,
            inventory: None,
            params_total: params,
            warnings: Vec::new(),
        }
    }
}

/// A model from a parsed config alone; `shown` labels errors.
pub fn model_of_config(parsed: ParsedConfig, shown: &str) -> Result<LoadedModel> {
    LoadedModel::from_config(parsed, Origin::ConfigJson, shown)
}

/// Loads a model from a preset id (or its Hugging Face repo name) or a path.
pub fn load_model(arg: &str) -> Result<LoadedModel> {
    load_model_with(arg, ReadOptions::default())
}

/// A local path or a preset, when `arg` names one (`None` otherwise): the offline first steps of
/// resolving MODEL.
pub fn load_local(arg: &str, opts: ReadOptions) -> Option<Result<LoadedModel>> {
    let path = Path::new(arg);
    if path.exists() {
        return Some(load_path(path, opts));
    }
    let p = presets::find(arg)?;
    Some(presets::load(p).and_then(|parsed| {
        let mut m = LoadedModel::from_config(parsed, Origin::Preset, arg)?;
        m.source = Source::local("preset", p.id);
        Ok(m)
    }))
}

/// [`load_model`] with explicit read options.
pub fn load_model_with(arg: &str, opts: ReadOptions) -> Result<LoadedModel> {
    if let Some(loaded) = load_local(arg, opts) {
        return loaded;
    }
    if let Some(m) = tuned_variant_model(arg) {
        return m;
    }
    let looks_like_path = [".json", ".gguf", ".safetensors"]
        .iter()
        .any(|ext| arg.to_ascii_lowercase().ends_with(ext))
        || arg.starts_with(['.', '/', '~']);
    if looks_like_path {
        return Err(FormatError::io(
            arg,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    Err(presets::unknown(arg))
}

/// The preset architecture an instruction-tuned or chat variant's name stands for (see
/// [`tuned_variant`]), with a note saying so; `None` when the name is no such variant. Used
/// offline, when the Hub cannot be asked for the variant's own config.
pub fn tuned_variant_model(arg: &str) -> Option<Result<LoadedModel>> {
    let p = tuned_variant(arg)?;
    Some(presets::load(p).and_then(|parsed| {
        let mut m = LoadedModel::from_config(parsed, Origin::Preset, arg)?;
        m.source = Source::local("preset", p.id);
        let own = tuned_context(arg);
        let base = m.spec.as_ref().and_then(|s| s.max_position_embeddings);
        let context = match (own, m.spec.as_mut()) {
            (Some(n), Some(spec)) if base != Some(n) => {
                spec.max_position_embeddings = Some(n);
                format!(
                    "; its own config's context limit (max_position_embeddings {n}) is not the \
                     base's ({}), and is the one used here",
                    base.map_or("unknown".to_string(), |b| b.to_string())
                )
            }
            _ => String::new(),
        };
        m.warnings.push(format!(
            "'{arg}' read as preset '{}' (the Hub was not asked or could not be reached): an \
             instruction-tuned or chat variant has its base model's architecture, so the same \
             memory per token{context}",
            p.id
        ));
        Ok(m)
    }))
}

/// Instruction-tuned variants whose config.json limits the context below their base's:
/// Qwen2.5's 7B, 14B, 32B and 72B base configs say `max_position_embeddings` 131072, their
/// `-Instruct` configs 32768 (the model cards: "config.json is set for context length up to
/// 32,768 tokens", longer with YaRN's `rope_scaling`; vLLM refuses a longer `--max-model-len`,
/// `vllm/config/model.py` `_get_and_verify_max_len`, as users report for
/// Qwen2.5-72B-Instruct).
const TUNED_CONTEXT: &[(&str, u64)] = &[
    ("qwen2.5-7b-instruct", 32768),
    ("qwen2.5-14b-instruct", 32768),
    ("qwen2.5-32b-instruct", 32768),
    ("qwen2.5-72b-instruct", 32768),
];

/// The own `max_position_embeddings` of a variant named by `arg` (any organisation, any case)
/// where it differs from its base preset's; `None` where unknown or the same.
fn tuned_context(arg: &str) -> Option<u64> {
    let name = arg.rsplit('/').next()?.to_ascii_lowercase();
    TUNED_CONTEXT
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
}

/// The preset an instruction-tuned or chat variant's name (`meta-llama/Llama-3.1-8B-Instruct`,
/// `Mistral-7B-Instruct-v0.1`, `Llama-2-7b-chat-hf`) stands for: the name without its
/// organisation and its `instruct` / `chat` / `it` / `hf` parts.
fn tuned_variant(arg: &str) -> Option<&'static presets::RawPreset> {
    let name = arg.rsplit('/').next()?.to_ascii_lowercase();
    let parts: Vec<&str> = name.split('-').collect();
    let kept: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| !matches!(*p, "instruct" | "chat" | "it" | "hf"))
        .collect();
    if kept.len() == parts.len() {
        return None;
    }
    let base = kept.join("-");
    presets::all().iter().find(|p| {
        p.id == base
            || p.repo
                .rsplit('/')
                .next()
                .is_some_and(|r| r.eq_ignore_ascii_case(&base))
    })
}

/// Loads a model from an inline config.json object (the job's `{"hf_config": {...}}`).
pub fn load_inline_config(value: &serde_json::Value) -> Result<LoadedModel> {
    load_inline_config_with(value, ReadOptions::default())
}

/// [`load_inline_config`] with explicit read options.
pub fn load_inline_config_with(
    value: &serde_json::Value,
    opts: ReadOptions,
) -> Result<LoadedModel> {
    let mut m = LoadedModel::from_config(
        parse_config_value_with(value, "hf_config", opts)?,
        Origin::ConfigJson,
        "hf_config",
    )?;
    m.source = Source {
        kind: "inline".into(),
        ..Default::default()
    };
    Ok(m)
}

fn load_path(path: &Path, opts: ReadOptions) -> Result<LoadedModel> {
    let shown = path.display().to_string();
    if path.is_dir() {
        return load_dir(path, opts);
    }
    let lower = shown.to_ascii_lowercase();
    if lower.ends_with(".gguf") {
        return load_gguf(path);
    }
    if lower.ends_with(".safetensors") || lower.ends_with(".safetensors.index.json") {
        let target = if lower.ends_with(".index.json") {
            path.parent().unwrap_or(Path::new("."))
        } else {
            path
        };
        return load_safetensors(target, None);
    }
    if lower.ends_with(".json") {
        let text = read_small_text(path)?;
        let mut parsed = parse_config_str_with(&text, &shown, opts)?;
        if path.file_name().is_some_and(|n| n == "config.json") {
            preprocessor_beside(&mut parsed, path.parent().unwrap_or(Path::new(".")))?;
        }
        let mut m = LoadedModel::from_config(parsed, Origin::ConfigJson, &shown)?;
        if m.name == shown {
            m.name = model_name_from_path(path);
        }
        return Ok(m);
    }
    // Sniff the magic of files with other names.
    let mut head = [0u8; 4];
    use std::io::Read;
    let n = crate::files::open_regular(path)
        .and_then(|(mut f, _)| f.read(&mut head))
        .map_err(|e| FormatError::io(&shown, e))?;
    if n == 4 && &head == b"GGUF" {
        return load_gguf(path);
    }
    Err(FormatError::Unsupported {
        path: shown,
        reason: "not a config.json, .safetensors, .gguf or model directory".into(),
    })
}

fn load_dir(dir: &Path, opts: ReadOptions) -> Result<LoadedModel> {
    let shown = dir.display().to_string();
    let config_path = dir.join("config.json");
    let parsed = if config_path.is_file() {
        let text = read_small_text(&config_path)?;
        let mut p = parse_config_str_with(&text, &config_path.display().to_string(), opts)?;
        preprocessor_beside(&mut p, dir)?;
        Some(p)
    } else {
        None
    };
    let has_weights = std::fs::read_dir(dir)
        .map_err(|e| FormatError::io(&shown, e))?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.ends_with(".safetensors") || name == "model.safetensors.index.json"
        });
    match (parsed, has_weights) {
        (Some(p), false) => {
            let mut m = LoadedModel::from_config(p, Origin::ConfigJson, &shown)?;
            m.name = model_name_from_path(dir);
            Ok(m)
        }
        (parsed, true) => load_safetensors(dir, parsed),
        (None, false) => Err(FormatError::Unsupported {
            path: shown,
            reason: "directory has neither config.json nor *.safetensors files".into(),
        }),
    }
}

/// Reads a checkpoint's headers. With a config, the architecture comes from the config and the
/// inventory (dtypes, quantized tensors) from the files; a difference in parameter count between
/// the two is reported, not hidden.
fn load_safetensors(path: &Path, parsed: Option<ParsedConfig>) -> Result<LoadedModel> {
    let ckpt = safetensors::read_checkpoint(path)?;
    let shown = path.display().to_string();
    let mut m = model_of_checkpoint(ckpt, parsed, &shown)?;
    m.name = model_name_from_path(path);
    m.source = Source::local("file", &shown);
    Ok(m)
}

/// A model from a checkpoint's headers (read from disk or fetched) and, when there is one, its
/// config. `shown` labels errors; the caller names the model and its source.
pub fn model_of_checkpoint(
    ckpt: safetensors::Checkpoint,
    parsed: Option<ParsedConfig>,
    shown: &str,
) -> Result<LoadedModel> {
    let (buffers, tensors): (Vec<_>, Vec<_>) = ckpt
        .inventory
        .tensors
        .into_iter()
        .partition(|t| crate::hf_names::is_buffer(&t.name));
    let mut warnings = Vec::new();
    if !buffers.is_empty() {
        let bytes: u64 = buffers.iter().map(|t| t.bytes).sum();
        warnings.push(format!(
            "{} tensors in the checkpoint are buffers, not parameters ({}, e.g. '{}'): \
             left out of the parameter count",
            buffers.len(),
            vramscope_core::text::bytes(bytes),
            buffers[0].name
        ));
    }
    let (tensors, spec) = match parsed {
        Some(p) => {
            warnings.extend(p.warnings);
            let built = build_inventory(&p.spec).map_err(|source| FormatError::Core {
                path: shown.to_string(),
                source,
            })?;
            // The reader's architecture checked against the weights (`reconcile`).
            let (kept, note) = crate::reconcile::reconcile(tensors, &built, &p.spec, shown)?;
            warnings.extend(note);
            (kept, Some(p.spec))
        }
        None => (tensors, None),
    };
    let inventory = Inventory::new(tensors);
    let params_total = inventory.params();
    Ok(LoadedModel {
        name: shown.to_string(),
        origin: Origin::Safetensors,
        source: Source::default(),
        spec,
        params_total,
        inventory: Some(inventory),
        warnings,
    })
}

fn load_gguf(path: &Path) -> Result<LoadedModel> {
    let file = gguf::read_gguf_path(path)?;
    let shown = path.display().to_string();
    let mut m = model_of_gguf(&file, &model_name_from_path(path), &shown)?;
    m.source = Source::local("file", &shown);
    Ok(m)
}

/// A model from a GGUF header (read from disk or fetched); `fallback_name` names it when the
/// metadata does not, `shown` labels errors.
pub fn model_of_gguf(
    file: &gguf::GgufFile,
    fallback_name: &str,
    shown: &str,
) -> Result<LoadedModel> {
    let inventory = file.inventory()?;
    let name = file
        .summary()
        .name
        .clone()
        .unwrap_or_else(|| fallback_name.to_string());
    let mut warnings = Vec::new();
    let spec = match gguf_config(file) {
        Some(cfg) => match parse_config_value(&cfg, shown) {
            Ok(p) => Some(p.spec),
            Err(e) => {
                warnings.push(format!(
                    "GGUF metadata does not describe the architecture: {e}"
                ));
                None
            }
        },
        None => {
            warnings.push(format!(
                "GGUF architecture '{}' is not read into an architecture: only weights are \
                 known (activations and KV need one)",
                file.architecture().unwrap_or("?")
            ));
            None
        }
    };
    Ok(LoadedModel {
        name,
        origin: Origin::Gguf,
        source: Source::default(),
        spec,
        params_total: inventory.params(),
        inventory: Some(inventory),
        warnings,
    })
}

/// The config.json equivalent of a GGUF file's `{arch}.*` metadata, for the Llama-shaped
/// architectures llama.cpp names `llama` (also Mistral), `qwen2`, `qwen3`, `gemma`, `gemma2`,
/// `gemma3`, `phi3` (llama.cpp `src/llama-arch.cpp` key names).
fn gguf_config(file: &gguf::GgufFile) -> Option<serde_json::Value> {
    let arch = file.architecture()?;
    let model_type = match arch {
        "llama" => "llama",
        "qwen2" => "qwen2",
        "qwen3" => "qwen3",
        "gemma" => "gemma",
        "gemma2" => "gemma2",
        "gemma3" => "gemma3_text",
        "phi3" => "phi3",
        _ => return None,
    };
    let s = file.summary();
    let key = |k: &str| file.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64());
    let mut cfg = serde_json::json!({
        "model_type": model_type,
        "hidden_size": s.embedding_length?,
        "num_hidden_layers": s.block_count?,
        "num_attention_heads": s.head_count?,
        "num_key_value_heads": s.head_count_kv.or(s.head_count)?,
        "intermediate_size": s.feed_forward_length?,
        "vocab_size": s.vocab_size?,
        "max_position_embeddings": s.context_length,
        "tie_word_embeddings": !file.tensors.iter().any(|t| t.name == "output.weight"),
        "torch_dtype": "bfloat16",
    });
    if let Some(d) = key("attention.key_length") {
        cfg["head_dim"] = d.into();
    }
    if let Some(w) = key("attention.sliding_window") {
        cfg["sliding_window"] = w.into();
    }
    Some(cfg)
}

/// config.json files are small; refuse anything implausibly large rather than reading it.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The name of the image processor's settings a vision-language repo ships beside its config.
pub const PREPROCESSOR_NAME: &str = "preprocessor_config.json";

/// Applies `text` (a repo's `preprocessor_config.json`) to a parsed vision-language config:
/// its image-size rules (min/max pixels, longest edge, tiles) replace the family's defaults.
/// A model without a vision side ignores the file, whatever it holds.
pub fn apply_preprocessor_text(parsed: &mut ParsedConfig, text: &str, shown: &str) -> Result<()> {
    if parsed.spec.vision.is_none() {
        return Ok(());
    }
    crate::hf_config::apply_preprocessor(&mut parsed.spec, text, shown)
}

/// The `preprocessor_config.json` in `dir`, when there is one, applied to `parsed`.
fn preprocessor_beside(parsed: &mut ParsedConfig, dir: &Path) -> Result<()> {
    let path = dir.join(PREPROCESSOR_NAME);
    if parsed.spec.vision.is_none() || !path.is_file() {
        return Ok(());
    }
    let text = read_small_text(&path)?;
    apply_preprocessor_text(parsed, &text, &path.display().to_string())
}

fn read_small_text(path: &Path) -> Result<String> {
    let shown = path.display().to_string();
    crate::files::read_regular_text(path, MAX_CONFIG_BYTES, "a config.json")
        .map_err(|e| FormatError::io(&shown, e))
}

/// The name a model file or directory is shown by.
pub fn model_name_from_path(path: &Path) -> String {
    let p = if path.file_name().is_some_and(|n| n == "config.json") {
        path.parent().unwrap_or(path)
    } else {
        path
    };
    p.file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_end_matches(".gguf")
                .trim_end_matches(".safetensors")
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| p.display().to_string())
}

impl LoadedModel {
    /// The estimator's view of this model.
    pub fn into_input(self) -> vramscope_core::estimate::ModelInput {
        vramscope_core::estimate::ModelInput::new(
            self.name,
            self.spec,
            self.inventory,
            self.params_total,
        )
    }
}

/// Loads the model a job names: a preset id or path (string), `{"hf_config": {...}}`, or
/// `{"params": N}` (integer or float, e.g. `7.5e9`).
pub fn load_job_model(v: &serde_json::Value) -> Result<LoadedModel> {
    load_job_model_with(v, ReadOptions::default(), &|s| load_model(s))
}

/// [`load_job_model`] with explicit read options; a string model goes through `by_name` (the
/// caller's full MODEL resolution: local, preset, Hugging Face cache, Hub).
pub fn load_job_model_with(
    v: &serde_json::Value,
    opts: ReadOptions,
    by_name: &dyn Fn(&str) -> Result<LoadedModel>,
) -> Result<LoadedModel> {
    use serde_json::Value;
    let bad = |reason: String| FormatError::Field {
        path: "job".into(),
        field: "model".into(),
        reason,
    };
    match v {
        Value::String(s) => by_name(s),
        Value::Object(o) => {
            if let Some(cfg) = o.get("hf_config") {
                load_inline_config_with(cfg, opts)
            } else if let Some(p) = o.get("params") {
                let n = vramscope_core::job::whole_number("model.params", p)
                    .map_err(|e| bad(e.to_string()))?;
                if n == 0 {
                    return Err(bad("params must be at least 1".into()));
                }
                Ok(LoadedModel::from_params(n))
            } else {
                Err(bad(
                    "expected a preset id or path, {\"hf_config\": {...}} or {\"params\": N}"
                        .into(),
                ))
            }
        }
        Value::Null => Err(bad(
            "is required: a preset id, a path, or {\"params\": N}".into()
        )),
        other => Err(bad(format!("must be a string or an object (got {other})"))),
    }
}
