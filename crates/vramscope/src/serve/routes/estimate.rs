//! `/api/estimate`, `/api/fit`, `/api/whatif`, `/api/picture`, `/api/report.html`: a job in,
//! the estimate's answers out.

use crate::app;
use crate::serve::assets::CSP;
use crate::serve::request::{
    blocking, body_text, job_in_pool, job_of_text, json_text, msg, pipeline_body, pretty, ApiError,
    ApiResult,
};
use crate::serve::App;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use vramscope_core::fit::WhatIf;
use vramscope_core::job::Job;
use vramscope_core::report::Report;

/// Job → the Report, byte for byte what `estimate --job job.json --json` prints. A job whose
/// `model` names a diffusers pipeline (a directory or Hub repo with `model_index.json`) is a
/// diffusion job (docs/diffusion.md): its report by phase.
pub async fn estimate(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    answer(app, body, Command::Estimate).await
}

/// Job → what `fit --json` prints (for a pipeline: the most images and the largest side).
pub async fn fit(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    answer(app, body, Command::Fit).await
}

/// The commands whose body may be a language-model job or a diffusion job.
#[derive(Clone, Copy)]
enum Command {
    Estimate,
    Fit,
}

/// `command`'s `--json` answer to the body: the diffusion line's when its model is a diffusers
/// pipeline, else the language-model job's.
async fn answer(app: App, body: Result<Bytes, BytesRejection>, command: Command) -> ApiResult {
    let body = body_text(body)?;
    let text = blocking(&app.clone(), move |cancel| {
        let (pipeline, job) = job_or_pipeline(&app, &body).map_err(|e| e.1)?;
        cancel.check()?;
        if let Some(v) = &pipeline {
            if let Some(p) = app::diffusion::pipeline_of_job(&app.session, v).map_err(msg)? {
                let job = app::diffusion::job_of(v).map_err(msg)?;
                return match command {
                    Command::Estimate => pretty(&app::diffusion::estimate(&p, &job).map_err(msg)?),
                    Command::Fit => pretty(&app::diffusion::fit(&p, &job).map_err(msg)?),
                };
            }
        }
        let job = job.map_err(|e| e.1)?;
        match command {
            Command::Estimate => {
                let input = app::EstimateInput { job, advise: false };
                pretty(&app::estimate(&app.session, &input).map_err(msg)?)
            }
            Command::Fit => pretty(&app::fit(&app.session, &app::FitInput { job }).map_err(msg)?),
        }
    })
    .await?;
    Ok(json_text(text))
}

/// The body as a pipeline candidate (whose resolution may fetch) and as a job (its reading's
/// error kept for when the model is no pipeline).
fn job_or_pipeline(
    app: &App,
    text: &str,
) -> Result<(Option<serde_json::Value>, Result<Job, ApiError>), ApiError> {
    let job = job_of_text(app, text);
    let pipeline = match pipeline_body(app, text) {
        Ok(p) => p,
        Err(e) if job.is_err() => return Err(e),
        Err(_) => None,
    };
    if pipeline.is_none() {
        return Ok((None, Ok(job?)));
    }
    Ok((pipeline, job))
}

/// Job → the what-if rows (the table under `estimate`).
pub async fn whatif(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let body = body_text(body)?;
    let text = blocking(&app.clone(), move |cancel| {
        let job = job_in_pool(&app, &body)?;
        cancel.check()?;
        let p = app::job::prepare(&app.session, &job).map_err(msg)?;
        pretty(&p.what_if().map_err(msg)?)
    })
    .await?;
    Ok(json_text(text))
}

/// The report (without advice) and its what-if rows, for the picture and the page: the model
/// loaded once.
pub fn report_and_rows(session: &app::Session, job: &Job) -> Result<(Report, Vec<WhatIf>), String> {
    let p = app::job::prepare(session, job).map_err(msg)?;
    Ok((p.report().map_err(msg)?, p.what_if().map_err(msg)?))
}

/// The body's job drawn by `draw` from its report and what-if rows (the model loaded once),
/// on the pool.
async fn drawn(
    app: App,
    body: Result<Bytes, BytesRejection>,
    draw: fn(&Report, &[WhatIf]) -> String,
) -> Result<String, ApiError> {
    let body = body_text(body)?;
    blocking(&app.clone(), move |cancel| {
        let job = job_in_pool(&app, &body)?;
        cancel.check()?;
        let (report, rows) = report_and_rows(&app.session, &job)?;
        Ok(draw(&report, &rows))
    })
    .await
}

/// Job → the SVG picture that `estimate --svg` writes.
pub async fn picture(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let svg = drawn(app, body, crate::render::svg::render_svg).await?;
    Ok((
        [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
        svg,
    )
        .into_response())
}

/// Job → the HTML page that `estimate --html` writes.
pub async fn report_html(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let page = drawn(app, body, crate::render::html::render_html).await?;
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
    let body = body_text(body)?;
    let text = blocking(&app.clone(), move |_| {
        let job = job_in_pool(&app, &body)?;
        pretty(&serde_json::json!({"job": &job, "notes": &job.notes}))
    })
    .await?;
    Ok(json_text(text))
}
