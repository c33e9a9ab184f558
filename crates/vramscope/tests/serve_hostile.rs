//! `vramscope serve` under the attacks of issue #35, on the real binary over loopback: a
//! request that once froze the server (a quadratic YAML `from`, a megabyte config through
//! `plan`) while other requests are answered; requests from another site's page refused with
//! 403 before any work; only JSON (or an upload's types) taken; `Connection: close` on the
//! answers after which the server closes. Bodies are built here.

mod common;
use common::http::{read_response, spawn_serve, Resp};
use serde_json::{json, Value};
use std::io::{BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The server process, killed when the test ends.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let (child, url) = spawn_serve(
        Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .env_remove("RUST_BACKTRACE")
            .env("HF_HUB_OFFLINE", "1"),
        &[],
    );
    let addr: SocketAddr = url.parse().unwrap();
    Server { child, addr }
}

/// One request with `headers` (beside Host and Content-Length) on a fresh connection; the
/// request is written on its own thread (a refused body may be cut off: RFC 9110 §15.5.14).
fn call(s: &Server, head: &str, headers: &[&str], body: &[u8]) -> Resp {
    let stream = TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(90)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut req = format!("{head} HTTP/1.1\r\nHost: {}\r\n", s.addr);
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    let writer = std::thread::spawn(move || match w.write_all(&bytes) {
        Err(e) if !matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => Err(e),
        _ => Ok(()),
    });
    let r = read_response(&mut BufReader::new(stream)).unwrap();
    writer.join().unwrap().unwrap();
    r
}

const JSON: &str = "Content-Type: application/json";

fn post_json(s: &Server, path: &str, body: &str) -> Resp {
    call(s, &format!("POST {path}"), &[JSON], body.as_bytes())
}

/// Issue #35 item 1 through the server: a `from` body of 240 kB (`zzz: -'` then 120,000
/// nested `[`) froze every connection for 27.5 s, and a 700 kB inline config kept `/api/plan`
/// busy past its 30 s deadline. While each is sent, a GPU list and an estimate on other
/// connections are answered within 10 s, and the hostile request itself within 30 s (a 400
/// for the YAML, the plan for the config).
#[test]
fn other_requests_are_answered_while_a_hostile_one_runs() {
    let s = start();
    let d = 120_000;
    let yaml = format!("zzz: -'\nyyy: {}{}\n", "[".repeat(d), "]".repeat(d));
    let from = json!({"from": [{"name": "q.yaml", "text": yaml}]}).to_string();
    let labels: serde_json::Map<String, Value> = (0..30_000)
        .map(|i| (i.to_string(), Value::from(format!("LABEL_{i}"))))
        .collect();
    let plan = json!({
        "model": {"hf_config": {
            "architectures": ["LlamaForSequenceClassification"], "model_type": "llama",
            "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
            "num_key_value_heads": 4, "num_hidden_layers": 22, "vocab_size": 32000,
            "max_position_embeddings": 2048, "id2label": labels,
        }},
        "gpu": "h100-80gb", "batch": 8, "seq": 1024, "parallel": {"gpus": 8},
    })
    .to_string();
    assert!(from.len() > 240_000 && plan.len() > 500_000);
    // A 1 MB gzip whose one event name inflates to 1 GiB (item 3): several seconds of gunzip
    // in a test build before its string limit refuses it.
    let bomb = name_bomb();
    std::thread::scope(|scope| {
        for (path, body, want) in [
            ("/api/from", from.as_bytes(), 400),
            ("/api/plan", plan.as_bytes(), 200),
            ("/api/analyze", &bomb[..], 400),
        ] {
            let t = Instant::now();
            let head = format!("POST {path}");
            let s = &s;
            let hostile = scope.spawn(move || call(s, &head, &[JSON], body));
            std::thread::sleep(Duration::from_millis(100));
            let u = Instant::now();
            assert_eq!(call(s, "GET /api/gpus", &[], b"").status, 200);
            let r = post_json(s, "/api/estimate", r#"{"model": "gpt2"}"#);
            assert_eq!(r.status, 200);
            assert!(
                u.elapsed() < Duration::from_secs(10),
                "{path}: {:?}",
                u.elapsed()
            );
            if path == "/api/analyze" {
                // 16 MiB of gunzip and scan in a test build take seconds; the others were
                // answered meanwhile.
                assert!(!hostile.is_finished(), "answered while the bomb was read");
            }
            let r = hostile.join().unwrap();
            assert_eq!(
                r.status,
                want,
                "{path}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{path}: {:?}",
                t.elapsed()
            );
            if path == "/api/from" {
                assert!(r.error().contains("invalid YAML"), "{}", r.error());
            }
            if path == "/api/analyze" {
                assert!(r.error().contains("JSON string longer"), "{}", r.error());
            }
        }
    });
}

/// A gzip member (RFC 1952) of a Chrome trace whose one event name is 1 GiB of `a`: the MiB
/// of `a` is deflated once (a full flush: byte-aligned, no reference back) and its block
/// repeated. The trailer's CRC is left 0: the reader must refuse the stream before it.
fn name_bomb() -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let block = |data: &[u8], flush| {
        let mut c = Compress::new(Compression::best(), false);
        let mut out = Vec::with_capacity(data.len() + 1024);
        c.compress_vec(data, &mut out, flush).unwrap();
        out
    };
    let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    gz.extend(block(
        b"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"",
        FlushCompress::Full,
    ));
    let mib = block(&vec![b'a'; 1 << 20], FlushCompress::Full);
    for _ in 0..1024 {
        gz.extend_from_slice(&mib);
    }
    gz.extend(block(b"\"}]}", FlushCompress::Finish));
    gz.extend_from_slice(&[0; 8]);
    assert!(gz.len() < 2 << 20);
    gz
}

