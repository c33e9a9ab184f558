//! A mock Hugging Face Hub served on loopback by the tests: the API listing
//! (`/api/models/{repo}/revision/{rev}`), `resolve` URLs with byte ranges, gated repos with the
//! Hub's `X-Error-Code` / `X-Error-Message` headers, a redirect of weight files to another host
//! (a CDN on another port), and hostile answers. Files are "virtual": their first bytes (a
//! header) are real, the rest reads as zeros, so a 16 GB checkpoint costs nothing to serve.

pub mod env;
#[path = "../../../formats/tests/common/gguf_bytes.rs"]
mod gguf_bytes;
#[path = "../../../formats/tests/common/safetensors_file.rs"]
mod safetensors_file;

use gguf_bytes::{put_str, put_tensor_info};
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

/// A tensor of a safetensors file: name, shape, dtype.
pub type StTensor<'a> = (String, Vec<u64>, &'a str);

/// A safetensors header for `tensors` (name, shape, dtype) laid out in order: its first bytes
/// (8-byte length + JSON) and the whole file's size.
pub fn safetensors(tensors: &[StTensor]) -> (Vec<u8>, u64) {
    let sized = tensors.iter().map(|(name, shape, dtype)| {
        let width = match *dtype {
            "F32" => 4,
            "BF16" | "F16" => 2,
            _ => 1,
        };
        (
            name.as_str(),
            *dtype,
            shape.as_slice(),
            shape.iter().product::<u64>() * width,
        )
    });
    let metadata = serde_json::json!({"format": "pt"});
    let (json, off) = safetensors_file::header_json(sized, Some(metadata));
    let head = safetensors_file::head_bytes(&json);
    let size = head.len() as u64 + off;
    (head, size)
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
                    put_str(&mut b, format!("token-{i:06}-of-a-long-vocabulary"));
                }
            }
        }
    }
    let mut off = 0u64;
    for (name, dims, ty) in tensors {
        put_tensor_info(&mut b, name, dims, *ty, off);
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

pub const SHA: &str = "0e9e39f249a16976918f6564b8830bc894c89659";
pub const SHA2: &str = "607a30d783dfa663caf39e06633721c8d4cfcd7e";

pub fn preset_config(id: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../formats/data/presets/{id}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub fn text(s: &str) -> Body {
    Body::Bytes(s.as_bytes().to_vec())
}

// ---------------------------------------------------------------------------------------------
// Repos with real shapes

/// meta-llama/Llama-3.1-8B: its real config (the preset's file), its real index
/// (`llama-3-8b.index.json`, see the README beside it) and, for each shard, a header listing the
/// tensors the index puts there with the shapes `LlamaForCausalLM` gives them (hidden 4096,
/// 8 KV heads × 128 = 1024, MLP 14336, vocabulary 128256), bf16, in state-dict order.
pub fn llama_3_1_8b() -> Repo {
    let (h, kv, ffn, vocab) = (4096u64, 1024u64, 14336u64, 128256u64);
    let index_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/hub/llama-3-8b.index.json"
    ))
    .unwrap();
    let index: serde_json::Value = serde_json::from_str(&index_text).unwrap();
    let mut t: Vec<(String, Vec<u64>)> = vec![("model.embed_tokens.weight".into(), vec![vocab, h])];
    for l in 0..32 {
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("mlp.gate_proj.weight", vec![ffn, h]),
            ("mlp.up_proj.weight", vec![ffn, h]),
            ("mlp.down_proj.weight", vec![h, ffn]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            t.push((format!("model.layers.{l}.{n}"), s));
        }
    }
    t.push(("model.norm.weight".into(), vec![h]));
    t.push(("lm_head.weight".into(), vec![vocab, h]));
    let mut shards: BTreeMap<String, Vec<StTensor>> = BTreeMap::new();
    let mut total = 0u64;
    for (name, shape) in t {
        let shard = index["weight_map"][&name].as_str().unwrap().to_string();
        total += shape.iter().product::<u64>() * 2;
        shards.entry(shard).or_default().push((name, shape, "BF16"));
    }
    // The index's total_size, 16,060,522,496 bytes = 2 × 8,030,261,248 parameters.
    assert_eq!(total, index["metadata"]["total_size"].as_u64().unwrap());
    assert_eq!(shards.len(), 4);
    let mut files = BTreeMap::new();
    for (name, s) in &shards {
        let (head, size) = safetensors(s);
        files.insert(name.clone(), Body::Virtual(head, size));
    }
    files.insert("model.safetensors.index.json".into(), text(&index_text));
    files.insert("config.json".into(), text(&preset_config("llama-3.1-8b")));
    files.insert("generation_config.json".into(), text("{}"));
    files.insert("original/consolidated.00.pth".into(), text("weights"));
    Repo {
        sha: SHA.into(),
        files,
        gated: None,
    }
}

