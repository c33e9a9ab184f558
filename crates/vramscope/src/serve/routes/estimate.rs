//! `/api/estimate`, `/api/fit`, `/api/whatif`, `/api/picture`, `/api/report.html`: a job in,
//! the estimate's answers out.

use crate::app;
use crate::serve::assets::CSP;
use crate::serve::request::{blocking, job_of, json_text, msg, pretty, ApiError, ApiResult};
use crate::serve::App;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use vramscope_core::fit::WhatIf;
use vramscope_core::job::Job;
use vramscope_core::report::Report;

/// Job → the Report, byte for byte what `estimate --job job.json --json` prints.
pub async fn estimate(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let input = app::EstimateInput {
        job: job_of(&app, body)?,
        advise: false,
    };
    let text = blocking(move || pretty(&app::estimate(&input).map_err(msg)?)).await?;
    Ok(json_text(text))
}

/// Job → what `fit --json` prints.
pub async fn fit(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let input = app::FitInput {
        job: job_of(&app, body)?,
    };
    let text = blocking(move || pretty(&app::fit(&input).map_err(msg)?)).await?;
    Ok(json_text(text))
}

/// Job → the what-if rows (the table under `estimate`).
pub async fn whatif(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || {
        let p = app::job::prepare(&job).map_err(msg)?;
        pretty(&p.what_if().map_err(msg)?)
    })
    .await?;
    Ok(json_text(text))
}

/// The report (without advice) and its what-if rows, for the picture and the page: the model
/// loaded once.
pub fn report_and_rows(job: &Job) -> Result<(Report, Vec<WhatIf>), String> {
    let p = app::job::prepare(job).map_err(msg)?;
    Ok((p.report().map_err(msg)?, p.what_if().map_err(msg)?))
}

/// Job → the SVG picture that `estimate --svg` writes.
pub async fn picture(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let svg = blocking(move || {
        let (report, rows) = report_and_rows(&job)?;
        Ok(crate::render::svg::render_svg(&report, &rows))
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
        svg,
    )
        .into_response())
}

/// Job → the HTML page that `estimate --html` writes.
pub async fn report_html(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let page = blocking(move || {
        let (report, rows) = report_and_rows(&job)?;
        Ok(crate::render::html::render_html(&report, &rows))
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        page,
    )
        .into_response())
}

/// `{"from": [{"name", "text"}, ...]}` (beside any job fields) → `{"job": {...}, "notes":
/// [...]}`: the job those training configs make, read by the same readers as `--from`, and the
/// lines saying what each file set from which key and which keys were ignored. The web UI's
/// drop target and file picker show it and fill the form from it.
pub async fn from(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let answer = serde_json::json!({"job": &job, "notes": &job.notes});
    Ok(json_text(pretty(&answer).map_err(ApiError::bad)?))
}
