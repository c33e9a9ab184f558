//! Model files dropped on the page: a `.safetensors` or `.gguf` (or only its header) is read
//! by `/api/upload-model`, on a loopback bind only, into memory (`Session::hold`; nothing
//! is written to disk): the client gets back an id (`upload:N/NAME`) that jobs name as their
//! model, so no client ever names a path of its own. At most `MAX_MODEL_UPLOADS` are kept
//! (oldest let go first).

use super::request::{blocking, body_bytes, json_text, ApiError, ApiResult, UPLOAD_PREFIX};
use super::{App, MAX_MODEL_UPLOADS, MODEL_UPLOAD_LIMIT};
use crate::app::Session;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vramscope_formats::model_source::{
    model_name_from_path, model_of_checkpoint, model_of_gguf, LoadedModel, Source,
};
use vramscope_formats::{gguf, safetensors};

/// A header-only upload is read as a file of the size its header claims, at most this: no real
/// checkpoint file is bigger.
const PAD_CAP: u64 = 1 << 40;

/// The ids of the uploads this server holds, oldest first, and the session that holds their
/// models (the server's, which every request resolves MODEL through).
pub struct ModelUploads {
    ids: Mutex<std::collections::VecDeque<String>>,
    next: AtomicUsize,
    session: Arc<Session>,
}

impl ModelUploads {
    /// No uploads yet; models held by `session`.
    pub fn new(session: Arc<Session>) -> Self {
        ModelUploads {
            ids: Mutex::default(),
            next: AtomicUsize::new(0),
            session,
        }
    }

    /// Whether `id` is an upload this server still holds.
    pub fn holds(&self, id: &str) -> bool {
        let ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter().any(|i| i == id) && self.session.is_held(id)
    }

    /// Reads `bytes` as the model file `name` and holds it; returns its id. Lets go of the
    /// oldest beyond `MAX_MODEL_UPLOADS`. A file that is no model is refused with the reader's
    /// reason.
    fn store(&self, name: &str, bytes: &[u8]) -> Result<String, String> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let model = read_upload(name, bytes).map_err(|e| e.to_string())?;
        let id = format!("{UPLOAD_PREFIX}{n}/{name}");
        self.session.hold(&id, model);
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.push_back(id.clone());
        while ids.len() > MAX_MODEL_UPLOADS {
            if let Some(old) = ids.pop_front() {
                self.session.release(&old);
            }
        }
        Ok(id)
    }
}

/// The model in an upload, read as the CLI reads a file of that name holding those bytes (a
/// header-only upload as the whole file its header describes).
fn read_upload(name: &str, bytes: &[u8]) -> vramscope_formats::Result<LoadedModel> {
    let len = claimed_len(name, bytes).map_or(bytes.len() as u64, |l| l.max(bytes.len() as u64));
    let stem = model_name_from_path(Path::new(name));
    let mut m = if name.ends_with(".gguf") {
        let file = gguf::read_gguf(bytes, len, name)?;
        model_of_gguf(&file, &stem, name)?
    } else {
        let header = safetensors::read_header(bytes, len, name)?;
        let ckpt = safetensors::checkpoint_of_files(vec![(PathBuf::from(name), header)])?;
        let mut m = model_of_checkpoint(ckpt, None, name)?;
        m.name = stem;
        m
    };
    m.source = Source::local("file", name);
    Ok(m)
}

/// The size of the whole file whose start is `bytes`, as its header says (for a header-only
/// upload), when it says so within `PAD_CAP`; `None` when the header cannot be read (the model
/// reader then says why).
fn claimed_len(name: &str, bytes: &[u8]) -> Option<u64> {
    if name.ends_with(".gguf") {
        // The header's counts are bounded by `PAD_CAP` as the file's length; reading stops at
        // the end of `bytes`.
        let f = gguf::read_gguf(bytes, PAD_CAP, name).ok()?;
        let end = f
            .tensors
            .iter()
            .map(|t| t.offset.checked_add(t.bytes))
            .try_fold(0u64, |m, e| e.map(|e| m.max(e)))?;
        return f.data_offset.checked_add(end).filter(|l| *l <= PAD_CAP);
    }
    // safetensors (format: huggingface/safetensors README): u64 LE header length N, N bytes of
    // JSON whose tensors' `data_offsets` [begin, end) index the data after the header.
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header = bytes.get(8..usize::try_from(n).ok()?.checked_add(8)?)?;
    let v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let mut end = 0u64;
    for (k, t) in &v {
        if k != "__metadata__" {
            end = end.max(t.get("data_offsets")?.get(1)?.as_u64()?);
        }
    }
    (8 + n).checked_add(end).filter(|l| *l <= PAD_CAP)
}

#[derive(serde::Deserialize)]
pub struct UploadQuery {
    name: Option<String>,
}

/// The file name `?name=` gives, if it is a plain `.safetensors` or `.gguf` name.
fn file_name(q: UploadQuery) -> Result<String, ApiError> {
    let name = q.name.unwrap_or_default();
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let ok_ext = [".safetensors", ".gguf"]
        .iter()
        .any(|e| base.ends_with(e) && base.len() > e.len());
    let ok_chars = base
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'));
    if !ok_ext || !ok_chars || base.starts_with('.') || base.len() > 200 {
        return Err(ApiError::bad(
            "name: required, a file name ending in .safetensors or .gguf (letters, digits, '.', \
             '-', '_'), e.g. ?name=model.safetensors",
        ));
    }
    Ok(base.to_string())
}

/// The body is a `.safetensors` or `.gguf` file, or only its header (read as the file its
/// header describes, see `claimed_len`); `?name=` its file name. Answers `{"model": "<id>"}`.
pub async fn upload_model(
    State(app): State<App>,
    Query(q): Query<UploadQuery>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    if !app.loopback {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            "model uploads are taken only when serving on loopback".into(),
        ));
    }
    let name = file_name(q)?;
    let bytes = body_bytes(body, MODEL_UPLOAD_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad(
            "empty body: send the .safetensors or .gguf file (or its header)",
        ));
    }
    let ups = app.models_up.clone();
    let id = blocking(&app, move |_| ups.store(&name, &bytes)).await?;
    Ok(json_text(
        serde_json::json!({ "model": id }).to_string() + "\n",
    ))
}
