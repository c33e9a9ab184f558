//! The one HTTP path: GET with an optional byte range, redirects followed by hand (at most
//! [`MAX_REDIRECTS`]; `Range` kept, `Authorization` sent only to the endpoint's own host, as
//! `huggingface_hub` does when the Hub answers a large file with a 302 to its CDN), every body
//! read through a hard byte bound, every request under a time bound, each request and its bytes
//! counted (and printed with `--verbose`).

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use ureq::Agent;

/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

/// Why a request gave no usable body.
#[derive(Debug)]
pub enum HttpError {
    /// The server answered with an error status; `code`/`message` are the Hub's `X-Error-Code`
    /// and `X-Error-Message` headers.
    Status {
        status: u16,
        code: Option<String>,
        message: Option<String>,
        url: String,
    },
    /// DNS, refused connection, TLS: nothing reached.
    Unreachable(String),
    /// No answer (or no end of the body) within the time bound.
    Timeout(Duration),
    /// More than [`MAX_REDIRECTS`] redirects, or a redirect without a usable `Location`.
    Redirects(String),
    /// The body was longer than the bound.
    TooLarge { url: String, limit: u64 },
}

/// A body as fetched.
#[derive(Debug, Clone)]
pub struct Got {
    pub body: Vec<u8>,
    /// The whole file's size: `Content-Range`'s total for a 206, `Content-Length` for a 200.
    pub total: Option<u64>,
    /// `X-Repo-Commit`, when the Hub sends it.
    pub commit: Option<String>,
}

pub struct Client {
    agent: Agent,
    endpoint_host: String,
    token: Option<String>,
    timeout: Duration,
    pub verbose: bool,
    bytes: AtomicU64,
    requests: AtomicU64,
}

/// `scheme://host[:port]` of a URL.
pub fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// A `Location` header made absolute against the URL it answered.
fn absolute(base: &str, location: &str) -> Option<String> {
    if location.starts_with("https://") || location.starts_with("http://") {
        Some(location.to_string())
    } else if location.starts_with('/') {
        Some(format!("{}{location}", origin(base)))
    } else {
        None
    }
}

/// `bytes a-b/TOTAL` → TOTAL.
fn content_range_total(v: &str) -> Option<u64> {
    v.rsplit_once('/')?.1.trim().parse().ok()
}

impl Client {
    pub fn new(endpoint: &str, token: Option<String>, timeout: Duration, verbose: bool) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_connect(Some(timeout))
            .timeout_global(Some(timeout))
            .proxy(ureq::Proxy::try_from_env())
            .build();
        Client {
            agent: config.into(),
            endpoint_host: origin(endpoint).to_string(),
            token,
            timeout,
            verbose,
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// Bytes of bodies received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Requests sent so far (redirect hops included).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// GETs `url` (bytes `range.0..=range.1` when given), reading at most `limit` body bytes.
    pub fn get(&self, url: &str, range: Option<(u64, u64)>, limit: u64) -> Result<Got, HttpError> {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.agent.get(&url).header(
                "User-Agent",
                concat!("vramscope/", env!("CARGO_PKG_VERSION")),
            );
            if let Some((a, b)) = range {
                req = req.header("Range", &format!("bytes={a}-{b}"));
            }
            if let Some(t) = self
                .token
                .as_deref()
                .filter(|_| origin(&url) == self.endpoint_host)
            {
                req = req.header("Authorization", &format!("Bearer {t}"));
            }
            self.requests.fetch_add(1, Ordering::Relaxed);
            let resp = req.call().map_err(|e| self.transport_error(&url, e))?;
            let status = resp.status().as_u16();
            let header = |k: &str| {
                resp.headers()
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            if (300..400).contains(&status) {
                let next = header("location")
                    .and_then(|l| absolute(&url, &l))
                    .ok_or_else(|| {
                        HttpError::Redirects(format!("{url}: {status} without a usable Location"))
                    })?;
                self.log(&url, range, status, 0);
                url = next;
                continue;
            }
            if !(200..300).contains(&status) {
                self.log(&url, range, status, 0);
                return Err(HttpError::Status {
                    status,
                    code: header("x-error-code"),
                    message: header("x-error-message"),
                    url,
                });
            }
            let total = match (status, header("content-range")) {
                (206, Some(cr)) => content_range_total(&cr),
                _ => header("content-length").and_then(|l| l.trim().parse().ok()),
            };
            let commit = header("x-repo-commit");
            let body = self.read_body(resp.into_body(), &url, limit)?;
            self.log(&url, range, status, body.len() as u64);
            return Ok(Got {
                body,
                total,
                commit,
            });
        }
        Err(HttpError::Redirects(format!(
            "{url}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// At most `limit` bytes of the body (a range answer stops there; a longer plain answer is
    /// an error unless it was a range request the server ignored).
    fn read_body(&self, mut body: ureq::Body, url: &str, limit: u64) -> Result<Vec<u8>, HttpError> {
        let mut buf = Vec::new();
        let mut reader = body.as_reader().take(limit.saturating_add(1));
        let res = reader.read_to_end(&mut buf);
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        if let Err(e) = res {
            return Err(self.io_error(url, e));
        }
        if buf.len() as u64 > limit {
            return Err(HttpError::TooLarge {
                url: url.to_string(),
                limit,
            });
        }
        Ok(buf)
    }

    fn io_error(&self, url: &str, e: std::io::Error) -> HttpError {
        let text = e.to_string();
        if e.kind() == std::io::ErrorKind::TimedOut || text.to_ascii_lowercase().contains("timeout")
        {
            HttpError::Timeout(self.timeout)
        } else {
            HttpError::Unreachable(format!("{}: {text}", origin(url)))
        }
    }

    fn transport_error(&self, url: &str, e: ureq::Error) -> HttpError {
        match e {
            ureq::Error::Timeout(_) => HttpError::Timeout(self.timeout),
            ureq::Error::Io(io) => self.io_error(url, io),
            other => HttpError::Unreachable(format!("{}: {other}", origin(url))),
        }
    }

    fn log(&self, url: &str, range: Option<(u64, u64)>, status: u16, n: u64) {
        if self.verbose {
            let r = range
                .map(|(a, b)| format!(" [bytes {a}-{b}]"))
                .unwrap_or_default();
            eprintln!("hub: GET {url}{r} -> {status}, {n} bytes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_and_join() {
        assert_eq!(origin("https://hf.co:8080/a/b"), "https://hf.co:8080");
        assert_eq!(origin("http://127.0.0.1:5"), "http://127.0.0.1:5");
        assert_eq!(
            absolute("http://a:1/x/y", "/z").as_deref(),
            Some("http://a:1/z")
        );
        assert_eq!(absolute("http://a:1/x", "ftp://b").as_deref(), None);
        assert_eq!(content_range_total("bytes 0-7/123456"), Some(123456));
    }
}
