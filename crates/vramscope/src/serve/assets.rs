//! The page, its script and its style: compiled in and served from a fixed table, so there is
//! no file path to traverse; anything else is a JSON 404.

use super::api_error::ApiError;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const PIPELINE_JS: &str = include_str!("../../assets/pipeline.js");
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

pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn pipeline_js() -> Response {
    asset("text/javascript; charset=utf-8", PIPELINE_JS)
}

pub async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

pub async fn not_found(req: Request) -> ApiError {
    let path: String = req.uri().path().chars().take(200).collect();
    ApiError(StatusCode::NOT_FOUND, format!("no such path: {path}"))
}
