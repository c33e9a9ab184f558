//! The local web UI and JSON API: axum on a current-thread tokio runtime (a local UI needs no
//! more), the estimator run on tokio's blocking pool so one slow request never stalls the
//! others. Every answer to a bad request is a 4xx with `{"error": "one-line cause"}`.
//!
//! Guards: bodies over `BODY_LIMIT` get 413 before they are read (by `Content-Length`) or as soon
//! as they pass the limit (chunked); each request has `REQUEST_TIMEOUT`; on a loopback bind the
//! `Host` header must name the loopback (so a web page cannot reach the API through DNS
//! rebinding); beyond loopback, models must be presets or inline configs, never paths. Assets
//! are compiled in and served from a fixed table, so there is no file path to traverse.

use crate::commands::estimate::{estimate_job, prepare_job};
use crate::commands::jobargs::parse_job_text;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vramscope_core::job::Job;

/// Largest request body accepted (a job or a pasted config.json is a few KiB).
pub const BODY_LIMIT: usize = 1 << 20;
/// Longest a request may take, body upload included (a `fit` search takes well under a second).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const STYLE_CSS: &str = include_str!("../../assets/style.css");

/// Only our own scripts and styles; the picture's inline SVG needs `style-src 'unsafe-inline'`
/// for its presentation attributes only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'";

#[derive(Clone)]
struct App {
    /// Bound to a loopback address: `Host` checked, paths allowed as models.
    loopback: bool,
    /// `vramscope models --json`, computed once.
    models: Arc<OnceLock<Result<String, String>>>,
}

/// A 4xx/5xx answer: `{"error": "..."}`.
#[derive(Debug)]
struct ApiError(StatusCode, String);

impl ApiError {
    fn bad(msg: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, msg.into().replace('\n', " "))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.1 }).to_string() + "\n";
        (
            self.0,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body,
        )
            .into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

/// Listens on `addr` and serves until the process ends. The first line on stdout is the URL
/// (with the real port when `addr` asked for port 0).
pub fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "vramscope serve: http://{local}/")?;
            out.flush()?;
        }
        let app = router(addr.ip().is_loopback());
        axum::serve(listener, app).await
    })
}

fn router(loopback: bool) -> Router {
    let state = App {
        loopback,
        models: Arc::new(OnceLock::new()),
    };
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/app.js", get(app_js))
        .route("/style.css", get(style_css))
        .route("/api/estimate", post(api_estimate))
        .route("/api/fit", post(api_fit))
        .route("/api/whatif", post(api_whatif))
        .route("/api/picture", post(api_picture))
        .route("/api/report.html", post(api_report_html))
        .route("/api/inspect", post(api_inspect))
        .route("/api/models", get(api_models))
        .route("/api/gpus", get(api_gpus))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Host check, early 413, timeout and response headers for every request.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    if app.loopback {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        if !loopback_host(host) {
            return ApiError(
                StatusCode::FORBIDDEN,
                format!("Host {host:?} is not this machine's loopback (use http://127.0.0.1 or http://localhost)"),
            )
            .into_response();
        }
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > BODY_LIMIT as u64) {
        return too_large(Some(n)).into_response();
    }
    let mut resp = match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request took longer than {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn too_large(n: Option<u64>) -> ApiError {
    let got = n.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    ApiError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body too large{got}: the limit is {BODY_LIMIT} bytes"),
    )
}

async fn not_found(req: Request) -> ApiError {
    let path: String = req.uri().path().chars().take(200).collect();
    ApiError(StatusCode::NOT_FOUND, format!("no such path: {path}"))
}

fn asset(ctype: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, ctype),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

fn json_text(text: String) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        text,
    )
        .into_response()
}

/// JSON as the CLI prints it (`output::print_json`): pretty, then a newline.
fn pretty<T: serde::Serialize>(v: &T) -> Result<String, String> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

