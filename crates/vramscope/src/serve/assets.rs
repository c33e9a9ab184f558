//! The page, its scripts and its style: compiled in and served from a fixed table, so there is
//! no file path to traverse; anything else is a JSON 404.

use super::api_error::ApiError;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../../assets/index.html");
/// The page's classic scripts, in the order `index.html` loads them (they share one global
/// scope; `app.js`, last, starts the page): (path, source).
pub const SCRIPTS: [(&str, &str); 13] = [
    ("/pipeline.js", include_str!("../../assets/pipeline.js")),
    ("/units.js", include_str!("../../assets/units.js")),
    ("/dom.js", include_str!("../../assets/dom.js")),
    ("/form.js", include_str!("../../assets/form.js")),
    ("/request.js", include_str!("../../assets/request.js")),
    ("/report.js", include_str!("../../assets/report.js")),
    ("/advice.js", include_str!("../../assets/advice.js")),
    (
        "/measurement.js",
        include_str!("../../assets/measurement.js"),
    ),
    ("/files.js", include_str!("../../assets/files.js")),
    ("/fit.js", include_str!("../../assets/fit.js")),
    ("/whatif.js", include_str!("../../assets/whatif.js")),
    ("/plan.js", include_str!("../../assets/plan.js")),
    ("/app.js", include_str!("../../assets/app.js")),
];
const STYLE_CSS: &str = include_str!("../../assets/style.css");

/// Only our own scripts and styles; the picture's inline SVG needs `style-src 'unsafe-inline'`
/// for its presentation attributes only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'";

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

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// A route for each of [`SCRIPTS`].
pub fn scripts<S: Clone + Send + Sync + 'static>(mut router: Router<S>) -> Router<S> {
    for (path, body) in SCRIPTS {
        router = router.route(
            path,
            get(move || async move { asset("text/javascript; charset=utf-8", body) }),
        );
    }
    router
}

pub async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

pub async fn not_found(req: Request) -> ApiError {
    let path: String = req.uri().path().chars().take(200).collect();
    ApiError(StatusCode::NOT_FOUND, format!("no such path: {path}"))
}
