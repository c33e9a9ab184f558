//! MODEL from the Hugging Face Hub, end to end through the binary, against a mock Hub the test
//! serves on loopback (`hub/mod.rs`): real repos' file shapes, exact parameter counts, bytes
//! transferred, the cache's offline second run, HF_HUB_OFFLINE, the local HF cache, and every
//! error a user can meet, one line each.

mod common;
use common::argv;
mod hub;

use assert_cmd::Command;
use hub::env::{fails, Env};
use hub::{preset_config, repos, text, Body, Repo, SHA, SHA2};
use std::collections::BTreeMap;

fn ok_json(c: &mut Command) -> (serde_json::Value, String) {
    let out = c.assert().success().get_output().clone();
    (
        serde_json::from_slice(&out.stdout).expect("stdout is JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------------

/// Llama-3.1-8B: 8,030,261,248 parameters (its index's total_size 16,060,522,496 bytes / 2),
/// from config.json, the index and four shard headers: well under 2 MB on the wire. The second
/// run reads vramscope's cache with the network forbidden; --refresh goes back to the Hub.
#[test]
fn sharded_model_exact_count_few_bytes_then_offline_from_the_cache() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "sharded");
    let (v, err) = ok_json(env.cmd(&mock.url()).args(argv(
        "estimate hf://meta-llama/Llama-3.1-8B --json --verbose",
    )));
    assert_eq!(v["model"]["params_total"], 8_030_261_248u64);
    assert_eq!(v["model"]["source"], "hub");
    assert_eq!(v["model"]["origin"]["commit"], SHA);
    assert_eq!(v["model"]["origin"]["repo"], "meta-llama/Llama-3.1-8B");
    let served = mock.served();
    assert!(served < 2_000_000, "{served} bytes");
    // listing + config + index + 4 shard headers (one range request each: headers < 64 KiB).
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 7, "{reqs:?}");
    assert!(reqs
        .iter()
        .filter(|r| r.path.ends_with(".safetensors"))
        .all(|r| r.range.is_some()));
    assert!(err.contains("hub: 7 requests"), "{err}");
    // No weights: the checkpoint is 16 GB.
    assert!(!reqs.iter().any(|r| r.path.contains("consolidated")));

    let (again, _) = ok_json(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(["estimate", "hf://meta-llama/Llama-3.1-8B", "--json"]),
    );
    assert_eq!(again["model"]["params_total"], 8_030_261_248u64);
    assert_eq!(again["model"]["origin"]["commit"], SHA);
    assert_eq!(mock.requests().len(), 7, "the second run is offline");

    let human = common::text_of_cmd(env.cmd(&mock.url()).args([
        "estimate",
        "hf://meta-llama/Llama-3.1-8B",
        "--refresh",
    ]));
    assert!(human.contains(&format!("meta-llama/Llama-3.1-8B@{SHA} via the Hub")));
    assert_eq!(mock.requests().len(), 14, "--refresh fetches again");
}

/// A plain ORG/NAME that is a preset alias stays the preset (offline); hf:// forces the Hub.
#[test]
fn preset_aliases_stay_offline_and_hf_scheme_forces_the_hub() {
    let env = Env::new("hub", "alias");
    let (v, _) = ok_json(env.cmd("http://127.0.0.1:9").args([
        "inspect",
        "meta-llama/Llama-3.1-8B",
        "--json",
    ]));
    assert_eq!(v["model"]["source"], "preset");
}

