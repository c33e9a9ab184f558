//! Reading a request and writing its answer: the body as bytes, text or a job (read exactly as
//! `--job job.json` reads a file), the model a job may name here, the work run on the bounded
//! pool (`pool`), and every error as a 4xx/5xx with `{"error": "one-line cause"}`.

use super::guard::too_large;
use super::pool::Cancel;
use super::{App, BODY_LIMIT, MAX_MODEL_UPLOADS};
use crate::app;
use crate::app::jobtext::file::parse_job_text;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use vramscope_core::job::Job;

pub use super::api_error::{ApiError, ApiResult};

pub fn json_text(text: String) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        text,
    )
        .into_response()
}

/// JSON as the CLI prints it (`app::to_json`): pretty, then a newline.
pub fn pretty<T: serde::Serialize>(v: &T) -> Result<String, String> {
    app::to_json(v).map_err(msg)
}

/// An application error as the 400's one line.
pub fn msg(e: app::AppError) -> String {
    e.message
}

/// The body's bytes (`limit` is the route's, for the 413's message), or why not.
pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(None, limit)
        } else {
            ApiError(e.status(), format!("cannot read the request body: {e}"))
        }
    })
}

/// The body as UTF-8 text, or the 413/400 that says why not.
pub fn body_text(body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let bytes = body_bytes(body, BODY_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad("empty body: send a job as JSON"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| ApiError::bad("the body is not UTF-8 text"))
}

/// A job's JSON text as a job whose model this server may read (`model_arg`).
pub fn job_of_text(app: &App, text: &str) -> Result<Job, ApiError> {
    let mut job = parse_job_text(text, Some("json")).map_err(ApiError::bad)?;
    if let Some(serde_json::Value::String(m)) = &mut job.model {
        *m = model_arg(app, m)?;
    }
    Ok(job)
}

/// A body whose `model` may name a diffusers pipeline (`vramscope_hub::may_be_pipeline`), as
/// JSON with the model as this server may read it (`model_arg`); `None` for any other body
/// (then it is read as a job, and its errors are that reading's).
pub fn pipeline_body(app: &App, text: &str) -> Result<Option<serde_json::Value>, ApiError> {
    use serde_json::Value;
    let Ok(Value::Object(mut job)) = serde_json::from_str::<Value>(text) else {
        return Ok(None);
    };
    let Some(Value::String(m)) = job.get("model") else {
        return Ok(None);
    };
    if m.starts_with(UPLOAD_PREFIX) {
        return Ok(None);
    }
    let m = model_arg(app, m)?;
    if !vramscope_hub::may_be_pipeline(&m) {
        return Ok(None);
    }
    job.insert("model".into(), Value::String(m));
    Ok(Some(Value::Object(job)))
}

/// What an upload's id starts with.
pub const UPLOAD_PREFIX: &str = "upload:";

/// The model as this server may read it: an upload it holds; beyond loopback only presets and
/// (with `--allow-hub`) Hub repos.
pub fn model_arg(app: &App, model: &str) -> Result<String, ApiError> {
    if model.starts_with(UPLOAD_PREFIX) {
        if app.models_up.holds(model) {
            return Ok(model.to_string());
        }
        return Err(ApiError::bad(format!(
            "model: {model:?} is not an upload this server holds (it keeps the last \
             {MAX_MODEL_UPLOADS}; upload the file again)"
        )));
    }
    if !app.loopback {
        return remote_model(app, model);
    }
    Ok(model.to_string())
}

/// Beyond loopback: a preset as it is; a Hub id, with `--allow-hub`, as `hf://...` (so that no
/// path on this machine is read for it); anything else refused.
fn remote_model(app: &App, model: &str) -> Result<String, ApiError> {
    if vramscope_formats::presets::find(model).is_some() {
        return Ok(model.to_string());
    }
    match vramscope_hub::spec::parse(model) {
        Some(h) if app.allow_hub => Ok(format!("hf://{}", h.display())),
        Some(_) => Err(ApiError::bad(format!(
            "model: {model:?} is a Hub repo, and this server fetches from the Hub only when \
             started with --allow-hub (it is bound beyond loopback)"
        ))),
        None => Err(ApiError::bad(format!(
            "model: {model:?} is not a preset; paths are not read when serving beyond \
             loopback (send {{\"hf_config\": {{...}}}} instead)"
        ))),
    }
}

/// Runs `work` on the server's bounded pool (`pool::run`): its `Err` is a 400, a panic a 500;
/// it gets the request's `Cancel` to check between its steps.
pub async fn blocking<T, F>(app: &App, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Cancel) -> Result<T, String> + Send + 'static,
{
    super::pool::run(&app.pool, work).await
}

/// The body as a job (`job_of_text`) read on the pool, for work that then uses it there.
pub fn job_in_pool(app: &App, text: &str) -> Result<Job, String> {
    job_of_text(app, text).map_err(|e| e.1)
}

/// Standard base64 (RFC 4648 §4), padding optional, whitespace ignored; a `data:...;base64,`
/// prefix (what a browser's `FileReader.readAsDataURL` gives) is skipped.
pub fn decode_base64(s: &str) -> Result<Vec<u8>, String> {
    let s = match s.strip_prefix("data:") {
        Some(rest) => rest
            .split_once(',')
            .map(|x| x.1)
            .ok_or("a data: URL without a comma")?,
        None => s,
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 3);
    let (mut acc, mut bits, mut pad) = (0u32, 0u32, 0usize);
    for (i, c) in s.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                pad += 1;
                continue;
            }
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => return Err(format!("byte {i} ({:?}) is not base64", c as char)),
        };
        if pad > 0 {
            return Err(format!("byte {i}: data after the '=' padding"));
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 || pad > 2 {
        return Err("truncated (its length is not a whole number of bytes)".into());
    }
    if out.is_empty() {
        return Err("empty".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64_as_rfc_4648_says() {
        // RFC 4648 §10 test vectors.
        for (plain, enc) in [
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(decode_base64(enc).unwrap(), plain.as_bytes(), "{enc}");
            assert_eq!(
                decode_base64(enc.trim_end_matches('=')).unwrap(),
                plain.as_bytes()
            );
        }
        assert_eq!(
            decode_base64("data:application/octet-stream;base64,Zm9v").unwrap(),
            b"foo"
        );
        for bad in ["", "Z", "Zm9v!", "Zg==Zg", "data:nocomma"] {
            assert!(decode_base64(bad).is_err(), "{bad}");
        }
    }
}