/// The body as UTF-8 text, or the 413/400 that says why not.
fn body_text(body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(None)
        } else {
            ApiError(e.status(), format!("cannot read the request body: {e}"))
        }
    })?;
    if bytes.is_empty() {
        return Err(ApiError::bad("empty body: send a job as JSON"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| ApiError::bad("the body is not UTF-8 text"))
}

/// The body as a job, read exactly as `--job job.json` reads a file.
fn job_of(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Job, ApiError> {
    let text = body_text(body)?;
    let job = parse_job_text(&text, Some("json")).map_err(ApiError::bad)?;
    if !app.loopback {
        if let Some(serde_json::Value::String(m)) = &job.model {
            check_not_path(m)?;
        }
    }
    Ok(job)
}

/// Beyond loopback the server must not read its own files for strangers.
fn check_not_path(model: &str) -> Result<(), ApiError> {
    if vramscope_formats::presets::find(model).is_none() {
        return Err(ApiError::bad(format!(
            "model: {model:?} is not a preset; paths are not read when serving beyond \
             loopback (send {{\"hf_config\": {{...}}}} instead)"
        )));
    }
    Ok(())
}

/// Runs `work` on the blocking pool: its `Err` is a 400, a panic a 500.
async fn blocking<F>(work: F) -> Result<String, ApiError>
where
    F: FnOnce() -> Result<String, String> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(msg)) => Err(ApiError::bad(msg)),
        Err(_) => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error while answering this request".into(),
        )),
    }
}

fn msg(e: Box<dyn std::error::Error>) -> String {
    e.to_string()
}

/// Job → the Report, byte for byte what `estimate --job job.json --json` prints.
async fn api_estimate(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || pretty(&estimate_job(&job).map_err(msg)?)).await?;
    Ok(json_text(text))
}

/// Job → what `fit --json` prints.
async fn api_fit(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || {
        let (model, resolved, _) = prepare_job(&job).map_err(msg)?;
        let answer = vramscope_core::fit::fit(&model, &resolved).map_err(|e| e.to_string())?;
        pretty(&answer)
    })
    .await?;
    Ok(json_text(text))
}

/// Job → the what-if rows (the table under `estimate`).
async fn api_whatif(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || {
        let (model, resolved, _) = prepare_job(&job).map_err(msg)?;
        pretty(&vramscope_core::fit::what_if(&model, &resolved).map_err(|e| e.to_string())?)
    })
    .await?;
    Ok(json_text(text))
}

/// The report and its what-if rows, for the picture and the page.
fn report_and_rows(
    job: &Job,
) -> Result<
    (
        vramscope_core::report::Report,
        Vec<vramscope_core::fit::WhatIf>,
    ),
    String,
> {
    let report = estimate_job(job).map_err(msg)?;
    let (model, resolved, _) = prepare_job(job).map_err(msg)?;
    let rows = vramscope_core::fit::what_if(&model, &resolved).map_err(|e| e.to_string())?;
    Ok((report, rows))
}

/// Job → the SVG picture that `estimate --svg` writes.
async fn api_picture(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
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
async fn api_report_html(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
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

/// Runs this binary's own subcommand and returns its stdout: the API then answers exactly what
/// the CLI prints. Exit 2's one stderr line becomes the 400's message.
fn run_self(args: &[&str]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let out = std::process::Command::new(exe)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", args[0]))?;
    if out.status.success() {
        return String::from_utf8(out.stdout).map_err(|e| e.to_string());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().next().unwrap_or("failed").trim();
    Err(line.strip_prefix("error: ").unwrap_or(line).to_string())
}

/// `{"model": "..."}` → what `inspect MODEL --json` prints.
async fn api_inspect(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let text = body_text(body)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
    let model = match v.get("model") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(ApiError::bad(
                "model: required, a preset id or a path (e.g. {\"model\": \"gpt2\"})",
            ))
        }
    };
    if let Some(obj) = v.as_object() {
        if let Some(k) = obj.keys().find(|k| *k != "model") {
            return Err(ApiError::bad(format!(
                "unknown field {k:?}: inspect takes only \"model\""
            )));
        }
    }
    if !app.loopback {
        check_not_path(&model)?;
    }
    if model.starts_with('-') {
        return Err(ApiError::bad(format!(
            "model: {model:?} is not a preset id or a path"
        )));
    }
    let text = blocking(move || run_self(&["inspect", "--json", "--", &model])).await?;
    Ok(json_text(text))
}

/// What `models --json` prints (computed once).
async fn api_models(State(app): State<App>) -> ApiResult {
    let cell = app.models.clone();
    let text = blocking(move || cell.get_or_init(|| run_self(&["models", "--json"])).clone())
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.1))?;
    Ok(json_text(text))
}

/// What `gpus --json` prints.
async fn api_gpus() -> ApiResult {
    let text = pretty(&vramscope_core::gpu::catalog())
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(json_text(text))
}

#[cfg(test)]
mod tests {
    use super::loopback_host;

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:8765",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:8765",
            "192.168.1.2:80",
            "[::2]:80",
            "localhost.evil.example",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
    }
}
