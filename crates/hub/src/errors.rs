//! One actionable line for each way reaching the Hub can fail (exit 2).

use crate::http::HttpError;
use vramscope_formats::FormatError;

/// What the failing request was for.
pub struct Ctx<'a> {
    pub endpoint: &'a str,
    pub repo: &'a str,
    pub revision: &'a str,
    /// The file asked for; `None` for the repo listing (the API).
    pub file: Option<&'a str>,
    pub has_token: bool,
}

/// A server-sent message made safe for one line of our output.
fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    if s.chars().count() > 200 {
        out.push('…');
    }
    out
}

fn remote(s: String) -> FormatError {
    FormatError::Remote(s)
}

const OFFLINE_HINT: &str =
    "set HF_HUB_OFFLINE=1 to use the cache only, or pass a local config.json";

/// The one-line error for a failed request.
pub fn http_error(e: HttpError, c: &Ctx) -> FormatError {
    let ep = c.endpoint;
    match e {
        HttpError::Unreachable(d) => FormatError::Unreachable(format!(
            "cannot reach HF_ENDPOINT {ep} ({}); {OFFLINE_HINT}",
            clean(&d)
        )),
        HttpError::Timeout(t) => FormatError::Unreachable(format!(
            "HF_ENDPOINT {ep} did not answer within {} s (timeout); {OFFLINE_HINT}",
            t.as_secs_f64()
        )),
        HttpError::Redirects(d) => remote(format!(
            "{}; the server is redirecting in a loop or badly",
            clean(&d)
        )),
        HttpError::TooLarge { url, limit } => remote(format!(
            "{}: the server sent more than {limit} bytes where a header or config was expected; \
             refused",
            clean(&url)
        )),
        HttpError::Status {
            status,
            code,
            message,
            url,
        } => status_error(status, code.as_deref(), message.as_deref(), &url, c),
    }
}

fn status_error(
    status: u16,
    code: Option<&str>,
    message: Option<&str>,
    url: &str,
    c: &Ctx,
) -> FormatError {
    let (ep, repo) = (c.endpoint, c.repo);
    let said = message
        .map(|m| format!(" (the Hub says: {})", clean(m)))
        .unwrap_or_default();
    match code {
        Some("GatedRepo") if c.has_token => remote(format!(
            "{repo} is gated and the token given (HF_TOKEN or the token file) has no access: \
             accept its license on the model page {ep}/{repo} with that account{said}"
        )),
        Some("GatedRepo") => remote(format!(
            "{repo} is gated: accept its license on the model page {ep}/{repo}, then set \
             HF_TOKEN{said}"
        )),
        Some("RevisionNotFound") => remote(format!(
            "{repo}: no revision '{}' (branch, tag or commit) on {ep}",
            c.revision
        )),
        Some("EntryNotFound") => remote(format!(
            "{repo}@{}: no file {} in the repo",
            c.revision,
            c.file.unwrap_or("?")
        )),
        _ if message == Some("Invalid credentials in Authorization header") => remote(format!(
            "{ep} refused the token in HF_TOKEN (or the token file): invalid credentials; fix \
             or unset it"
        )),
        Some("RepoNotFound") => not_found(c),
        _ if status == 401 && c.file.is_none() => not_found(c),
        _ if status == 404 && c.file.is_none() => not_found(c),
        _ if status == 404 => remote(format!(
            "{repo}@{}: no file {} in the repo",
            c.revision,
            c.file.unwrap_or("?")
        )),
        _ => remote(format!("{}: HTTP {status}{said}", clean(url))),
    }
}

fn not_found(c: &Ctx) -> FormatError {
    let hint = if c.has_token {
        ""
    } else {
        " (a private repo answers so without a token: set HF_TOKEN)"
    };
    remote(format!(
        "{}: no such model repository on {}{hint}",
        c.repo, c.endpoint
    ))
}
