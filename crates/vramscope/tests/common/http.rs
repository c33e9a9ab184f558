//! A raw HTTP/1.1 client's reading side for the tests that drive `vramscope serve` over
//! loopback byte by byte (`serve.rs`, `serve_hostile.rs`): one Content-Length framed response.
#![allow(dead_code)] // Not every test binary that includes `common` talks to the server.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// Checks the response is a 200 whose Content-Type starts with `content_type` (else a
    /// panic naming `what` and the body).
    pub fn assert_ok(&self, content_type: &str, what: &str) {
        assert_eq!(self.status, 200, "{what}: {}", self.text());
        let got = self.header("content-type").unwrap_or("");
        assert!(got.starts_with(content_type), "{what}: Content-Type {got}");
    }
    /// The one-line cause of a 4xx.
    pub fn error(&self) -> String {
        let v = self.json();
        let e = v["error"].as_str().expect("{\"error\": ...}").to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }
}

/// Reads one response (Content-Length framed, as the server always answers).
pub fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<Resp> {
    let mut status_line = String::new();
    r.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// POSTs `body` as JSON to `path` of the server at `addr` (`host:port`) on a fresh connection
/// that the request closes, and reads the response.
pub fn post_json(addr: &str, path: &str, body: &str) -> Resp {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    read_response(&mut BufReader::new(stream)).unwrap()
}

/// `vramscope serve --port 0` started from `cmd` (its stdout piped here, its stderr dropped),
/// and the `host:port` of the first line it prints ("vramscope serve: http://HOST:PORT/").
/// `extra` goes after those flags.
pub fn spawn_serve(
    cmd: &mut std::process::Command,
    extra: &[&str],
) -> (std::process::Child, String) {
    let mut child = cmd
        .args(["serve", "--port", "0"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start vramscope serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit("http://").next().unwrap();
    let addr = addr.trim_end_matches('/').to_string();
    assert!(!addr.is_empty(), "no URL in {line:?}");
    (child, addr)
}
