//! The local web UI and JSON API: axum on a current-thread tokio runtime (a local UI needs no
//! more), every answer computed by the application layer (`crate::app`) on a bounded pool
//! (`pool`: reading the job included) so one slow request never stalls the others, and work
//! stops when its request's deadline passes: body → typed input → app → JSON, the same
//! functions the CLI's `--json` prints, so the API answers what the CLI prints byte for byte
//! without running any process or writing any file.
//!
//! - `guard`: the limits every request passes (loopback `Host`, body size, upload slots,
//!   timeout, headers);
//! - `request`: reading a body into a job, errors as `{"error": "one-line cause"}`;
//! - `pool`: the bounded pool CPU-bound work runs on, and its cancellation;
//! - `routes`: one module per command;
//! - `uploads`: model files dropped on the page, read into memory;
//! - `assets`: the page, its script and style, compiled in.

mod api_error;
mod assets;
mod guard;
mod origin;
mod pool;
mod request;
mod routes;
mod uploads;

use crate::app::Session;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Largest request body accepted (a job or a pasted config.json is a few KiB).
pub const BODY_LIMIT: usize = 1 << 20;
/// Largest measurement upload (`/api/analyze`, `/api/compare`): snapshots of long runs are
/// tens to hundreds of MB.
pub const UPLOAD_LIMIT: usize = 256 << 20;
/// Largest model upload (`/api/upload-model`): a header is at most 8 + 100 MB for safetensors
/// (its reader's limit) but in practice a few MiB; GGUF headers with a tokenizer, tens of MiB.
pub const MODEL_UPLOAD_LIMIT: usize = 64 << 20;
/// Model uploads kept; the oldest is let go when one more arrives.
pub const MAX_MODEL_UPLOADS: usize = 16;
/// Measurement uploads answered at once; more get 503.
pub const MAX_UPLOADS: usize = 2;
/// Longest a request may take, body upload included (a `fit` search takes well under a second).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every handler shares.
#[derive(Clone)]
struct App {
    /// Bound to a loopback address: `Host` checked, paths allowed as models.
    loopback: bool,
    /// Beyond loopback, Hub ids are fetched only with `serve --allow-hub`.
    allow_hub: bool,
    /// `models --json`, computed once.
    models: Arc<OnceLock<Result<String, String>>>,
    /// Measurement uploads in flight.
    uploads: Arc<AtomicUsize>,
    /// Uploaded model files (loopback only).
    models_up: Arc<uploads::ModelUploads>,
    /// How every request resolves MODEL: the command line's fetch flags, and the uploads held
    /// between requests (`models_up` holds them here).
    session: Arc<Session>,
    /// Where CPU-bound work runs, `pool::workers()` steps at once.
    pool: pool::Pool,
}

/// Listens on `addr` and serves until Ctrl-C or SIGTERM. The first line on stdout is the URL
/// (with the real port when `addr` asked for port 0).
pub fn serve(addr: SocketAddr, allow_hub: bool, session: Session) -> std::io::Result<()> {
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
        let app = router(addr.ip().is_loopback(), allow_hub, session);
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown())
            .await
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

fn router(loopback: bool, allow_hub: bool, session: Session) -> Router {
    let session = Arc::new(session);
    let state = App {
        loopback,
        allow_hub,
        models: Arc::new(OnceLock::new()),
        uploads: Arc::new(AtomicUsize::new(0)),
        models_up: Arc::new(uploads::ModelUploads::new(Arc::clone(&session))),
        session,
        pool: pool::Pool::new(pool::workers()),
    };
    let upload_limit = DefaultBodyLimit::max(UPLOAD_LIMIT);
    assets::scripts(Router::new())
        .route("/", get(assets::index))
        .route("/index.html", get(assets::index))
        .route("/style.css", get(assets::style_css))
        .route("/api/estimate", post(routes::estimate::estimate))
        .route("/api/fit", post(routes::estimate::fit))
        .route("/api/from", post(routes::estimate::from))
        .route("/api/whatif", post(routes::estimate::whatif))
        .route("/api/picture", post(routes::estimate::picture))
        .route("/api/report.html", post(routes::estimate::report_html))
        .route("/api/inspect", post(routes::catalog::inspect))
        .route(
            "/api/analyze",
            post(routes::measure::analyze).layer(upload_limit),
        )
        .route(
            "/api/compare",
            post(routes::measure::compare).layer(upload_limit),
        )
        .route("/api/plan", post(routes::plan::plan))
        .route(
            "/api/upload-model",
            post(uploads::upload_model).layer(DefaultBodyLimit::max(MODEL_UPLOAD_LIMIT)),
        )
        .route("/api/models", get(routes::catalog::models))
        .route("/api/gpus", get(routes::catalog::gpus))
        .fallback(assets::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), guard::guard))
        .with_state(state)
}
