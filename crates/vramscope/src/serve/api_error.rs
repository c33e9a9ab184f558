//! The server's error answer ([`ApiError`]): the type every handler, guard and the pool
//! return. A leaf.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// A 4xx/5xx answer: `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub fn bad(msg: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, msg.into().replace('\n', " "))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // JSON escapes C0 controls on the wire, but a client prints the decoded text: the
        // message carries them escaped as the CLI prints them.
        let error = crate::app::escape_controls(&self.1);
        let body = serde_json::json!({ "error": error }).to_string() + "\n";
        (
            self.0,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body,
        )
            .into_response()
    }
}

pub type ApiResult = Result<Response, ApiError>;
