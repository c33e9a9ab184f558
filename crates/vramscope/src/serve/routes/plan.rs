//! `/api/plan`: a job (it names `gpu` and `parallel.gpus`) → what `plan --job job.json --json`
//! prints.

use crate::app;
use crate::serve::request::{blocking, job_of, json_text, msg, pretty, ApiResult};
use crate::serve::App;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;

pub async fn plan(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let input = app::PlanInput {
        job: job_of(&app, body)?,
        gpus: None,
        top: app::plan::DEFAULT_TOP,
        max_micro_batch: app::plan::DEFAULT_MAX_MICRO_BATCH,
    };
    let out = blocking(move || pretty(&app::plan(&input).map_err(msg)?)).await?;
    Ok(json_text(out))
}
