//! `vramscope serve` from outside: the real binary on 127.0.0.1 (port 0), spoken to with a
//! plain HTTP/1.1 client over `TcpStream`. The API answers exactly what the CLI prints; hostile
//! requests get a 4xx with `{"error": ...}` and the server keeps answering; a bounded load test
//! on loopback ends with zero errors and flat memory.

mod common;
use common::http::{read_response, spawn_serve, Resp};
use common::shared;

use serde_json::Value;
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
        // SIGTERM first, so the server removes its uploads' directory; then SIGKILL.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let (child, url) = spawn_serve(
        Command::new(env!("CARGO_BIN_EXE_vramscope")).env_remove("RUST_BACKTRACE"),
        &[],
    );
    let addr: SocketAddr = url.parse().unwrap_or_else(|_| panic!("no URL in {url:?}"));
    assert!(addr.ip().is_loopback(), "binds loopback by default: {addr}");
    Server { child, addr }
}

/// A fresh connection to the server that gives up reading after `timeout_s`: the stream to
/// read the response from, and a clone to write the request on.
fn connect(s: &Server, timeout_s: u64) -> (TcpStream, TcpStream) {
    let stream = TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(timeout_s)))
        .unwrap();
    let w = stream.try_clone().unwrap();
    (stream, w)
}

fn request_text(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// One request on a fresh connection. The request is written on its own thread while the
/// response is read: a server that refuses a body as too large answers 413 and closes before
/// the body is all sent, so the write may end in a broken pipe or a reset, which is the
/// server's right (RFC 9110 §15.5.14) and not a failure of the request.
fn call(s: &Server, method: &str, path: &str, body: &[u8]) -> Resp {
    let (stream, mut w) = connect(s, 60);
    let req = request_text(method, path, body);
    let writer = std::thread::spawn(move || match w.write_all(&req) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => Ok(()),
        Err(e) => Err(e),
    });
    let r = read_response(&mut BufReader::new(stream)).unwrap();
    writer.join().unwrap().unwrap();
    r
}

fn post(s: &Server, path: &str, body: &str) -> Resp {
    call(s, "POST", path, body.as_bytes())
}

fn cli(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {:?}", out.stderr);
    out.stdout
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    common::temp_file("serve", name, text)
}

#[test]
fn api_answers_exactly_what_the_cli_prints() {
    let s = start();
    let jobs = [
        r#"{"model": "gpt2", "batch": 4, "seq": 512, "gpu": "t4-16gb"}"#,
        r#"{"model": "llama-3.1-8b", "task": "infer", "batch": 8, "seq": 1024, "new_tokens": 256, "gpu": "h100-80gb"}"#,
        r#"{"model": "llama-3.1-8b", "peft": {"method": "qlora", "rank": 16}, "gpu": "rtx4090-24gb"}"#,
        r#"{"model": {"params": 7.5e9}, "precision": "bf16-mixed"}"#,
    ];
    for (i, job) in jobs.iter().enumerate() {
        let file = temp_file(&format!("job{i}.json"), job);
        let f = file.to_str().unwrap();
        let r = post(&s, "/api/estimate", job);
        r.assert_ok("application/json", job);
        assert_eq!(
            r.text(),
            String::from_utf8(cli(&["estimate", "--job", f, "--json"])).unwrap(),
            "{job}"
        );
        if job.contains("gpu") && !job.contains("params") {
            let r = post(&s, "/api/fit", job);
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.body, cli(&["fit", "--job", f, "--json"]), "fit {job}");
        }
    }
    let r = post(&s, "/api/inspect", r#"{"model": "gpt2"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, cli(&["inspect", "gpt2", "--json"]));
    // gpt2's published size (openai-community/gpt2 model card: 124M; 124,439,808 with tied
    // embeddings counted once).
    assert_eq!(r.json()["model"]["params_total"], 124_439_808);
    let r = call(&s, "GET", "/api/models", b"");
    assert_eq!(r.body, cli(&["models", "--json"]));
    let r = call(&s, "GET", "/api/gpus", b"");
    assert_eq!(r.body, cli(&["gpus", "--json"]));
}

