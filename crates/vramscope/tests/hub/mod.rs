//! A mock Hugging Face Hub served on loopback by the tests: the API listing
//! (`/api/models/{repo}/revision/{rev}`), `resolve` URLs with byte ranges, gated repos with the
//! Hub's `X-Error-Code` / `X-Error-Message` headers, a redirect of weight files to another host
//! (a CDN on another port), and hostile answers. Files are "virtual": their first bytes (a
//! header) are real, the rest reads as zeros, so a 16 GB checkpoint costs nothing to serve.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Req {
    pub path: String,
    pub range: Option<(u64, u64)>,
    pub auth: Option<String>,
}

#[derive(Clone)]
pub enum Body {
    Bytes(Vec<u8>),
    /// First bytes and the whole size.
    Virtual(Vec<u8>, u64),
    /// Never ends.
    Endless,
    /// Never answers.
    Hang,
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Resp {
    pub fn new(status: u16, body: Body) -> Self {
        Resp {
            status,
            headers: vec![],
            body,
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn json(v: serde_json::Value) -> Self {
        Resp::new(200, Body::Bytes(v.to_string().into_bytes()))
            .header("Content-Type", "application/json")
    }
    pub fn error(status: u16, code: &str, message: &str) -> Self {
        Resp::new(
            status,
            Body::Bytes(format!("{{\"error\":\"{message}\"}}").into_bytes()),
        )
        .header("X-Error-Code", code)
        .header("X-Error-Message", message)
    }
}

pub type Handler = Arc<dyn Fn(&Req) -> Resp + Send + Sync>;

pub struct Mock {
    pub port: u16,
    pub log: Arc<Mutex<Vec<Req>>>,
    pub bytes: Arc<AtomicU64>,
}

impl Mock {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap().clone()
    }
    pub fn served(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }
}

pub fn start(handler: Handler) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let bytes = Arc::new(AtomicU64::new(0));
    let (l2, b2) = (log.clone(), bytes.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (h, l, b) = (handler.clone(), l2.clone(), b2.clone());
            std::thread::spawn(move || serve_one(stream, h, l, b));
        }
    });
    Mock { port, log, bytes }
}

fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut one = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut one).ok()? == 0 || buf.len() > 65536 {
            return None;
        }
        buf.push(one[0]);
    }
    String::from_utf8(buf).ok()
}

fn parse_req(head: &str) -> Req {
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_string();
    let (mut range, mut auth) = (None, None);
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "range" => {
                    range = v.strip_prefix("bytes=").and_then(|r| {
                        let (a, b) = r.split_once('-')?;
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                }
                "authorization" => auth = Some(v.to_string()),
                _ => {}
            }
        }
    }
    Req { path, range, auth }
}

