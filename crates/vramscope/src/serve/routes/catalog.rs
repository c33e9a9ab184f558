//! `/api/inspect`, `/api/models`, `/api/gpus`: a model's inventory and the compiled-in
//! catalogs, as `inspect --json`, `models --json` and `gpus --json` print them.

use crate::app;
use crate::serve::request::{
    blocking, body_text, json_text, model_arg, msg, pretty, ApiError, ApiResult,
};
use crate::serve::App;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;

/// `{"model": "..."}` → what `inspect MODEL --json` prints.
pub async fn inspect(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let text = body_text(body)?;
    let input = inspect_input(&app, &text)?;
    let session = app.session.clone();
    let text = blocking(&app, move |_| {
        if let Some(p) = app::diffusion::pipeline_of(&session, &input.model, false).map_err(msg)? {
            return pretty(&app::diffusion::inspect(&p).map_err(msg)?);
        }
        pretty(&app::inspect(&session, &input).map_err(msg)?)
    })
    .await?;
    Ok(json_text(text))
}

/// An inspect body (at most `BODY_LIMIT` of JSON, read in linear time) as the app's input.
fn inspect_input(app: &App, text: &str) -> Result<app::InspectInput, ApiError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
    let model = match v.get("model") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(ApiError::bad(
                "model: required, a preset id or a path (e.g. {\"model\": \"gpt2\"})",
            ))
        }
    };
    if let Some(k) = v.as_object().and_then(|o| o.keys().find(|k| *k != "model")) {
        return Err(ApiError::bad(format!(
            "unknown field {k:?}: inspect takes only \"model\""
        )));
    }
    Ok(app::InspectInput {
        model: model_arg(app, &model)?,
        assume_llama: false,
    })
}

/// What `models --json` prints (computed once).
pub async fn models(State(app): State<App>) -> ApiResult {
    let cell = app.models.clone();
    let text = blocking(&app, move |_| {
        cell.get_or_init(|| app::models().and_then(|m| app::to_json(&m)).map_err(msg))
            .clone()
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.1))?;
    Ok(json_text(text))
}

/// What `gpus --json` prints.
pub async fn gpus() -> ApiResult {
    let text = pretty(&app::gpus()).map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(json_text(text))
}
