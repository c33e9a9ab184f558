//! What every request passes before and after its route: on a loopback bind the `Host` header
//! must name the loopback (so a web page cannot reach the API through DNS rebinding); a
//! request another site's page sent (`Origin` not this server, `Sec-Fetch-Site` other than
//! `same-origin` / `none`) gets 403 before anything is read; a POST's `Content-Type` must be
//! JSON (an upload's: JSON, gzip, octet-stream or none), so no HTML form can send one; bodies
//! over their route's limit get 413 before they are read (by `Content-Length`) or as soon as
//! they pass it (chunked, `request::body_bytes`); at most `MAX_UPLOADS` measurement uploads at
//! once (503 beyond), so memory stays bounded by about `MAX_UPLOADS × UPLOAD_LIMIT`; each
//! request has `REQUEST_TIMEOUT`; answers carry `nosniff` and `no-store`, and `Connection:
//! close` when the server closes the connection after them (a body it did not read).

use super::api_error::ApiError;
use super::{App, BODY_LIMIT, MAX_UPLOADS, MODEL_UPLOAD_LIMIT, REQUEST_TIMEOUT, UPLOAD_LIMIT};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The routes that take a measurement or a model file, with the larger body limits.
fn is_upload(path: &str) -> bool {
    matches!(path, "/api/analyze" | "/api/compare" | "/api/upload-model")
}

/// The body limit of the route at `path`.
pub fn limit_of(path: &str) -> usize {
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

/// Host check, early 413, upload slot, timeout and response headers for every request.
pub async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    if let Err(refused) = admit(&app, &req) {
        // Refused before its body is read: the connection cannot carry another request.
        return closing(refused.into_response(), has_body(&req));
    }
    // Held until the answer is built: the body is read inside `next.run`.
    let _slot = match upload_slot(&app, &req) {
        Ok(slot) => slot,
        Err(busy) => return closing(busy.into_response(), has_body(&req)),
    };
    let path: String = req.uri().path().chars().take(200).collect();
    let method = req.method().clone();
    let has_body = has_body(&req);
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
        resp = method_not_allowed(&path, &method).into_response();
    }
    if closes(resp.status(), has_body) {
        return closing(resp, true);
    }
    finish(resp)
}

/// `resp` with the common headers, and `Connection: close` when the request's body is left
/// unread (hyper then closes the connection).
fn closing(mut resp: Response, unread_body: bool) -> Response {
    if unread_body || resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    finish(resp)
}

/// The headers every answer carries.
fn finish(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The checks made before anything is read: the `Host` of a loopback bind, and a declared
/// `Content-Length` over the route's limit.
fn admit(app: &App, req: &Request) -> Result<(), ApiError> {
    if app.loopback {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        if !loopback_host(host) {
            return Err(ApiError(
                StatusCode::FORBIDDEN,
                format!("Host {host:?} is not this machine's loopback (use http://127.0.0.1 or http://localhost)"),
            ));
        }
    }
    super::origin::same_origin(req)?;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limit = limit_of(req.uri().path());
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        return Err(too_large(Some(n), limit));
    }
    if req.method() == Method::POST {
        super::origin::content_type(req, is_upload(req.uri().path()))?;
    }
    Ok(())
}

/// Whether the request came with a body (declared, or chunked).
fn has_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// Answers after which hyper closes the connection: a 413 (the body was refused part-read),
/// and a refusal or timeout of a request whose body was not read (405, 408, 503). Saying so
/// (RFC 9112 §9.6) lets the client open a new connection instead of failing its next request.
fn closes(status: StatusCode, has_body: bool) -> bool {
    status == StatusCode::PAYLOAD_TOO_LARGE
        || (has_body
            && matches!(
                status,
                StatusCode::METHOD_NOT_ALLOWED
                    | StatusCode::REQUEST_TIMEOUT
                    | StatusCode::SERVICE_UNAVAILABLE
            ))
}

/// A slot for an upload's POST (none needed for other requests), or 503 when all are taken.
fn upload_slot(app: &App, req: &Request) -> Result<Option<UploadSlot>, ApiError> {
    if !is_upload(req.uri().path()) || req.method() != Method::POST {
        return Ok(None);
    }
    if app.uploads.fetch_add(1, Ordering::SeqCst) >= MAX_UPLOADS {
        app.uploads.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("busy: {MAX_UPLOADS} measurements are being analyzed; try again"),
        ));
    }
    Ok(Some(UploadSlot(app.uploads.clone())))
}

/// axum's own 405 has no body: say which methods the route takes, as JSON. (axum adds its
/// `Allow` header outside this layer.)
fn method_not_allowed(path: &str, method: &Method) -> ApiError {
    let allowed = if path.starts_with("/api/") && !matches!(path, "/api/models" | "/api/gpus") {
        "POST"
    } else {
        "GET"
    };
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{path} does not take {method}; it takes {allowed}"),
    )
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

/// 413, naming the limit (and the declared size when there was one).
pub fn too_large(n: Option<u64>, limit: usize) -> ApiError {
    let got = n.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    ApiError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body too large{got}: the limit is {limit} bytes"),
    )
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
