//! Checkpoints: a `.safetensors` file, a directory of them, or a sharded checkpoint with its
//! `model.safetensors.index.json` — every stored tensor with exact bytes, layer and component.

use super::{read_file_header, SafetensorsHeader, INDEX_NAME, MAX_INDEX_SIZE, SINGLE_NAME};
use crate::error::{FormatError, Result};
use crate::hf_names;
use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::path::{Component as PathPart, Path, PathBuf};
use vramscope_core::{Inventory, Tensor};

/// What a checkpoint's headers say: every stored tensor with exact bytes, layer and component.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Tensors file by file (files in name order), each file's in data-offset order. Layers are
    /// numbered as the inventory builder does (`hf_names::assign_layers`).
    pub inventory: Inventory,
    /// The safetensors files read.
    pub files: Vec<PathBuf>,
    /// The index's `metadata.total_size` (sum of tensor bytes), when there is an index.
    pub index_total_size: Option<u64>,
    /// The index's `metadata.total_parameters` (transformers 5.x and later).
    pub index_total_parameters: Option<u64>,
    /// The files' `__metadata__` merged; on conflicting values the first file (by name) wins.
    pub metadata: BTreeMap<String, String>,
}

/// Reads a checkpoint's headers. `path` may be:
/// - a `.safetensors` file;
/// - a `*.safetensors.index.json` file (sharded checkpoint);
/// - a directory: its `model.safetensors.index.json` if present, else its only
///   `*.safetensors.index.json`; else `model.safetensors` if present; else every `*.safetensors`
///   file in it (shards whose index was lost), each tensor in exactly one file. PEFT
///   `adapter_model*.safetensors` files are skipped, because an adapter saved next to its base
///   model is a different set of weights; a directory holding only an adapter reads the adapter.
///
/// The index totals are reported, not checked: older transformers versions computed them
/// differently, so a mismatch is for the caller to show, not a reason to refuse the checkpoint.
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(&shown, e))?;
    if meta.is_dir() {
        read_directory(path)
    } else if file_name(path).ends_with(".index.json") {
        read_sharded(path)
    } else {
        read_files(&[path.to_path_buf()])
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_adapter(name: &str) -> bool {
    name.starts_with("adapter_model")
}

fn read_directory(dir: &Path) -> Result<Checkpoint> {
    let shown = dir.display().to_string();
    let index = dir.join(INDEX_NAME);
    if index.is_file() {
        return read_sharded(&index);
    }
    let mut indexes = Vec::new();
    let mut weights = Vec::new();
    let mut adapters = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| FormatError::io(&shown, e))?;
    for entry in entries {
        let p = entry.map_err(|e| FormatError::io(&shown, e))?.path();
        let name = file_name(&p);
        if !p.is_file() {
            continue;
        }
        if name.ends_with(".safetensors.index.json") && !is_adapter(&name) {
            indexes.push(p);
        } else if name.ends_with(".safetensors") {
            if is_adapter(&name) {
                adapters.push(p);
            } else {
                weights.push(p);
            }
        }
    }
    indexes.sort();
    weights.sort();
    adapters.sort();
    match indexes.len() {
        0 => {}
        1 => return read_sharded(&indexes[0]),
        _ => {
            let names: Vec<String> = indexes.iter().map(|p| file_name(p)).collect();
            return Err(FormatError::malformed(
                shown,
                format!(
                    "several safetensors indexes ({}); pass the one to read",
                    names.join(", ")
                ),
            ));
        }
    }
    let single = dir.join(SINGLE_NAME);
    if single.is_file() {
        return read_files(&[single]);
    }
    if !weights.is_empty() {
        return read_files(&weights);
    }
    if !adapters.is_empty() {
        return read_files(&adapters);
    }
    Err(FormatError::malformed(
        shown,
        format!("no {INDEX_NAME} and no *.safetensors file in this directory"),
    ))
}

/// Headers of independent files, merged; a tensor may appear in only one of them.
fn read_files(files: &[PathBuf]) -> Result<Checkpoint> {
    let mut headers = Vec::with_capacity(files.len());
    for f in files {
        headers.push((f.clone(), read_file_header(f)?));
    }
    checkpoint_of_files(headers)
}

