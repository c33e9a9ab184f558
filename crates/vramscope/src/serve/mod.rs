//! The local web UI and JSON API: axum on a current-thread tokio runtime (a local UI needs no
//! more), the estimator run on tokio's blocking pool so one slow request never stalls the
//! others. Every answer to a bad request is a 4xx with `{"error": "one-line cause"}`.
//!
//! Guards: bodies over `BODY_LIMIT` (`UPLOAD_LIMIT` for the routes that take a measurement)
//! get 413 before they are read (by `Content-Length`) or as soon
//! as they pass the limit (chunked); each request has `REQUEST_TIMEOUT`; on a loopback bind the
//! `Host` header must name the loopback (so a web page cannot reach the API through DNS
//! rebinding); beyond loopback, models must be presets or inline configs, never paths. Assets
//! are compiled in and served from a fixed table, so there is no file path to traverse.
//! At most `MAX_UPLOADS` measurement uploads are held at once (503 beyond), so memory stays
//! bounded by about `MAX_UPLOADS × UPLOAD_LIMIT`.
//!
//! A dropped `.safetensors`/`.gguf` (or only its header) is stored by `/api/upload-model`, on a
//! loopback bind only, in a private directory of this server (mode 0700, removed on exit): the
//! client gets back an id (`upload:N/NAME`) that the job routes map to the stored path, so no
//! client ever names a path of its own. At most `MAX_MODEL_UPLOADS` are kept (oldest evicted).
//!
//! Routes that answer what a subcommand prints (`plan`, `compare`, `inspect`, `models`) run this
//! binary's own subcommand on private temp files, so the answer is the CLI's byte for byte.

use crate::app;
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_model;

/// Largest request body accepted (a job or a pasted config.json is a few KiB).
pub const BODY_LIMIT: usize = 1 << 20;
/// Largest measurement upload (`/api/analyze`, `/api/compare`): snapshots of long runs are
/// tens to hundreds of MB.
pub const UPLOAD_LIMIT: usize = 256 << 20;
/// Largest model upload (`/api/upload-model`): a header is at most 8 + 100 MB for safetensors
/// (its reader's limit) but in practice a few MiB; GGUF headers with a tokenizer, tens of MiB.
pub const MODEL_UPLOAD_LIMIT: usize = 64 << 20;
/// Model uploads kept; the oldest is removed when one more arrives.
pub const MAX_MODEL_UPLOADS: usize = 16;
/// A header-only upload is padded (sparsely, nothing written) to the size its header claims,
/// at most this: no real checkpoint file is bigger.
const PAD_CAP: u64 = 1 << 40;
/// Measurement uploads answered at once; more get 503.
pub const MAX_UPLOADS: usize = 2;
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
    /// Beyond loopback, Hub ids are fetched only with `serve --allow-hub`.
    allow_hub: bool,
    /// `vramscope models --json`, computed once.
    models: Arc<OnceLock<Result<String, String>>>,
    /// Measurement uploads in flight.
    uploads: Arc<AtomicUsize>,
    /// Uploaded model files (loopback only).
    models_up: Arc<ModelUploads>,
}

/// The stored model uploads: a private directory made on the first upload, and the ids, oldest
/// first.
#[derive(Default)]
struct ModelUploads {
    dir: std::sync::Mutex<Option<TempDir>>,
    stored: std::sync::Mutex<std::collections::VecDeque<(String, std::path::PathBuf)>>,
    next: AtomicUsize,
}