/// GPT-2's single file (124,439,808 parameters: wte 50257·768, wpe 1024·768, 12 layers of
/// 7,087,872 and ln_f 1,536), its weight file answered with a 302 to another host: the range is kept, the
/// token is not sent there.
#[test]
fn single_file_through_a_redirect_to_another_host_drops_the_token() {
    let cdn = hub::start(hub::hub(repos(), None));
    let mock = hub::start(hub::hub(repos(), Some(cdn.url())));
    let env = Env::new("hub", "redirect");
    let (v, _) = ok_json(env.cmd(&mock.url()).env("HF_TOKEN", "hf_secret").args([
        "inspect",
        "https://huggingface.co/openai-community/gpt2",
        "--json",
    ]));
    assert_eq!(v["model"]["params_total"], 124_439_808u64);
    let at_cdn = cdn.requests();
    assert_eq!(at_cdn.len(), 1, "{at_cdn:?}");
    assert!(at_cdn[0].path.ends_with("/model.safetensors"));
    assert!(at_cdn[0].range.is_some(), "Range kept across the redirect");
    assert!(at_cdn[0].auth.is_none(), "no token sent to another host");
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.auth.as_deref() == Some("Bearer hf_secret")));
}

/// Gated: 401 without a token, 403 with a token lacking access (the Hub's X-Error-Code
/// GatedRepo), then the right token from HF_TOKEN or from the token file.
#[test]
fn gated_repos_say_what_to_do() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "gated");
    let e = fails(env.cmd(&mock.url()).args(["inspect", "acme/gated-gpt2"]));
    assert!(e.contains("acme/gated-gpt2 is gated"), "{e}");
    assert!(
        e.contains("accept its license") && e.contains("HF_TOKEN"),
        "{e}"
    );
    let e = fails(
        env.cmd(&mock.url())
            .env("HF_TOKEN", "hf_bad")
            .args(["inspect", "acme/gated-gpt2"]),
    );
    assert!(e.contains("has no access"), "{e}");
    let (v, _) = ok_json(
        env.cmd(&mock.url())
            .env("HF_TOKEN", "hf_good")
            .args(argv("inspect acme/gated-gpt2 --json --refresh")),
    );
    assert_eq!(v["model"]["params_total"], 124_439_808u64);
    std::fs::write(env.dir.join("hf_home/token"), "hf_good\n").unwrap();
    let (v, _) =
        ok_json(
            env.cmd(&mock.url())
                .args(["inspect", "acme/gated-gpt2", "--json", "--refresh"]),
        );
    assert_eq!(v["model"]["params_total"], 124_439_808u64);
}

/// ORG/NAME:QUANT picks the file; the header (with a 1.4 MB vocabulary) is read by growing
/// range reads. SmolLM2-135M: 134,515,008 parameters (embedding 49152·576 = 28,311,552; per
/// layer 4 attention matrices 2·576² + 2·576·192 = 884,736, MLP 3·576·1536 = 2,654,208, two
/// norms 1,152: 3,540,096 × 30 = 106,202,880; final norm 576). Q8_0 stores 34 bytes per 32
/// weights.
#[test]
fn gguf_repo_quant_is_chosen_by_tag() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "gguf");
    let (v, _) =
        ok_json(
            env.cmd(&mock.url())
                .args(["inspect", "acme/SmolLM2-135M-GGUF:Q8_0", "--json"]),
        );
    assert_eq!(v["model"]["params_total"], 134_515_008u64);
    // 2-D weights in Q8_0: (134,515,008 − 61 norms·576 = 134,479,872) / 32 · 34 bytes, plus the
    // 61 F32 norms · 576 · 4.
    assert_eq!(
        v["model"]["weight_bytes"],
        134_479_872u64 / 32 * 34 + 61 * 576 * 4
    );
    let gguf_reqs: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("Q8_0.gguf"))
        .collect();
    assert_eq!(gguf_reqs.len(), 2, "1 MiB, then 4 MiB: {gguf_reqs:?}");
    // Which file is meant must be said, and only among the quants the repo holds; either
    // refusal lists them.
    for (model, why) in [
        ("acme/SmolLM2-135M-GGUF", "several GGUF files"),
        (
            "acme/SmolLM2-135M-GGUF:Q4_K_M",
            "no GGUF file of quant Q4_K_M",
        ),
    ] {
        let e = fails(env.cmd(&mock.url()).args(["inspect", model]));
        assert!(e.contains(why) && e.contains("F16, Q8_0"), "{e}");
    }
}