/// A checkpoint from the headers of independent files (read from disk or fetched): a tensor may
/// appear in only one of them.
pub fn checkpoint_of_files(headers: Vec<(PathBuf, SafetensorsHeader)>) -> Result<Checkpoint> {
    let mut owner: HashMap<&str, &Path> = HashMap::new();
    for (f, h) in &headers {
        for t in &h.tensors {
            if let Some(first) = owner.insert(&t.name, f) {
                return Err(FormatError::malformed(
                    f.display().to_string(),
                    format!(
                        "tensor '{}' is also in {}; a checkpoint stores each tensor once",
                        t.name,
                        first.display()
                    ),
                ));
            }
        }
    }
    build(headers, None, None)
}

fn read_sharded(index_path: &Path) -> Result<Checkpoint> {
    let shown = index_path.display().to_string();
    let index = read_index(index_path)?;
    let dir = match index_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let shards = index.shards(&shown)?;
    let mut headers = Vec::with_capacity(shards.len());
    for (shard, listed) in &shards {
        let file = dir.join(shard);
        let header = match std::fs::metadata(&file) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(FormatError::malformed(
                    &shown,
                    format!(
                        "shard '{shard}' (for {} tensor(s), e.g. '{}') does not exist in {}",
                        listed.len(),
                        listed[0],
                        dir.display()
                    ),
                ));
            }
            _ => read_file_header(&file)?,
        };
        headers.push((file, header));
    }
    checkpoint_of_shards(&index, headers, &shown)
}

impl Index {
    /// Shard file name → the tensors the index puts there; every name must be a plain file name
    /// inside the checkpoint directory. `shown` labels errors.
    pub fn shards(&self, shown: &str) -> Result<BTreeMap<&str, Vec<&str>>> {
        let mut shards: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tensor, shard) in &self.weight_map {
            if !is_plain_relative(shard) {
                return Err(FormatError::malformed(
                    shown,
                    format!(
                        "weight_map puts tensor '{tensor}' in '{shard}', which is not a file \
                         name inside the checkpoint directory"
                    ),
                ));
            }
            shards.entry(shard).or_default().push(tensor);
        }
        Ok(shards)
    }
}

/// A sharded checkpoint from its index and each shard's header (read from disk or fetched),
/// in the index's shard order: every tensor in exactly the shard the index names.
pub fn checkpoint_of_shards(
    index: &Index,
    headers: Vec<(PathBuf, SafetensorsHeader)>,
    shown: &str,
) -> Result<Checkpoint> {
    let shards = index.shards(shown)?;
    if shards.len() != headers.len() {
        return Err(FormatError::malformed(
            shown,
            format!(
                "the index names {} shards but {} headers were read",
                shards.len(),
                headers.len()
            ),
        ));
    }
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for ((shard, _), (file, header)) in shards.iter().zip(&headers) {
        for t in &header.tensors {
            if let Some(other) = owner.insert(&t.name, shard) {
                return Err(FormatError::malformed(
                    shown,
                    format!(
                        "tensor '{}' is in both shard '{other}' and '{shard}'",
                        t.name
                    ),
                ));
            }
            match index.weight_map.get(&t.name) {
                Some(s) if s == shard => {}
                Some(s) => {
                    return Err(FormatError::malformed(
                        shown,
                        format!(
                            "tensor '{}' is in {} but weight_map puts it in '{s}'",
                            t.name,
                            file.display()
                        ),
                    ))
                }
                None => {
                    return Err(FormatError::malformed(
                        shown,
                        format!(
                            "tensor '{}' is in {} but not in weight_map",
                            t.name,
                            file.display()
                        ),
                    ))
                }
            }
        }
    }
    if owner.len() != index.weight_map.len() {
        if let Some((t, s)) = index
            .weight_map
            .iter()
            .find(|(t, _)| !owner.contains_key(t.as_str()))
        {
            return Err(FormatError::malformed(
                shown,
                format!("weight_map puts tensor '{t}' in '{s}', but that shard has no such tensor"),
            ));
        }
    }
    build(headers, index.total_size, index.total_parameters)
}

/// A shard name from an index must stay inside the checkpoint directory: relative, made of
/// plain names only (no `..`, `.`, root or drive prefix). Symlinks are not resolved: the
/// Hugging Face cache links snapshot files to blobs outside the snapshot directory.
fn is_plain_relative(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, PathPart::Normal(_)))
}

/// A `model.safetensors.index.json`: tensor → shard, and the totals it states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub weight_map: BTreeMap<String, String>,
    pub total_size: Option<u64>,
    pub total_parameters: Option<u64>,
}