fn serve_one(mut s: TcpStream, h: Handler, log: Arc<Mutex<Vec<Req>>>, bytes: Arc<AtomicU64>) {
    let Some(head) = read_head(&mut s) else {
        return;
    };
    let req = parse_req(&head);
    log.lock().unwrap().push(req.clone());
    let resp = h(&req);
    let reason = match resp.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Status",
    };
    let mut status = resp.status;
    let mut extra = resp.headers.clone();
    let body: Vec<u8> = match (&resp.body, req.range) {
        (Body::Hang, _) => {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        (Body::Endless, _) => {
            let _ = write!(s, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = vec![b'{'; 1 << 16];
            while s.write_all(&chunk).is_ok() {
                bytes.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            return;
        }
        (Body::Bytes(b), None) => b.clone(),
        (Body::Virtual(p, size), None) => virtual_slice(p, *size, 0, size.saturating_sub(1)),
        (Body::Bytes(b), Some((a, e))) if status == 200 => {
            status = 206;
            let size = b.len() as u64;
            extra.push((
                "Content-Range".into(),
                format!("bytes {a}-{}/{size}", e.min(size - 1)),
            ));
            b[a as usize..=(e.min(size - 1)) as usize].to_vec()
        }
        (Body::Virtual(p, size), Some((a, e))) if status == 200 => {
            status = 206;
            let end = e.min(size - 1);
            extra.push(("Content-Range".into(), format!("bytes {a}-{end}/{size}")));
            virtual_slice(p, *size, a, end)
        }
        (Body::Bytes(b), _) => b.clone(),
        (Body::Virtual(..), _) => vec![],
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.write_all(out.as_bytes());
    if s.write_all(&body).is_ok() {
        bytes.fetch_add(body.len() as u64, Ordering::SeqCst);
    }
}

fn virtual_slice(prefix: &[u8], size: u64, a: u64, e: u64) -> Vec<u8> {
    (a..=e.min(size.saturating_sub(1)))
        .map(|i| prefix.get(i as usize).copied().unwrap_or(0))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Repos

#[derive(Clone)]
pub struct Repo {
    pub sha: String,
    pub files: BTreeMap<String, Body>,
    /// The one token with access, for a gated repo.
    pub gated: Option<String>,
}

/// The Hub's routes over `repos`; weight files answer with a 302 to `cdn` when given.
pub fn hub(repos: BTreeMap<String, Repo>, cdn: Option<String>) -> Handler {
    Arc::new(move |r: &Req| {
        let path = r.path.split('?').next().unwrap_or("");
        if let Some(rest) = path.strip_prefix("/api/models/") {
            let parts: Vec<&str> = rest.splitn(4, '/').collect();
            let repo_id = format!("{}/{}", parts[0], parts.get(1).unwrap_or(&""));
            let Some(repo) = repos.get(&repo_id) else {
                return Resp::error(401, "RepoNotFound", "Repository not found");
            };
            let rev = parts.get(3).copied().unwrap_or("main");
            if rev != "main" && rev != repo.sha {
                return Resp::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
            }
            let siblings: Vec<serde_json::Value> = repo
                .files
                .keys()
                .map(|f| serde_json::json!({"rfilename": f}))
                .collect();
            return Resp::json(serde_json::json!({
                "_id": "0", "id": repo_id, "modelId": repo_id, "sha": repo.sha,
                "private": false,
                "gated": if repo.gated.is_some() { serde_json::json!("manual") } else { serde_json::json!(false) },
                "siblings": siblings,
            }));
        }
        let (is_cdn, rest) = match path.strip_prefix("/blobs/") {
            Some(r) => (true, r.to_string()),
            None => (false, path.trim_start_matches('/').to_string()),
        };
        let parts: Vec<&str> = rest.splitn(5, '/').collect();
        if parts.len() < 3 {
            return Resp::error(404, "EntryNotFound", "not found");
        }
        let repo_id = format!("{}/{}", parts[0], parts[1]);
        let Some(repo) = repos.get(&repo_id) else {
            return Resp::error(401, "RepoNotFound", "Repository not found");
        };
        let file = if is_cdn {
            parts[2..].join("/")
        } else {
            if parts.len() < 5 || parts[2] != "resolve" {
                return Resp::error(404, "EntryNotFound", "not found");
            }
            parts[4].to_string()
        };
        if let (Some(good), false) = (&repo.gated, is_cdn) {
            match r.auth.as_deref() {
                None => {
                    return Resp::error(
                        401,
                        "GatedRepo",
                        &format!("Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."),
                    )
                }
                Some(a) if a != format!("Bearer {good}") => {
                    return Resp::error(
                        403,
                        "GatedRepo",
                        &format!("Access to model {repo_id} is restricted and you are not in the authorized list. Visit https://huggingface.co/{repo_id} to ask for access."),
                    )
                }
                _ => {}
            }
        }
        let Some(body) = repo.files.get(&file) else {
            return Resp::error(404, "EntryNotFound", &format!("{file} does not exist"));
        };
        let weights = file.ends_with(".safetensors") || file.ends_with(".gguf");
        if let (Some(cdn), true, false) = (&cdn, weights, is_cdn) {
            return Resp::new(302, Body::Bytes(vec![]))
                .header("Location", &format!("{cdn}/blobs/{repo_id}/{file}"))
                .header("X-Repo-Commit", &repo.sha);
        }
        Resp::new(200, body.clone()).header("X-Repo-Commit", &repo.sha)
    })
}

// ---------------------------------------------------------------------------------------------
// File builders (shapes written by hand from the real models; never vramscope's output)

/// A safetensors header for `tensors` (name, shape, dtype) laid out in order: its first bytes
/// (8-byte length + JSON) and the whole file's size.
pub fn safetensors(tensors: &[(String, Vec<u64>, &str)]) -> (Vec<u8>, u64) {
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut off = 0u64;
    for (name, shape, dtype) in tensors {
        let width = match *dtype {
            "F32" => 4,
            "BF16" | "F16" => 2,
            _ => 1,
        };
        let n: u64 = shape.iter().product::<u64>() * width;
        map.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}),
        );
        off += n;
    }
    let mut json = serde_json::Value::Object(map).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut head = (json.len() as u64).to_le_bytes().to_vec();
    head.extend(&json);
    let size = head.len() as u64 + off;
    (head, size)
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

pub enum Kv {
    Str(&'static str),
    U32(u32),
    Tokens(u64),
}

/// A GGUF v3 header: metadata, then tensor infos (name, llama.cpp dims, ggml type) laid out
/// 32-byte aligned; its bytes and the whole file's size.
pub fn gguf(kvs: &[(&str, Kv)], tensors: &[(String, Vec<u64>, u32)]) -> (Vec<u8>, u64) {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut b, k);
        match v {
            Kv::Str(s) => {
                b.extend(8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            Kv::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            Kv::Tokens(n) => {
                b.extend(9u32.to_le_bytes());
                b.extend(8u32.to_le_bytes());
                b.extend(n.to_le_bytes());
                for i in 0..*n {
                    put_str(&mut b, &format!("token-{i:06}-of-a-long-vocabulary"));
                }
            }
        }
    }
    let mut off = 0u64;
    for (name, dims, ty) in tensors {
        put_str(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(off.to_le_bytes());
        let n: u64 = dims.iter().product();
        // ggml: F32 4 bytes, F16 2, Q8_0 34 bytes per 32 elements (ggml-common.h block_q8_0).
        let bytes = match ty {
            0 => n * 4,
            1 => n * 2,
            8 => n / 32 * 34,
            _ => panic!("type"),
        };
        off += bytes.div_ceil(32) * 32;
    }
    let data_start = (b.len() as u64).div_ceil(32) * 32;
    (b, data_start + off)
}