/// A PEFT adapter repo: its base (a preset alias here) is the model, and the job gets the
/// adapter's LoRA: r = 8 on q_proj and v_proj of SmolLM2-135M's 30 layers trains
/// 30 × (8·(576+576) + 8·(576+192)) = 30 × 15,360 = 460,800 parameters.
#[test]
fn peft_adapter_repo_fills_the_jobs_peft() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "peft");
    let (v, _) = ok_json(
        env.cmd(&mock.url())
            .args(["estimate", "acme/smollm2-lora", "--json"]),
    );
    assert_eq!(v["job"]["peft"]["rank"], 8);
    assert_eq!(v["model"]["params_total"], 134_515_008u64);
    assert_eq!(v["model"]["params_trainable"], 460_800u64);
    assert!(v["warnings"][0].as_str().unwrap().contains("PEFT adapter"));
}

/// A snapshot in the local Hugging Face cache is read with no network at all.
#[test]
fn the_local_hf_cache_is_read_first() {
    let env = Env::new("hub", "hfcache");
    let root = env.dir.join("hf_home/hub/models--acme--cached-gpt2");
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), SHA2).unwrap();
    let snap = root.join("snapshots").join(SHA2);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(snap.join("config.json"), preset_config("gpt2")).unwrap();
    let (v, _) = ok_json(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(["inspect", "acme/cached-gpt2", "--json"]),
    );
    assert_eq!(v["model"]["params_total"], 124_439_808u64);
    assert_eq!(v["model"]["source"], "hf-cache");
    assert_eq!(v["model"]["origin"]["commit"], SHA2);
    let human = common::text_of_cmd(
        env.cmd("http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1")
            .args(["inspect", "acme/cached-gpt2"]),
    );
    assert!(human.contains(&format!(
        "acme/cached-gpt2@{SHA2} from the local Hugging Face cache"
    )));
}

#[test]
fn every_error_is_one_actionable_line() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "errors");
    let e = fails(env.cmd(&mock.url()).args(["inspect", "acme/nope"]));
    assert!(e.contains("acme/nope: no such model repository"), "{e}");
    let e = fails(
        env.cmd(&mock.url())
            .args(["inspect", "openai-community/gpt2@v9"]),
    );
    assert!(e.contains("no revision 'v9'"), "{e}");
    let e = fails(env.cmd(&mock.url()).args(["inspect", "acme/not-a-model"]));
    assert!(e.contains("neither config.json nor"), "{e}");
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = fails(
        env.cmd(&format!("http://127.0.0.1:{port}"))
            .args(["inspect", "acme/anything"]),
    );
    assert!(
        e.contains("cannot reach HF_ENDPOINT") && e.contains("HF_HUB_OFFLINE=1"),
        "{e}"
    );
    // HF_HUB_OFFLINE: the cache only, never a socket.
    let before = mock.requests().len();
    let e = fails(
        env.cmd(&mock.url())
            .env("HF_HUB_OFFLINE", "1")
            .args(["inspect", "acme/uncached"]),
    );
    assert!(e.contains("HF_HUB_OFFLINE=1 forbids the network"), "{e}");
    assert_eq!(mock.requests().len(), before);
    // A server that never answers: the time bound.
    let hang = hub::start(std::sync::Arc::new(|_: &hub::Req| {
        hub::Resp::new(200, Body::Hang)
    }));
    let t = std::time::Instant::now();
    let e = fails(
        env.cmd(&hang.url())
            .env("VRAMSCOPE_HUB_TIMEOUT", "1")
            .args(["inspect", "acme/slow"]),
    );
    assert!(e.contains("did not answer within 1 s"), "{e}");
    assert!(t.elapsed().as_secs() < 20);
}

