//! `/api/analyze` and `/api/compare`: a measurement's bytes in (the body, or base64 inside a
//! JSON body), read in memory by the same readers the CLI runs on a file's bytes.

use crate::app;
use crate::serve::request::{
    blocking, body_bytes, decode_base64, job_of_text, json_text, msg, pretty, ApiError, ApiResult,
};
use crate::serve::{App, UPLOAD_LIMIT};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::Value;
use vramscope_core::job::Job;

/// What errors call the measurement of a request.
const NAME: &str = "measurement";

/// The measurement's bytes → what `analyze FILE --json` prints for that file.
pub async fn analyze(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let bytes = body_bytes(body, UPLOAD_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad(
            "empty body: send a memory snapshot (.pickle) or a profiler timeline / trace (.json, .json.gz)",
        ));
    }
    let text = blocking(&app, move |_| {
        pretty(&app::analyze_bytes(&bytes, Some(NAME)).map_err(msg)?)
    })
    .await?;
    Ok(json_text(text))
}

#[derive(serde::Deserialize)]
pub struct CompareQuery {
    /// `svg`: answer the picture with the measurement overlaid instead of the JSON.
    picture: Option<String>,
}

/// A compare request's body: the job, and the record or analyze's JSON of it.
struct CompareBody {
    job: Job,
    record: Option<Vec<u8>>,
    analysis: Option<Value>,
}

/// `{"job": {...}, "measurement_b64": "<the record's bytes, base64>"}` (a `data:` URL is
/// accepted too), or `{"job": {...}, "analysis": <what analyze --json printed>}` for the picture.
/// Answers what `compare --job job.json FILE --json` prints, or with `?picture=svg` the estimate's
/// picture with the measurement overlaid (`render::svg::render_svg_measured`).
pub async fn compare(
    State(app): State<App>,
    Query(q): Query<CompareQuery>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let svg = match q.picture.as_deref() {
        None | Some("") => false,
        Some("svg") => true,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "picture: {other:?} is not a picture kind (use picture=svg)"
            )))
        }
    };
    let bytes = body_bytes(body, UPLOAD_LIMIT)?;
    let out = blocking(&app.clone(), move |cancel| {
        // Up to `UPLOAD_LIMIT` of JSON and base64: read on the pool, not the runtime.
        let body = compare_body(&app, &bytes).map_err(|e| e.1)?;
        cancel.check()?;
        if svg {
            return compare_picture(&app.session, body);
        }
        let Some(rec) = body.record else {
            return Err(
                "measurement_b64: required for the comparison's JSON (\"analysis\" serves only picture=svg)"
                    .into(),
            );
        };
        pretty(&app::compare_bytes(&app.session, &body.job, &rec, Some(NAME)).map_err(msg)?)
    })
    .await?;
    if svg {
        return Ok((
            [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
            out,
        )
            .into_response());
    }
    Ok(json_text(out))
}

/// Reads a compare body; exactly one of the record and the analysis.
fn compare_body(app: &App, bytes: &[u8]) -> Result<CompareBody, ApiError> {
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| ApiError::bad("send {\"job\": {...}, \"measurement_b64\": \"...\"}"))?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "job" | "measurement_b64" | "analysis"))
    {
        return Err(ApiError::bad(format!(
            "unknown field {k:?}: compare takes \"job\" and \"measurement_b64\" (or \"analysis\")"
        )));
    }
    let job = match obj.get("job") {
        Some(j @ Value::Object(_)) => job_of_text(app, &j.to_string())?,
        _ => {
            return Err(ApiError::bad(
                "job: required, an object (the job that was measured)",
            ))
        }
    };
    let record = match obj.remove("measurement_b64") {
        Some(Value::String(b)) => {
            Some(decode_base64(&b).map_err(|e| ApiError::bad(format!("measurement_b64: {e}")))?)
        }
        Some(_) => return Err(ApiError::bad("measurement_b64: must be a base64 string")),
        None => None,
    };
    let analysis = obj.remove("analysis");
    if record.is_some() == analysis.is_some() {
        return Err(ApiError::bad(
            "send exactly one of \"measurement_b64\" (the record) and \"analysis\" (analyze's JSON)",
        ));
    }
    Ok(CompareBody {
        job,
        record,
        analysis,
    })
}

/// The estimate's picture with the measurement overlaid (SVG text).
fn compare_picture(session: &app::Session, body: CompareBody) -> Result<String, String> {
    let measured = match (body.record, body.analysis) {
        (Some(rec), _) => crate::render::svg::Measured::from_analysis(
            &vramscope_measure::analyze_bytes(&rec).map_err(|e| format!("{NAME}: {e}"))?,
        ),
        (None, Some(a)) => crate::render::svg::Measured::from_json(&a)?,
        (None, None) => return Err("no measurement".into()),
    };
    let (report, rows) = super::estimate::report_and_rows(session, &body.job)?;
    Ok(crate::render::svg::render_svg_measured(
        &report,
        &rows,
        Some(&measured),
    ))
}