fn read_index(path: &Path) -> Result<Index> {
    let shown = path.display().to_string();
    let text = crate::files::read_regular_text(path, MAX_INDEX_SIZE, "a safetensors index")
        .map_err(|e| FormatError::io(&shown, e))?;
    parse_index(&text, &shown)
}

/// Parses index text (from a file or fetched; the caller bounds its size by
/// [`MAX_INDEX_SIZE`]). `shown` labels errors.
pub fn parse_index(text: &str, shown: &str) -> Result<Index> {
    let shown = shown.to_string();
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| FormatError::malformed(&shown, format!("index is not valid JSON: {e}")))?;
    let field = |field: &str, reason: String| FormatError::Field {
        path: shown.clone(),
        field: field.into(),
        reason,
    };
    let obj = value
        .as_object()
        .ok_or_else(|| FormatError::malformed(&shown, "index is not a JSON object"))?;
    let map = obj
        .get("weight_map")
        .ok_or_else(|| field("weight_map", "missing".into()))?
        .as_object()
        .ok_or_else(|| {
            field(
                "weight_map",
                "not an object of tensor name → shard file".into(),
            )
        })?;
    if map.is_empty() {
        return Err(field("weight_map", "is empty".into()));
    }
    let mut weight_map = BTreeMap::new();
    for (k, v) in map {
        let shard = v.as_str().ok_or_else(|| {
            field(
                &format!("weight_map.{k}"),
                format!("expected a shard file name, found {v}"),
            )
        })?;
        weight_map.insert(k.clone(), shard.to_owned());
    }
    let (mut total_size, mut total_parameters) = (None, None);
    match obj.get("metadata") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(m)) => {
            let count = |key: &str| -> Result<Option<u64>> {
                match m.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => json_count(v).map(Some).ok_or_else(|| {
                        field(
                            &format!("metadata.{key}"),
                            format!("expected a non-negative integer, found {v}"),
                        )
                    }),
                }
            };
            total_size = count("total_size")?;
            total_parameters = count("total_parameters")?;
        }
        Some(v) => return Err(field("metadata", format!("expected an object, found {v}"))),
    }
    Ok(Index {
        weight_map,
        total_size,
        total_parameters,
    })
}

/// A non-negative integer, also when a writer stored it as an integral float (`1.5e9`).
fn json_count(v: &serde_json::Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    // 2^64 as f64 is exact; anything below it with no fraction converts losslessly.
    (f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0).then_some(f as u64)
}

fn build(
    headers: Vec<(PathBuf, SafetensorsHeader)>,
    index_total_size: Option<u64>,
    index_total_parameters: Option<u64>,
) -> Result<Checkpoint> {
    let mut tensors = Vec::new();
    let mut metadata = BTreeMap::new();
    let mut files = Vec::with_capacity(headers.len());
    for (file, header) in headers {
        for (k, v) in header.metadata {
            metadata.entry(k).or_insert(v);
        }
        for t in header.tensors {
            let (layer, component) = hf_names::classify(&t.name);
            let tensor = Tensor::new(t.name, t.shape, t.dtype, layer, component).map_err(|e| {
                FormatError::Core {
                    path: file.display().to_string(),
                    source: e,
                }
            })?;
            tensors.push(tensor);
        }
        files.push(file);
    }
    hf_names::assign_layers(&mut tensors);
    Ok(Checkpoint {
        inventory: Inventory::new(tensors),
        files,
        index_total_size,
        index_total_parameters,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names() {
        for ok in ["model-00001-of-00002.safetensors", "sub/x.safetensors"] {
            assert!(is_plain_relative(ok), "{ok}");
        }
        for bad in [
            "",
            "../x.safetensors",
            "/etc/passwd",
            "a/../../b",
            "./x",
            ".",
        ] {
            assert!(!is_plain_relative(bad), "{bad}");
        }
    }

    #[test]
    fn counts_from_json() {
        use serde_json::json;
        assert_eq!(json_count(&json!(247424)), Some(247424));
        assert_eq!(json_count(&json!(1.5e9)), Some(1_500_000_000));
        assert_eq!(json_count(&json!(1.5)), None);
        assert_eq!(json_count(&json!(-1)), None);
        assert_eq!(json_count(&json!(1e30)), None);
        assert_eq!(json_count(&json!("12")), None);
    }
}