/// A hostile server cannot make vramscope allocate without bound, hang or panic: a header
/// length of 2^60, a body that never ends, a redirect loop.
#[test]
fn a_hostile_server_gets_an_error_not_a_panic() {
    let mut r = BTreeMap::new();
    let mut files = BTreeMap::new();
    files.insert("config.json".into(), text(&preset_config("gpt2")));
    let mut huge = (1u64 << 60).to_le_bytes().to_vec();
    huge.extend(b"{}      ");
    files.insert("model.safetensors".into(), Body::Virtual(huge, 1 << 40));
    r.insert(
        "evil/huge-header".into(),
        Repo {
            sha: SHA.into(),
            files,
            gated: None,
        },
    );
    let mut files = BTreeMap::new();
    files.insert("config.json".into(), Body::Endless);
    r.insert(
        "evil/endless".into(),
        Repo {
            sha: SHA.into(),
            files,
            gated: None,
        },
    );
    let mock = hub::start(hub::hub(r, None));
    let env = Env::new("hub", "hostile");
    let e = fails(env.cmd(&mock.url()).args(["inspect", "evil/huge-header"]));
    assert!(e.contains("header length") && e.contains("exceeds"), "{e}");
    let e = fails(env.cmd(&mock.url()).args(["inspect", "evil/endless"]));
    assert!(e.contains("more than") && e.contains("refused"), "{e}");
    // 16 MiB (the config.json cap) and a little: the read stopped.
    assert!(mock.served() < 64 << 20, "{}", mock.served());

    let port = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    let p2 = port.clone();
    let looping = hub::start(std::sync::Arc::new(move |r: &hub::Req| {
        let p = p2.load(std::sync::atomic::Ordering::SeqCst);
        hub::Resp::new(302, Body::Bytes(vec![]))
            .header("Location", &format!("http://127.0.0.1:{p}{}", r.path))
    }));
    port.store(looping.port, std::sync::atomic::Ordering::SeqCst);
    let e = fails(env.cmd(&looping.url()).args(["inspect", "evil/loop"]));
    assert!(e.contains("redirects"), "{e}");
    assert_eq!(
        looping.requests().len(),
        6,
        "the first request and 5 redirects"
    );
}

/// `serve` resolves models through the same path: on loopback a Hub id is fetched; bound beyond
/// loopback it is refused unless the server was started with --allow-hub.
#[test]
fn the_json_api_resolves_hub_ids_and_beyond_loopback_only_with_the_flag() {
    use std::io::{Read, Write};
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("hub", "serve");
    let start = |extra: &[&str]| {
        let cmd = env.cmd(&mock.url());
        let mut c = std::process::Command::new(cmd.get_program());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let (child, addr) = common::http::spawn_serve(&mut c, extra);
        let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
        (child, port)
    };
    let post = |port: u16, body: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out
            .split_once("\r\n\r\n")
            .map(|x| x.1.to_string())
            .unwrap_or_default();
        (status, body)
    };
    let job = r#"{"model": "openai-community/gpt2@main", "gpu": "t4-16gb"}"#;
    let (mut child, port) = start(&[]);
    let (status, body) = post(port, job);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"]["params_total"], 124_439_808u64);
    assert_eq!(v["model"]["source"], "hub");

    let (mut child, port) = start(&["--bind", "0.0.0.0"]);
    let (status, body) = post(port, job);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("--allow-hub"), "{body}");

    let (mut child, port) = start(&["--bind", "0.0.0.0", "--allow-hub"]);
    let (status, body) = post(port, job);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
}

/// HTTPS_PROXY is honoured: the request for the Hub goes to the proxy, named by its host.
#[test]
fn requests_go_through_https_proxy() {
    let proxy = hub::start(std::sync::Arc::new(|_: &hub::Req| {
        hub::Resp::new(502, Body::Bytes(vec![]))
    }));
    let env = Env::new("hub", "proxy");
    let e = fails(
        env.cmd("http://hub.example.invalid")
            .env("HTTPS_PROXY", proxy.url())
            .args(["inspect", "acme/through-proxy"]),
    );
    let seen = proxy.requests();
    assert!(
        seen.iter().any(|r| r.path.contains("hub.example.invalid")),
        "{seen:?} / {e}"
    );
}