impl ModelUploads {
    /// The stored path of `id`, if it is still kept.
    fn path_of(&self, id: &str) -> Option<String> {
        let stored = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        stored
            .iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, p)| p.to_str().map(str::to_string))
    }

    /// Stores `bytes` as `name`; returns its id. Evicts the oldest beyond `MAX_MODEL_UPLOADS`.
    fn store(&self, name: &str, bytes: &[u8]) -> Result<String, String> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let sub = {
            let mut dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
            if dir.is_none() {
                *dir = Some(TempDir::new()?);
            }
            let base = dir.as_ref().map(|d| d.0.clone()).unwrap_or_default();
            base.join(n.to_string())
        };
        // One directory per upload: a lone shard must not be read with another's siblings.
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&sub)
            .map_err(|e| format!("cannot store the upload: {e}"))?;
        let path = sub.join(name);
        let stored = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&path)?;
            f.write_all(bytes)?;
            if let Some(len) = claimed_len(name, bytes).filter(|l| *l > bytes.len() as u64) {
                // Sparse: extends the file's length without writing (or allocating) a byte.
                f.set_len(len)?;
            }
            Ok(())
        })();
        if let Err(e) = stored {
            let _ = std::fs::remove_dir_all(&sub);
            return Err(format!("cannot store the upload: {e}"));
        }
        // Read now, so a file that is no model is refused here with the reader's reason.
        let shown = path.display().to_string();
        if let Err(e) = path
            .to_str()
            .ok_or_else(|| "the temp directory's path is not UTF-8".to_string())
            .and_then(|p| load_model(p).map_err(|e| e.to_string()))
        {
            let _ = std::fs::remove_dir_all(&sub);
            return Err(e.replace(&shown, name));
        }
        let id = format!("upload:{n}/{name}");
        let mut list = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        list.push_back((id.clone(), path));
        while list.len() > MAX_MODEL_UPLOADS {
            if let Some((_, old)) = list.pop_front() {
                if let Some(d) = old.parent() {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
        Ok(id)
    }
}

/// The size of the whole file whose start is `bytes`, as its header says (for a header-only
/// upload), when it says so within `PAD_CAP`; `None` when the header cannot be read (the model
/// reader then says why).
fn claimed_len(name: &str, bytes: &[u8]) -> Option<u64> {
    if name.ends_with(".gguf") {
        // The header's counts are bounded by `PAD_CAP` as the file's length; reading stops at
        // the end of `bytes`.
        let f = vramscope_formats::gguf::read_gguf(bytes, PAD_CAP, name).ok()?;
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

/// The routes that take a measurement, with the larger body limit.
fn is_upload(path: &str) -> bool {
    matches!(path, "/api/analyze" | "/api/compare" | "/api/upload-model")
}

/// The body limit of the route at `path`.
fn limit_of(path: &str) -> usize {
    match path {
        "/api/upload-model" => MODEL_UPLOAD_LIMIT,
        p if is_upload(p) => UPLOAD_LIMIT,
        _ => BODY_LIMIT,
    }
}

/// One upload slot, given back when the request ends.
struct UploadSlot(Arc<AtomicUsize>);

impl Drop for UploadSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
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
pub fn serve(addr: SocketAddr, allow_hub: bool) -> std::io::Result<()> {
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
        let ups = Arc::new(ModelUploads::default());
        let app = router(addr.ip().is_loopback(), allow_hub, ups.clone());
        // Ends on Ctrl-C or SIGTERM so the uploads' directory is removed (`TempDir`'s drop).
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown())
            .await;
        drop(ups.dir.lock().unwrap_or_else(|e| e.into_inner()).take());
        r
    })
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn router(loopback: bool, allow_hub: bool, models_up: Arc<ModelUploads>) -> Router {
    let state = App {
        loopback,
        allow_hub,
        models: Arc::new(OnceLock::new()),
        uploads: Arc::new(AtomicUsize::new(0)),
        models_up,
    };
    let upload_limit = DefaultBodyLimit::max(UPLOAD_LIMIT);
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
        .route("/api/analyze", post(api_analyze).layer(upload_limit))
        .route("/api/compare", post(api_compare).layer(upload_limit))
        .route("/api/plan", post(api_plan))
        .route(
            "/api/upload-model",
            post(api_upload_model).layer(DefaultBodyLimit::max(MODEL_UPLOAD_LIMIT)),
        )
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
    let upload = is_upload(req.uri().path());
    let limit = limit_of(req.uri().path());
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        return too_large(Some(n), limit).into_response();
    }
    // Held until the answer is built: the body is read inside `next.run`.
    let _slot = if upload && req.method() == axum::http::Method::POST {
        if app.uploads.fetch_add(1, Ordering::SeqCst) >= MAX_UPLOADS {
            app.uploads.fetch_sub(1, Ordering::SeqCst);
            return ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("busy: {MAX_UPLOADS} measurements are being analyzed; try again"),
            )
            .into_response();
        }
        Some(UploadSlot(app.uploads.clone()))
    } else {
        None
    };
    let path: String = req.uri().path().chars().take(200).collect();
    let method = req.method().clone();
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
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED {
        // axum's own 405 has no body: say which methods the route takes, as JSON.
        // (axum adds its `Allow` header outside this layer.)
        let allowed =
            if path.starts_with("/api/") && !matches!(path.as_str(), "/api/models" | "/api/gpus") {
                "POST"
            } else {
                "GET"
            };
        resp = ApiError(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{path} does not take {method}; it takes {allowed}"),
        )
        .into_response();
    }
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

