//! `/api/plan`: a job (it names `gpu` and `parallel.gpus`) → what `plan --job job.json --json`
//! prints.

use crate::app;
use crate::serve::request::{blocking, body_text, job_in_pool, json_text, msg, pretty, ApiResult};
use crate::serve::App;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;

pub async fn plan(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let body = body_text(body)?;
    let out = blocking(&app.clone(), move |cancel| {
        let input = app::PlanInput {
            job: job_in_pool(&app, &body)?,
            gpus: None,
            top: app::plan::DEFAULT_TOP,
            max_micro_batch: app::plan::DEFAULT_MAX_MICRO_BATCH,
        };
        cancel.check()?;
        pretty(&app::plan::plan_until(&app.session, &input, &cancel.as_stop()).map_err(msg)?)
    })
    .await?;
    Ok(json_text(out))
}
