//! MODEL from the Hugging Face Hub, end to end through the binary, against a mock Hub the test
//! serves on loopback (`hub/mod.rs`): real repos' file shapes, exact parameter counts, bytes
//! transferred, the cache's offline second run, HF_HUB_OFFLINE, the local HF cache, and every
//! error a user can meet, one line each.

mod hub;

use assert_cmd::Command;
use hub::{Body, Kv, Repo};
use std::collections::BTreeMap;
use std::path::PathBuf;

const SHA: &str = "0e9e39f249a16976918f6564b8830bc894c89659";
const SHA2: &str = "607a30d783dfa663caf39e06633721c8d4cfcd7e";

fn preset_config(id: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../formats/data/presets/{id}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn text(s: &str) -> Body {
    Body::Bytes(s.as_bytes().to_vec())
}

struct Env {
    dir: PathBuf,
}

impl Env {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vramscope-hub-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hf_home")).unwrap();
        Env { dir }
    }

    /// The binary with this test's HF_HOME and vramscope cache, the endpoint given, no token,
    /// no proxy, a 5-second bound on requests.
    fn cmd(&self, endpoint: &str) -> Command {
        let mut c = Command::cargo_bin("vramscope").unwrap();
        for k in [
            "HF_TOKEN",
            "HF_TOKEN_PATH",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "HF_HUB_CACHE",
            "HUGGINGFACE_HUB_CACHE",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "ALL_PROXY",
            "https_proxy",
            "http_proxy",
            "all_proxy",
            "RUST_BACKTRACE",
        ] {
            c.env_remove(k);
        }
        c.env("HF_ENDPOINT", endpoint)
            .env("HF_HOME", self.dir.join("hf_home"))
            .env("VRAMSCOPE_CACHE", self.dir.join("cache"))
            .env("VRAMSCOPE_HUB_TIMEOUT", "5");
        c
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ok_json(c: &mut Command) -> (serde_json::Value, String) {
    let out = c.assert().success().get_output().clone();
    (
        serde_json::from_slice(&out.stdout).expect("stdout is JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 2 with one line on stderr; returns it.
fn fails(c: &mut Command) -> String {
    let out = c.assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

// ---------------------------------------------------------------------------------------------
// Repos with real shapes

/// meta-llama/Llama-3.1-8B: its real config (the preset's file) and its tensors as
/// `LlamaForCausalLM` names them, in bf16, split as transformers' `save_pretrained` splits a
/// state dict (fill a shard up to 5 GB = 5·10^9 bytes, then start the next), which gives the
/// repo's four `model-0000N-of-00004.safetensors` shards.
fn llama_3_1_8b() -> Repo {
    let (h, kv, ffn, vocab) = (4096u64, 1024u64, 14336u64, 128256u64);
    let mut t: Vec<(String, Vec<u64>, &str)> =
        vec![("model.embed_tokens.weight".into(), vec![vocab, h], "BF16")];
    for l in 0..32 {
        let p = format!("model.layers.{l}");
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
            t.push((format!("{p}.{n}"), s, "BF16"));
        }
    }
    t.push(("model.norm.weight".into(), vec![h], "BF16"));
    t.push(("lm_head.weight".into(), vec![vocab, h], "BF16"));
    let mut shards: Vec<Vec<(String, Vec<u64>, &str)>> = vec![vec![]];
    let mut size = 0u64;
    for x in t {
        let b = x.1.iter().product::<u64>() * 2;
        if size + b > 5_000_000_000 && !shards.last().unwrap().is_empty() {
            shards.push(vec![]);
            size = 0;
        }
        size += b;
        shards.last_mut().unwrap().push(x);
    }
    assert_eq!(shards.len(), 4, "the real repo has 4 shards");
    let mut files = BTreeMap::new();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for (i, s) in shards.iter().enumerate() {
        let name = format!("model-{:05}-of-00004.safetensors", i + 1);
        for (n, shape, _) in s {
            weight_map.insert(n.clone(), name.clone().into());
            total += shape.iter().product::<u64>() * 2;
        }
        let (head, size) = hub::safetensors(s);
        files.insert(name, Body::Virtual(head, size));
    }
    // The real index states total_size 16,060,522,496 = 2 bytes × 8,030,261,248 parameters.
    assert_eq!(total, 16_060_522_496);
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    files.insert(
        "model.safetensors.index.json".into(),
        text(&index.to_string()),
    );
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
fn gpt2(gated: Option<&str>) -> Repo {
    let mut t: Vec<(String, Vec<u64>, &str)> = vec![
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
    let (head, size) = hub::safetensors(&t);
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
fn smollm2_gguf() -> Repo {
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
        let (head, size) = hub::gguf(
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
fn smollm2_lora() -> Repo {
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

fn repos() -> BTreeMap<String, Repo> {
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

// ---------------------------------------------------------------------------------------------

/// Llama-3.1-8B: 8,030,261,248 parameters (its index's total_size 16,060,522,496 bytes / 2),
/// from config.json, the index and four shard headers: well under 2 MB on the wire. The second
/// run reads vramscope's cache with the network forbidden; --refresh goes back to the Hub.
#[test]
fn sharded_model_exact_count_few_bytes_then_offline_from_the_cache() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("sharded");
    let (v, err) = ok_json(env.cmd(&mock.url()).args([
        "estimate",
        "hf://meta-llama/Llama-3.1-8B",
        "--json",
        "--verbose",
    ]));
    assert_eq!(v["model"]["params_total"], 8_030_261_248u64);
    assert_eq!(v["model"]["source"]["kind"], "hub");
    assert_eq!(v["model"]["source"]["commit"], SHA);
    assert_eq!(v["model"]["source"]["repo"], "meta-llama/Llama-3.1-8B");
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
    assert_eq!(again["model"]["source"]["commit"], SHA);
    assert_eq!(mock.requests().len(), 7, "the second run is offline");

    let human = env
        .cmd(&mock.url())
        .args(["estimate", "hf://meta-llama/Llama-3.1-8B", "--refresh"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&human)
        .contains(&format!("meta-llama/Llama-3.1-8B@{SHA} via the Hub")));
    assert_eq!(mock.requests().len(), 14, "--refresh fetches again");
}

/// A plain ORG/NAME that is a preset alias stays the preset (offline); hf:// forces the Hub.
#[test]
fn preset_aliases_stay_offline_and_hf_scheme_forces_the_hub() {
    let env = Env::new("alias");
    let (v, _) = ok_json(env.cmd("http://127.0.0.1:9").args([
        "inspect",
        "meta-llama/Llama-3.1-8B",
        "--json",
    ]));
    assert_eq!(v["model"]["source"]["kind"], "preset");
}

/// GPT-2's single file (124,439,808 parameters: wte 50257·768, wpe 1024·768, 12 layers of
/// 7,087,872 and ln_f 1,536), its weight file answered with a 302 to another host: the range is kept, the
/// token is not sent there.
#[test]
fn single_file_through_a_redirect_to_another_host_drops_the_token() {
    let cdn = hub::start(hub::hub(repos(), None));
    let mock = hub::start(hub::hub(repos(), Some(cdn.url())));
    let env = Env::new("redirect");
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
    let env = Env::new("gated");
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
    let (v, _) = ok_json(env.cmd(&mock.url()).env("HF_TOKEN", "hf_good").args([
        "inspect",
        "acme/gated-gpt2",
        "--json",
        "--refresh",
    ]));
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
    let env = Env::new("gguf");
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
    let e = fails(
        env.cmd(&mock.url())
            .args(["inspect", "acme/SmolLM2-135M-GGUF"]),
    );
    assert!(
        e.contains("several GGUF files") && e.contains("F16, Q8_0"),
        "{e}"
    );
    let e = fails(
        env.cmd(&mock.url())
            .args(["inspect", "acme/SmolLM2-135M-GGUF:Q4_K_M"]),
    );
    assert!(
        e.contains("no GGUF file of quant Q4_K_M") && e.contains("F16, Q8_0"),
        "{e}"
    );
}

/// A PEFT adapter repo: its base (a preset alias here) is the model, and the job gets the
/// adapter's LoRA: r = 8 on q_proj and v_proj of SmolLM2-135M's 30 layers trains
/// 30 × (8·(576+576) + 8·(576+192)) = 30 × 15,360 = 460,800 parameters.
#[test]
fn peft_adapter_repo_fills_the_jobs_peft() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("peft");
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
    let env = Env::new("hfcache");
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
    assert_eq!(v["model"]["source"]["kind"], "hf-cache");
    assert_eq!(v["model"]["source"]["commit"], SHA2);
}

#[test]
fn every_error_is_one_actionable_line() {
    let mock = hub::start(hub::hub(repos(), None));
    let env = Env::new("errors");
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
    let env = Env::new("hostile");
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