fn too_large(n: Option<u64>, limit: usize) -> ApiError {
    let got = n.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    ApiError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body too large{got}: the limit is {limit} bytes"),
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

/// JSON as the CLI prints it (`app::to_json`): pretty, then a newline.
fn pretty<T: serde::Serialize>(v: &T) -> Result<String, String> {
    app::to_json(v).map_err(msg)
}

/// The body's bytes (`limit` is the route's, for the 413's message), or why not.
fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(None, limit)
        } else {
            ApiError(e.status(), format!("cannot read the request body: {e}"))
        }
    })
}

/// The body as UTF-8 text, or the 413/400 that says why not.
fn body_text(body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let bytes = body_bytes(body, BODY_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad("empty body: send a job as JSON"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| ApiError::bad("the body is not UTF-8 text"))
}

/// The body as a job, read exactly as `--job job.json` reads a file.
fn job_of(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Job, ApiError> {
    job_of_text(app, &body_text(body)?)
}

fn job_of_text(app: &App, text: &str) -> Result<Job, ApiError> {
    let mut job = parse_job_text(text, Some("json")).map_err(ApiError::bad)?;
    if let Some(serde_json::Value::String(m)) = &mut job.model {
        *m = model_arg(app, m)?;
    }
    Ok(job)
}

/// The model as the CLI is to read it: an upload's id becomes its stored path; beyond loopback
/// only presets pass.
fn model_arg(app: &App, model: &str) -> Result<String, ApiError> {
    if model.starts_with(UPLOAD_PREFIX) {
        return app.models_up.path_of(model).ok_or_else(|| {
            ApiError::bad(format!(
                "model: {model:?} is not an upload this server holds (it keeps the last \
                 {MAX_MODEL_UPLOADS}; upload the file again)"
            ))
        });
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
        None => check_not_path(model).map(|_| model.to_string()),
    }
}

/// What an upload's id starts with.
const UPLOAD_PREFIX: &str = "upload:";

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

/// An application error as the 400's one line.
fn msg(e: app::AppError) -> String {
    e.message
}

/// Job → the Report, byte for byte what `estimate --job job.json --json` prints.
async fn api_estimate(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let input = app::EstimateInput { job, advise: false };
    let text = blocking(move || pretty(&app::estimate(&input).map_err(msg)?)).await?;
    Ok(json_text(text))
}

/// Job → what `fit --json` prints.
async fn api_fit(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || pretty(&app::fit(&app::FitInput { job }).map_err(msg)?)).await?;
    Ok(json_text(text))
}

/// Job → the what-if rows (the table under `estimate`).
async fn api_whatif(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let job = job_of(&app, body)?;
    let text = blocking(move || {
        let p = app::job::prepare(&job).map_err(msg)?;
        pretty(&p.what_if().map_err(msg)?)
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
    let p = app::job::prepare(job).map_err(msg)?;
    Ok((p.report().map_err(msg)?, p.what_if().map_err(msg)?))
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

/// The measurement's bytes → what `analyze FILE --json` prints for that file (the measure
/// crate's reader, run here on the bytes: the same code the CLI runs on the file's bytes).
async fn api_analyze(body: Result<Bytes, BytesRejection>) -> ApiResult {
    let bytes = body_bytes(body, UPLOAD_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad(
            "empty body: send a memory snapshot (.pickle) or a profiler timeline / trace (.json, .json.gz)",
        ));
    }
    let text = blocking(move || {
        let a = vramscope_measure::logs::analyze_any_bytes(&bytes)
            .map_err(|e| format!("measurement: {e}"))?;
        pretty(&a)
    })
    .await?;
    Ok(json_text(text))
}

/// A private directory for one request's files (mode 0700, a fresh name), removed at the end.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let p = base.join(format!(
                "vramscope-serve-{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let mut b = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            match b.create(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot make a temp directory: {e}")),
            }
        }
        Err("cannot make a temp directory: every name taken".into())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Job → what `plan --job job.json --json` prints (the job needs `gpu` and `parallel.gpus`).
async fn api_plan(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    // The job as the CLI is to read it (an upload's id made its stored path).
    let input = app::PlanInput {
        job: job_of(&app, body)?,
        gpus: None,
        top: app::plan::DEFAULT_TOP,
        max_micro_batch: app::plan::DEFAULT_MAX_MICRO_BATCH,
    };
    let out = blocking(move || pretty(&app::plan(&input).map_err(msg)?)).await?;
    Ok(json_text(out))
}