/// openai-community/gpt2: one `model.safetensors` with GPT-2's Conv1D shapes (names as the
/// real file has them, without the `transformer.` prefix), fp32.
pub fn gpt2(gated: Option<&str>) -> Repo {
    let mut t: Vec<StTensor> = vec![
        ("wte.weight".into(), vec![50257, 768], "F32"),
        ("wpe.weight".into(), vec![1024, 768], "F32"),
    ];
    for l in 0..12 {
        for (n, s) in [
            ("ln_1.weight", vec![768]),
            ("ln_1.bias", vec![768]),
            ("attn.c_attn.weight", vec![768, 2304]),
            ("attn.c_attn.bias", vec![2304]),
            ("attn.c_proj.weight", vec![768, 768]),
            ("attn.c_proj.bias", vec![768]),
            ("ln_2.weight", vec![768]),
            ("ln_2.bias", vec![768]),
            ("mlp.c_fc.weight", vec![768, 3072]),
            ("mlp.c_fc.bias", vec![3072]),
            ("mlp.c_proj.weight", vec![3072, 768]),
            ("mlp.c_proj.bias", vec![768]),
        ] {
            t.push((format!("h.{l}.{n}"), s, "F32"));
        }
    }
    t.push(("ln_f.weight".into(), vec![768], "F32"));
    t.push(("ln_f.bias".into(), vec![768], "F32"));
    let (head, size) = safetensors(&t);
    let mut files = BTreeMap::new();
    files.insert("config.json".into(), text(&preset_config("gpt2")));
    files.insert("model.safetensors".into(), Body::Virtual(head, size));
    files.insert("README.md".into(), text("# gpt2"));
    Repo {
        sha: SHA2.into(),
        files,
        gated: gated.map(Into::into),
    }
}

/// A GGUF repo of SmolLM2-135M (llama.cpp names and dims, tied embeddings) with a Q8_0 and an
/// F16 file; the vocabulary (49,152 tokens) sits in the metadata as in real files, so the
/// header is larger than the first range read.
pub fn smollm2_gguf() -> Repo {
    let mut files = BTreeMap::new();
    for (tag, ty) in [("Q8_0", 8u32), ("F16", 1u32)] {
        let mut t = vec![("token_embd.weight".to_string(), vec![576u64, 49152], ty)];
        for l in 0..30 {
            for (n, d, norm) in [
                ("attn_norm.weight", vec![576u64], true),
                ("attn_q.weight", vec![576, 576], false),
                ("attn_k.weight", vec![576, 192], false),
                ("attn_v.weight", vec![576, 192], false),
                ("attn_output.weight", vec![576, 576], false),
                ("ffn_norm.weight", vec![576], true),
                ("ffn_gate.weight", vec![576, 1536], false),
                ("ffn_up.weight", vec![576, 1536], false),
                ("ffn_down.weight", vec![1536, 576], false),
            ] {
                t.push((format!("blk.{l}.{n}"), d, if norm { 0 } else { ty }));
            }
        }
        t.push(("output_norm.weight".into(), vec![576], 0));
        let (head, size) = gguf(
            &[
                ("general.architecture", Kv::Str("llama")),
                ("general.name", Kv::Str("SmolLM2 135M Instruct")),
                ("llama.block_count", Kv::U32(30)),
                ("llama.context_length", Kv::U32(8192)),
                ("llama.embedding_length", Kv::U32(576)),
                ("llama.feed_forward_length", Kv::U32(1536)),
                ("llama.attention.head_count", Kv::U32(9)),
                ("llama.attention.head_count_kv", Kv::U32(3)),
                ("tokenizer.ggml.tokens", Kv::Tokens(49152)),
            ],
            &t,
        );
        assert!(
            head.len() > 1 << 20,
            "the header outgrows the first 1 MiB read"
        );
        files.insert(
            format!("SmolLM2-135M-Instruct-{tag}.gguf"),
            Body::Virtual(head, size),
        );
    }
    files.insert("README.md".into(), text("# GGUF"));
    Repo {
        sha: SHA2.into(),
        files,
        gated: None,
    }
}

/// A LoRA adapter of SmolLM2-135M as peft saves one (`adapter_config.json` fields of
/// `LoraConfig`).
pub fn smollm2_lora() -> Repo {
    let cfg = serde_json::json!({
        "alpha_pattern": {}, "auto_mapping": null,
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M",
        "bias": "none", "fan_in_fan_out": false, "inference_mode": true,
        "init_lora_weights": true, "lora_alpha": 16, "lora_dropout": 0.05,
        "peft_type": "LORA", "r": 8, "rank_pattern": {}, "revision": null,
        "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"
    });
    let mut files = BTreeMap::new();
    files.insert("adapter_config.json".into(), text(&cfg.to_string()));
    files.insert("adapter_model.safetensors".into(), text("x"));
    Repo {
        sha: SHA2.into(),
        files,
        gated: None,
    }
}

pub fn repos() -> BTreeMap<String, Repo> {
    let mut r = BTreeMap::new();
    r.insert("meta-llama/Llama-3.1-8B".into(), llama_3_1_8b());
    r.insert("openai-community/gpt2".into(), gpt2(None));
    r.insert("acme/gated-gpt2".into(), gpt2(Some("hf_good")));
    r.insert("acme/SmolLM2-135M-GGUF".into(), smollm2_gguf());
    r.insert("acme/smollm2-lora".into(), smollm2_lora());
    let mut readme = BTreeMap::new();
    readme.insert("README.md".into(), text("# a dataset card"));
    r.insert(
        "acme/not-a-model".into(),
        Repo {
            sha: SHA2.into(),
            files: readme,
            gated: None,
        },
    );
    r
}