#[test]
fn picture_page_and_assets() {
    let s = start();
    let r = call(&s, "GET", "/", b"");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let page = r.text();
    assert!(page.contains("/style.css"));
    // The page's classic scripts, in order: every script under assets/, `app.js` (which starts
    // the page) last, each served as JavaScript.
    let scripts: Vec<&str> = page
        .split("<script src=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    assert_eq!(scripts.last(), Some(&"/app.js"));
    let mut on_disk: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/assets"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".js"))
            .map(|n| format!("/{n}"))
            .collect();
    on_disk.sort();
    let mut named: Vec<String> = scripts.iter().map(|s| s.to_string()).collect();
    named.sort();
    assert_eq!(named, on_disk);
    for path in &scripts {
        let r = call(&s, "GET", path, b"");
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("text/javascript"),
            "{path}"
        );
    }
    // Nothing fetched from elsewhere: no absolute URLs in the UI's assets.
    for path in ["/", "/style.css"]
        .into_iter()
        .chain(scripts.iter().copied())
    {
        let t = call(&s, "GET", path, b"").text();
        assert!(!t.contains("http://") && !t.contains("https://"), "{path}");
    }
    assert!(r.header("content-security-policy").is_some());
    let job = r#"{"model": "gpt2", "batch": 4, "gpu": "t4-16gb"}"#;
    let r = post(&s, "/api/picture", job);
    r.assert_ok("image/svg+xml", "/api/picture");
    let f = temp_file("pic.json", job);
    let out = temp_file("pic.svg", "");
    cli(&[
        "estimate",
        "--job",
        f.to_str().unwrap(),
        "--svg",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r.text(), std::fs::read_to_string(&out).unwrap());
    let r = post(&s, "/api/report.html", job);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("<svg"));
    let r = post(&s, "/api/whatif", job);
    assert_eq!(r.status, 200);
    assert!(r.json().as_array().is_some_and(|a| !a.is_empty()));
}