/// Issue #35 item 4 through the server: `{"model": PATH}` naming a device or a directory
/// whose config.json is one read until memory ran out. A 400 naming the kind, within 10 s.
#[cfg(unix)]
#[test]
fn a_model_path_to_a_device_is_a_400() {
    let s = start();
    let dir = std::env::temp_dir().join(format!("vramscope-serve-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    let _ = std::fs::remove_file(&cfg);
    std::os::unix::fs::symlink("/dev/zero", &cfg).unwrap();
    for model in ["/dev/zero", cfg.to_str().unwrap()] {
        let t = Instant::now();
        let r = post_json(&s, "/api/estimate", &json!({"model": model}).to_string());
        assert_eq!(r.status, 400, "{model}");
        assert!(
            r.error().contains("a character device, not a regular file"),
            "{}",
            r.error()
        );
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

/// Issue #35 item 5: a page on another site could POST `text/plain` jobs and uploads. Now a
/// request whose `Origin` is not this server, or that the browser marks `Sec-Fetch-Site:
/// cross-site`, is 403, and no work is done: the refused upload took no id (the next one is
/// `upload:0/...`). A form's content types get 415; the server's own page and clients with no
/// `Origin` are answered.
#[test]
fn cross_site_requests_are_refused_before_any_work() {
    let s = start();
    let job = br#"{"model": "gpt2"}"#;
    let evil = "Origin: https://evil.example";
    // A safetensors header with no tensors (8-byte length, then `{}`), as an upload.
    let mut st = 2u64.to_le_bytes().to_vec();
    st.extend_from_slice(b"{}");
    let upload = "POST /api/upload-model?name=m.safetensors";
    for (head, headers, body) in [
        (
            "POST /api/estimate",
            vec![evil, "Content-Type: text/plain"],
            &job[..],
        ),
        ("POST /api/estimate", vec![evil, JSON], &job[..]),
        ("POST /api/estimate", vec!["Origin: null", JSON], &job[..]),
        (
            "POST /api/estimate",
            vec!["Sec-Fetch-Site: cross-site", JSON],
            &job[..],
        ),
        (
            "GET /api/models",
            vec!["Sec-Fetch-Site: same-site"],
            &b""[..],
        ),
        (upload, vec![evil, "Content-Type: text/plain"], &st[..]),
        (upload, vec![evil], &st[..]),
    ] {
        let r = call(&s, head, &headers, body);
        assert_eq!(r.status, 403, "{head} {headers:?}");
        assert!(
            r.error().starts_with("cross-site request refused"),
            "{}",
            r.error()
        );
    }
    for (head, ct) in [
        ("POST /api/estimate", "Content-Type: text/plain"),
        (
            "POST /api/estimate",
            "Content-Type: application/x-www-form-urlencoded",
        ),
        (upload, "Content-Type: multipart/form-data; boundary=x"),
    ] {
        let r = call(&s, head, &[ct], job);
        assert_eq!(r.status, 415, "{head} {ct}");
        assert!(r.error().contains("application/json"), "{}", r.error());
    }
    let own = format!("Origin: http://{}", s.addr);
    let r = call(
        &s,
        "POST /api/estimate",
        &[&own, "Sec-Fetch-Site: same-origin", JSON],
        job,
    );
    assert_eq!(r.status, 200);
    let r = call(
        &s,
        upload,
        &[&own, "Content-Type: application/octet-stream"],
        &st,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["model"], "upload:0/m.safetensors");
}

/// Issue #35 item 7: after a 413 or a 405 on a request with a body the server closes the
/// connection; it now says so (`Connection: close`), and a 200 keeps it open.
#[test]
fn answers_after_which_the_server_closes_say_so() {
    let s = start();
    let big = vec![b' '; (1 << 20) + 1];
    let r = call(&s, "POST /api/estimate", &[JSON], &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.header("connection"), Some("close"));
    let r = call(&s, "PUT /api/estimate", &[JSON], br#"{"model": "gpt2"}"#);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("connection"), Some("close"));
    let r = call(
        &s,
        "POST /api/estimate",
        &["Origin: https://evil.example", JSON],
        b"{}",
    );
    assert_eq!(r.header("connection"), Some("close"));
    // Two requests on one connection: the first's answer keeps it open.
    let stream = TcpStream::connect(s.addr).unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut rd = BufReader::new(stream);
    for _ in 0..2 {
        let body = r#"{"model": "gpt2"}"#;
        let req = format!(
            "POST /api/estimate HTTP/1.1\r\nHost: {}\r\n{JSON}\r\nContent-Length: {}\r\n\r\n{body}",
            s.addr,
            body.len()
        );
        w.write_all(req.as_bytes()).unwrap();
        let r = read_response(&mut rd).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), None);
    }
}