#[derive(serde::Deserialize)]
struct CompareQuery {
    /// `svg`: answer the picture with the measurement overlaid instead of the JSON.
    picture: Option<String>,
}

/// `{"job": {...}, "measurement_b64": "<the record's bytes, base64>"}` (a `data:` URL is
/// accepted too), or `{"job": {...}, "analysis": <what analyze --json printed>}` for the picture.
/// Answers what `compare --job job.json FILE --json` prints, or with `?picture=svg` the estimate's
/// picture with the measurement overlaid (`render::svg::render_svg_measured`).
async fn api_compare(
    State(app): State<App>,
    axum::extract::Query(q): axum::extract::Query<CompareQuery>,
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
    let mut v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
    drop(bytes);
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
    let job_text = match obj.get("job") {
        Some(j @ serde_json::Value::Object(_)) => j.to_string(),
        _ => {
            return Err(ApiError::bad(
                "job: required, an object (the job that was measured)",
            ))
        }
    };
    let job = job_of_text(&app, &job_text)?;
    let record = match obj.remove("measurement_b64") {
        Some(serde_json::Value::String(b)) => {
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
    if svg {
        let out = blocking(move || {
            let measured = match (record, analysis) {
                (Some(rec), _) => crate::render::svg::Measured::from_analysis(
                    &vramscope_measure::analyze_bytes(&rec)
                        .map_err(|e| format!("measurement: {e}"))?,
                ),
                (None, Some(a)) => crate::render::svg::Measured::from_json(&a)?,
                (None, None) => return Err("no measurement".into()),
            };
            let (report, rows) = report_and_rows(&job)?;
            Ok(crate::render::svg::render_svg_measured(
                &report,
                &rows,
                Some(&measured),
            ))
        })
        .await?;
        return Ok((
            [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
            out,
        )
            .into_response());
    }
    let Some(rec) = record else {
        return Err(ApiError::bad(
            "measurement_b64: required for the comparison's JSON (\"analysis\" serves only picture=svg)",
        ));
    };
    let out = blocking(move || {
        pretty(&app::compare_bytes(&job, &rec, Some("measurement")).map_err(msg)?)
    })
    .await?;
    Ok(json_text(out))
}

/// Standard base64 (RFC 4648 §4), padding optional, whitespace ignored; a `data:...;base64,`
/// prefix (what a browser's `FileReader.readAsDataURL` gives) is skipped.
fn decode_base64(s: &str) -> Result<Vec<u8>, String> {
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
    let model = model_arg(&app, &model)?;
    if model.starts_with('-') {
        return Err(ApiError::bad(format!(
            "model: {model:?} is not a preset id or a path"
        )));
    }
    let input = app::InspectInput {
        model,
        assume_llama: false,
    };
    let text = blocking(move || pretty(&app::inspect(&input).map_err(msg)?)).await?;
    Ok(json_text(text))
}

#[derive(serde::Deserialize)]
struct UploadQuery {
    name: Option<String>,
}

/// The body is a `.safetensors` or `.gguf` file, or only its header (padded to the size the
/// header claims, see `claimed_len`); `?name=` its file name. Answers `{"model": "<id>"}`.
async fn api_upload_model(
    State(app): State<App>,
    axum::extract::Query(q): axum::extract::Query<UploadQuery>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    if !app.loopback {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            "model uploads are taken only when serving on loopback".into(),
        ));
    }
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
    let bytes = body_bytes(body, MODEL_UPLOAD_LIMIT)?;
    if bytes.is_empty() {
        return Err(ApiError::bad(
            "empty body: send the .safetensors or .gguf file (or its header)",
        ));
    }
    let base = base.to_string();
    let ups = app.models_up.clone();
    let id = blocking(move || ups.store(&base, &bytes)).await?;
    Ok(json_text(
        serde_json::json!({ "model": id }).to_string() + "\n",
    ))
}

/// What `models --json` prints (computed once).
async fn api_models(State(app): State<App>) -> ApiResult {
    let cell = app.models.clone();
    let text = blocking(move || {
        cell.get_or_init(|| app::models().and_then(|m| app::to_json(&m)).map_err(msg))
            .clone()
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.1))?;
    Ok(json_text(text))
}

/// What `gpus --json` prints.
async fn api_gpus() -> ApiResult {
    let text = pretty(&app::gpus()).map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(json_text(text))
}

#[cfg(test)]
mod tests {
    use super::{decode_base64, loopback_host};

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