#[test]
fn hostile_requests_get_a_clear_4xx_and_the_server_stays_up() {
    let s = start();
    // 100 MB body: refused by its Content-Length, before it is read.
    {
        let (stream, mut w) = connect(&s, 30);
        let n = 100_000_000usize;
        w.write_all(
            format!(
                "POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {n}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        // Keep sending in the background; the server may close before it has all.
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..(n >> 20) {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let r = read_response(&mut BufReader::new(stream)).unwrap();
        assert_eq!(r.status, 413, "{}", r.text());
        assert!(r.error().contains("too large"), "{}", r.error());
        let _ = writer.join();
    }
    // Chunked (no Content-Length) past the limit: 413 once the limit is passed.
    {
        let (stream, mut w) = connect(&s, 30);
        w.write_all(
            b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Transfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b' '; 1 << 16];
            for _ in 0..64 {
                let head = format!("{:x}\r\n", chunk.len());
                if w.write_all(head.as_bytes())
                    .and_then(|_| w.write_all(&chunk))
                    .and_then(|_| w.write_all(b"\r\n"))
                    .is_err()
                {
                    break;
                }
            }
            let _ = w.write_all(b"0\r\n\r\n");
        });
        let r = read_response(&mut BufReader::new(stream)).unwrap();
        assert_eq!(r.status, 413, "{}", r.text());
        let _ = writer.join();
    }
    let r = post(&s, "/api/estimate", "{\"model\": \"gpt2\", ");
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("invalid job"), "{}", r.error());
    let r = post(&s, "/api/estimate", r#"{"model": "gpt2", "batch": 1e18}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("batch"), "{}", r.error());
    let r = post(&s, "/api/estimate", r#"{"model": "gpt2", "bacth": 2}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("bacth"), "{}", r.error());
    let r = post(&s, "/api/estimate", "");
    assert_eq!(r.status, 400);
    let r = call(&s, "POST", "/api/estimate", &[0xff, 0xfe, b'{']);
    assert_eq!(r.status, 400);
    let r = post(&s, "/api/estimate", r#"{"model": "no-such-model-xyz"}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("no-such-model-xyz"), "{}", r.error());
    let r = post(&s, "/api/inspect", r#"{"model": "--help"}"#);
    assert_eq!(r.status, 400);
    let r = post(&s, "/api/fit", r#"{"model": "gpt2"}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("gpu"), "{}", r.error());
    for path in [
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/app.js/../../Cargo.toml",
        "/assets/..%2f..%2fCargo.toml",
        "/..\\..\\Cargo.toml",
        "/src/serve/mod.rs",
    ] {
        let r = call(&s, "GET", path, b"");
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert!(r.error().starts_with("no such path"), "{path}");
        assert!(!r.text().contains("root:"), "{path}");
    }
    // A page on another name that resolves here (DNS rebinding) cannot use the API.
    let stream = TcpStream::connect(s.addr).unwrap();
    let mut w = stream.try_clone().unwrap();
    w.write_all(b"GET /api/gpus HTTP/1.1\r\nHost: attacker.example:8765\r\n\r\n")
        .unwrap();
    let r = read_response(&mut BufReader::new(stream)).unwrap();
    assert_eq!(r.status, 403);
    // Still serving.
    let r = post(&s, "/api/estimate", r#"{"model": "gpt2"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Resident memory of a process in KiB (Linux), if readable.
fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `total` estimate requests spread over `conns` keep-alive connections; returns
/// (errors, per-request latencies, wall time).
fn load(s: &Server, total: usize, conns: usize) -> (usize, Vec<Duration>, Duration) {
    let addr = s.addr;
    let start = Instant::now();
    let threads: Vec<_> = (0..conns)
        .map(|c| {
            let n = total / conns + usize::from(c < total % conns);
            std::thread::spawn(move || {
                let body = format!(
                    r#"{{"model": "llama-3.1-8b", "batch": {}, "seq": 2048, "gpu": "h100-80gb"}}"#,
                    1 + c % 4
                );
                let req = request_text("POST", "/api/estimate", body.as_bytes());
                let mut errors = 0;
                let mut lat = Vec::with_capacity(n);
                let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
                for _ in 0..n {
                    let t = Instant::now();
                    if conn.is_none() {
                        let st = TcpStream::connect(addr).unwrap();
                        st.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                        conn = Some((st.try_clone().unwrap(), BufReader::new(st)));
                    }
                    let (w, r) = conn.as_mut().unwrap();
                    let ok = w
                        .write_all(&req)
                        .and_then(|_| read_response(r))
                        .map(|resp| resp.status == 200 && resp.body.len() > 100);
                    if !matches!(ok, Ok(true)) {
                        errors += 1;
                        conn = None;
                    }
                    lat.push(t.elapsed());
                }
                (errors, lat)
            })
        })
        .collect();
    let mut errors = 0;
    let mut lat = Vec::new();
    for t in threads {
        let (e, l) = t.join().unwrap();
        errors += e;
        lat.extend(l);
    }
    (errors, lat, start.elapsed())
}

/// Bounded load on loopback: zero errors, memory flat between two equal rounds. The count is
/// `VRAMSCOPE_LOAD_REQUESTS` (default 2,000 per round so debug test runs stay short; the
/// BENCHMARKS.md figures use 10,000 on a release build).
#[test]
fn keeps_serving_under_concurrent_load() {
    let s = start();
    let total: usize = std::env::var("VRAMSCOPE_LOAD_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let conns = 32;
    let (e1, _, _) = load(&s, total, conns);
    let rss1 = rss_kib(s.child.id());
    let (e2, mut lat, wall) = load(&s, total, conns);
    let rss2 = rss_kib(s.child.id());
    assert_eq!((e1, e2), (0, 0), "errors under load");
    lat.sort();
    let p50 = lat[lat.len() / 2];
    let p99 = lat[(lat.len() * 99).div_ceil(100) - 1];
    eprintln!(
        "load: {total} requests over {conns} connections in {:.2} s = {:.0} req/s; p50 {:.2} ms, \
         p99 {:.2} ms; RSS {rss1:?} -> {rss2:?} KiB",
        wall.as_secs_f64(),
        total as f64 / wall.as_secs_f64(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    if let (Some(a), Some(b)) = (rss1, rss2) {
        // A second identical round must not grow the server by more than 16 MiB (allocator
        // noise is far less; a leak of 8 KiB per request would pass it at 2,000 requests).
        assert!(b <= a + 16 * 1024, "RSS grew from {a} to {b} KiB");
    }
    // Still answering single requests afterwards.
    assert_eq!(call(&s, "GET", "/api/gpus", b"").status, 200);
}

/// A real profiler memory timeline (`../shared/fixtures/README.md` says how it was made).
fn fixture(name: &str) -> std::path::PathBuf {
    shared(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures")
            .join(name),
    )
}

/// RFC 4648 base64, written here so the test does not share the server's decoder.
fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[test]
fn analyze_compare_and_plan_answer_what_the_cli_prints() {
    let s = start();
    let rec = fixture("cpu_timeline.json");
    let rec_s = rec.to_str().unwrap();
    let bytes = std::fs::read(&rec).expect("../shared/fixtures/cpu_timeline.json");
    let r = call(&s, "POST", "/api/analyze", &bytes);
    assert_eq!(r.status, 200, "{}", r.text());
    let analysis_cli = cli(&["analyze", rec_s, "--json"]);
    assert_eq!(r.body, analysis_cli);
    let analysis = r.json();

    let job = r#"{"model": "gpt2", "batch": 2, "seq": 512, "gpu": "t4-16gb"}"#;
    let jf = temp_file("cmp-job.json", job);
    let body = format!(r#"{{"job": {job}, "measurement_b64": "{}"}}"#, b64(&bytes));
    let r = post(&s, "/api/compare", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.body,
        cli(&["compare", "--job", jf.to_str().unwrap(), rec_s, "--json"])
    );

    // The picture with the measurement: one measured rect per non-zero measured category,
    // carrying analyze's bytes, and the measured line with one point per timeline point.
    let r = post(&s, "/api/compare?picture=svg", &body);
    r.assert_ok("image/svg+xml", "/api/picture");
    let svg = r.text();
    let comps = analysis["per_gpu"]["components"].as_object().unwrap();
    let nonzero: Vec<(&String, u64)> = comps
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap()))
        .filter(|(_, v)| *v > 0)
        .collect();
    assert!(!nonzero.is_empty());
    assert_eq!(
        svg.matches("class=\"measured-segment\"").count(),
        nonzero.len(),
        "{svg}"
    );
    for (k, v) in &nonzero {
        assert!(
            svg.contains(&format!(
                "class=\"measured-segment\" data-category=\"{k}\" data-bytes=\"{v}\""
            )),
            "{k}"
        );
    }
    let points = analysis["timeline"].as_array().unwrap().len();
    assert!(
        svg.contains(&format!("data-points=\"{points}\"")),
        "{points}"
    );
    // The same picture from analyze's JSON instead of the record.
    let body2 = format!(r#"{{"job": {job}, "analysis": {analysis}}}"#);
    let r2 = post(&s, "/api/compare?picture=svg", &body2);
    assert_eq!(r2.status, 200, "{}", r2.text());
    assert_eq!(r2.text(), svg);

    let job = r#"{"model": "llama-3.1-8b", "batch": 1, "seq": 2048, "gpu": "h100-80gb", "parallel": {"gpus": 8}}"#;
    let jf = temp_file("plan-job.json", job);
    let r = post(&s, "/api/plan", job);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.body,
        cli(&["plan", "--job", jf.to_str().unwrap(), "--json"])
    );
}

#[test]
fn uploads_have_their_own_limit_and_errors_are_json() {
    let s = start();
    // 2 MiB is over the job routes' 1 MiB limit but within the upload limit: the record is
    // read, and refused for what it is, not for its size.
    let mut big = vec![b' '; 2 << 20];
    big.extend_from_slice(b"nonsense");
    let r = call(&s, "POST", "/api/analyze", &big);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().starts_with("measurement:"), "{}", r.error());
    let r = call(&s, "POST", "/api/estimate", &big);
    assert_eq!(r.status, 413);
    // Over 256 MiB by Content-Length: 413 before anything is read.
    let (stream, mut w) = connect(&s, 30);
    w.write_all(
        b"POST /api/analyze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 300000000\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(stream)).unwrap();
    assert_eq!(r.status, 413);
    assert!(
        r.error().contains(&(256u64 << 20).to_string()),
        "{}",
        r.error()
    );
    // Empty and malformed bodies.
    assert_eq!(call(&s, "POST", "/api/analyze", b"").status, 400);
    let r = post(
        &s,
        "/api/compare",
        r#"{"job": {"model": "gpt2"}, "measurement_b64": "!!"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("measurement_b64"), "{}", r.error());
    let r = post(
        &s,
        "/api/compare",
        r#"{"job": {"model": "gpt2"}, "measurement_b64": "e30="}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        !r.error().contains("vramscope-serve-"),
        "no temp path: {}",
        r.error()
    );
    let r = post(&s, "/api/compare", r#"{"measurement_b64": "e30="}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("job"), "{}", r.error());
    let r = post(
        &s,
        "/api/compare?picture=png",
        r#"{"job": {"model": "gpt2"}, "analysis": {}}"#,
    );
    assert_eq!(r.status, 400);
    let r = post(&s, "/api/plan", r#"{"model": "gpt2", "batch": 0}"#);
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("batch"), "{}", r.error());
    // Wrong method on a known route: 405 with a JSON cause naming the right one.
    let r = call(&s, "GET", "/api/estimate", b"");
    assert_eq!(r.status, 405);
    assert!(r.error().contains("POST"), "{}", r.error());
    let r = call(&s, "POST", "/api/gpus", b"{}");
    assert_eq!(r.status, 405);
    assert!(r.error().contains("GET"), "{}", r.error());
    assert!(r.header("allow").is_some());
    assert_eq!(
        post(&s, "/api/estimate", r#"{"model": "gpt2"}"#).status,
        200
    );
}

/// Sends `bytes` to `/api/upload-model?name=NAME`; the id it answers.
fn upload_model(s: &Server, name: &str, bytes: &[u8]) -> String {
    let r = call(s, "POST", &format!("/api/upload-model?name={name}"), bytes);
    assert_eq!(r.status, 200, "{name}: {}", r.text());
    r.json()["model"]
        .as_str()
        .expect("{\"model\": id}")
        .to_string()
}

#[test]
fn uploaded_model_files_and_headers_are_read_as_the_cli_reads_them() {
    let s = start();
    let gguf = fixture("tiny_llama_q8.gguf");
    let shard = fixture("hf_tiny_llama/model-00001-of-00005.safetensors");
    for (path, name) in [
        (&gguf, "tiny_llama_q8.gguf"),
        (&shard, "model-00001-of-00005.safetensors"),
    ] {
        let bytes = std::fs::read(path).expect("../shared/fixtures");
        let want: Value =
            serde_json::from_slice(&cli(&["inspect", path.to_str().unwrap(), "--json"])).unwrap();
        let want = &want["model"]["params_total"];
        assert!(want.as_u64().is_some_and(|n| n > 0), "{want}");
        let id = upload_model(&s, name, &bytes);
        assert!(
            !id.contains('/') || id.starts_with("upload:"),
            "an id, not a path: {id}"
        );
        let r = post(&s, "/api/inspect", &format!(r#"{{"model": "{id}"}}"#));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(&r.json()["model"]["params_total"], want, "{name}");
        let job = format!(r#"{{"model": "{id}", "task": "infer", "batch": 1, "seq": 64}}"#);
        let r = post(&s, "/api/estimate", &job);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Only the safetensors header (8 + N bytes, N the u64 LE at the start): the same count.
    let bytes = std::fs::read(&shard).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let id = upload_model(&s, "head.safetensors", &bytes[..8 + n]);
    let r = post(&s, "/api/inspect", &format!(r#"{{"model": "{id}"}}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    let want: Value =
        serde_json::from_slice(&cli(&["inspect", shard.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(
        r.json()["model"]["params_total"],
        want["model"]["params_total"]
    );
    // Ids the server never gave, and bodies that are no model.
    for bogus in ["upload:999/x.gguf", "upload:../../etc/passwd"] {
        let r = post(&s, "/api/inspect", &format!(r#"{{"model": "{bogus}"}}"#));
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error().contains("not an upload"), "{}", r.error());
        let r = post(&s, "/api/estimate", &format!(r#"{{"model": "{bogus}"}}"#));
        assert_eq!(r.status, 400, "{}", r.text());
    }
    let r = call(&s, "POST", "/api/upload-model?name=x.gguf", b"not a gguf");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(!r.error().contains("vramscope-serve-"), "{}", r.error());
    for name in ["../x.gguf", "x.txt", ".gguf", "a%20b.gguf"] {
        let r = call(
            &s,
            "POST",
            &format!("/api/upload-model?name={name}"),
            b"GGUF",
        );
        assert_eq!(r.status, 400, "{name}: {}", r.text());
    }
    // Over the 64 MiB cap (64 × 2^20 + 1 bytes by Content-Length): 413 before the body is read.
    let (stream, mut w) = connect(&s, 30);
    w.write_all(
        format!(
            "POST /api/upload-model?name=big.gguf HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Length: {}\r\n\r\n",
            (64u64 << 20) + 1
        )
        .as_bytes(),
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(stream)).unwrap();
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(
        r.error().contains(&(64u64 << 20).to_string()),
        "{}",
        r.error()
    );
    // 17 uploads: the first is evicted, the last still answers.
    let small = std::fs::read(&gguf).unwrap();
    let ids: Vec<String> = (0..17)
        .map(|i| upload_model(&s, &format!("m{i}.gguf"), &small))
        .collect();
    let r = post(&s, "/api/inspect", &format!(r#"{{"model": "{}"}}"#, ids[0]));
    assert_eq!(r.status, 400, "{}", r.text());
    let r = post(
        &s,
        "/api/inspect",
        &format!(r#"{{"model": "{}"}}"#, ids[16]),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn analyze_reads_an_engine_log_or_oom_message_as_the_cli_does() {
    let s = start();
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../measure/tests/fixtures/logs/torch-oom/torch2.1-capacty-fragmentation-lerf73.txt");
    let bytes = std::fs::read(&p).unwrap();
    let r = call(&s, "POST", "/api/analyze", &bytes);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, cli(&["analyze", p.to_str().unwrap(), "--json"]));
    assert_eq!(r.json()["source"], "torch-oom");
    let r = call(&s, "POST", "/api/analyze", b"just some words\n");
    assert_eq!(r.status, 400, "{}", r.text());
}

/// `/api/from` reads dropped training configs with `--from`'s readers: the resolved fields
/// (read off the files by hand) and the lines saying where each came from and what was
/// ignored; a file that is no training config is a 400 naming it.
#[test]
fn api_from_reads_training_configs_like_the_cli() {
    let s = start();
    let fixture = |p: &str| {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../formats/tests/fixtures/recipes")
                .join(p),
        )
        .unwrap()
    };
    let ds = fixture("deepspeed/transformers_ds_config_zero2.json");
    let body = serde_json::json!({"from": [{"name": "ds_zero2.json", "text": ds}]});
    let r = post(&s, "/api/from", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    // zero_optimization.stage 2 with offload_optimizer.device cpu; optimizer.type AdamW
    // (DeepSpeed's FusedAdam).
    assert_eq!(
        v["job"],
        serde_json::json!({"framework": "deepspeed", "optimizer": "adamw-fused",
                           "parallel": {"zero": 2, "offload": "optimizer"}})
    );
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes[0].starts_with("from ds_zero2.json (DeepSpeed config)"),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("train_micro_batch_size_per_gpu is \"auto\"")),
        "{notes:?}"
    );
    // The TRL GRPO recipe: task rl with its generator (use_vllm, vllm_device: TRL ≤ 0.16, so
    // not colocated; vllm_gpu_memory_utilization 0.7), 16 generations, 512 + 1024 tokens.
    let grpo = fixture("trl/openr1_qwen2.5-1.5b_grpo_config_demo.yaml");
    let body = serde_json::json!({"from": [{"name": "grpo.yaml", "text": grpo}]});
    let r = post(&s, "/api/from", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(v["job"]["task"], "rl");
    assert_eq!(v["job"]["rl"]["num_generations"], 16);
    assert_eq!(v["job"]["rl"]["generator"]["gpu_memory_utilization"], 0.7);
    assert_eq!(v["job"]["batch"], 16);
    // Not a training config.
    let body = serde_json::json!({"from": [{"name": "notes.yaml", "text": "- 1"}]});
    let r = post(&s, "/api/from", &body.to_string());
    assert_eq!(r.status, 400);
    assert!(r.text().contains("notes.yaml"), "{}", r.text());
}
