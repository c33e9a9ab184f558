//! Requests another site's page sent are refused before any work: the server answers only its
//! own page and clients that are no browser page (curl, scripts, the tests).
//!
//! A browser marks what a page sends: `Origin` on every cross-origin request and every POST
//! (the Fetch standard, "append a request `Origin` header"), and `Sec-Fetch-Site`
//! (W3C Fetch Metadata: `same-origin`, `same-site`, `cross-site`, or `none` for what the user
//! typed or opened). A page may send a "simple" cross-origin POST without asking first only
//! with a form's content types (`text/plain`, `application/x-www-form-urlencoded`,
//! `multipart/form-data`; Fetch's CORS-safelisted request headers); every other type makes the
//! browser ask (a preflight `OPTIONS`) and this server never allows it. So a POST must be JSON
//! (an upload: JSON, gzip or octet-stream, or no type at all as `fetch` sends a `File` of
//! unknown type), and a request whose `Origin` is not this server, or whose `Sec-Fetch-Site`
//! is not `same-origin` or `none`, gets 403.

use super::api_error::ApiError;
use axum::extract::Request;
use axum::http::{header, StatusCode};

/// 403 for a request a page of another origin sent.
pub fn same_origin(req: &Request) -> Result<(), ApiError> {
    let h = req.headers();
    let text = |name| h.get(name).map(|v| v.to_str().unwrap_or("?"));
    if let Some(site) = text("sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(cross_site(format!("Sec-Fetch-Site is {site:?}")));
        }
    }
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        let host = text(header::HOST.as_str()).unwrap_or("");
        if !origin_is_host(origin, host) {
            return Err(cross_site(format!(
                "Origin {origin:?} is not this server ({host:?})"
            )));
        }
    }
    Ok(())
}

/// Whether `origin` (`scheme://host[:port]`) names the server the request's `Host` names.
/// This server speaks plain HTTP, so its own page's origin is `http://` + Host.
fn origin_is_host(origin: &str, host: &str) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|o| !host.is_empty() && o.eq_ignore_ascii_case(host))
}

fn cross_site(why: String) -> ApiError {
    ApiError(
        StatusCode::FORBIDDEN,
        format!("cross-site request refused: {why}; this API answers only its own page and non-browser clients"),
    )
}

/// 415 unless a POST's `Content-Type` is one this route takes: `application/json` (any
/// parameters), and for an upload also gzip, `application/octet-stream` or none.
pub fn content_type(req: &Request, upload: bool) -> Result<(), ApiError> {
    let Some(v) = req.headers().get(header::CONTENT_TYPE) else {
        return if upload {
            Ok(())
        } else {
            Err(unsupported("none"))
        };
    };
    let raw = v.to_str().unwrap_or("?");
    let essence = raw
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let ok = essence == "application/json"
        || (upload
            && matches!(
                essence.as_str(),
                "application/octet-stream" | "application/gzip" | "application/x-gzip"
            ));
    if ok {
        Ok(())
    } else {
        Err(unsupported(raw))
    }
}

fn unsupported(got: &str) -> ApiError {
    ApiError(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "Content-Type {got:?} is not taken: send application/json (a measurement or model \
             file: application/octet-stream)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method("POST").uri("/api/estimate");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn own_page_and_non_browser_clients_pass() {
        for h in [
            vec![("host", "127.0.0.1:8765")],
            vec![
                ("host", "127.0.0.1:8765"),
                ("origin", "http://127.0.0.1:8765"),
            ],
            vec![("host", "localhost:80"), ("origin", "http://LOCALHOST:80")],
            vec![("host", "127.0.0.1:1"), ("sec-fetch-site", "same-origin")],
            vec![("host", "127.0.0.1:1"), ("sec-fetch-site", "none")],
        ] {
            assert!(same_origin(&req(&h)).is_ok(), "{h:?}");
        }
    }

    #[test]
    fn other_sites_pages_get_403() {
        for h in [
            vec![
                ("host", "127.0.0.1:8765"),
                ("origin", "https://evil.example"),
            ],
            vec![
                ("host", "127.0.0.1:8765"),
                ("origin", "http://127.0.0.1:9999"),
            ],
            vec![
                ("host", "127.0.0.1:8765"),
                ("origin", "https://127.0.0.1:8765"),
            ],
            vec![("host", "127.0.0.1:8765"), ("origin", "null")],
            vec![("host", "127.0.0.1:1"), ("sec-fetch-site", "cross-site")],
            vec![("host", "127.0.0.1:1"), ("sec-fetch-site", "same-site")],
        ] {
            let e = same_origin(&req(&h)).unwrap_err();
            assert_eq!(e.0, StatusCode::FORBIDDEN, "{h:?}");
        }
    }

    #[test]
    fn only_json_or_an_uploads_types() {
        let ct = |v: &str| req(&[("content-type", v)]);
        assert!(content_type(&ct("application/json"), false).is_ok());
        assert!(content_type(&ct("Application/JSON; charset=utf-8"), false).is_ok());
        assert!(content_type(&req(&[]), true).is_ok());
        assert!(content_type(&ct("application/octet-stream"), true).is_ok());
        assert!(content_type(&ct("application/gzip"), true).is_ok());
        // The three a form (or a simple cross-origin fetch) can send, and none for a job.
        for t in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            for upload in [false, true] {
                let e = content_type(&ct(t), upload).unwrap_err();
                assert_eq!(e.0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{t}");
            }
        }
        assert!(content_type(&req(&[]), false).is_err());
        assert!(content_type(&ct("application/octet-stream"), false).is_err());
    }
}
