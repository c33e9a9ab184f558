//! vramscope-hub: reaches a model where it lives. MODEL resolves, in order, to a local path, a
//! preset (id or repo alias), the local Hugging Face cache, vramscope's own cache of earlier
//! fetches, then the Hub at `HF_ENDPOINT`. Only configs and file headers are read, never
//! weights: an 8B safetensors model costs a listing, config.json, the index and one range
//! request per shard.
//!
//! All network code of vramscope lives here, so the estimator stays pure; the CLI, `--job` and
//! the server's JSON API resolve through [`resolve`].
//!
//! Libraries: HTTP is `ureq` 3 with rustls (no OpenSSL), redirects turned off in the agent and
//! followed in [`http`] so that `Range` is kept and `Authorization` goes to the endpoint's host
//! only. The `hf-hub` crate was considered for the cache layout and token handling; its API
//! downloads whole files into the Hugging Face cache (it has no range reads), which here would
//! mean downloading weights to read their headers, so the few lines of layout and environment
//! it would have provided are written here (`cache.rs`, `env.rs`), following
//! `huggingface_hub/constants.py` and `file_download.py`.

mod assemble;
mod cache;
mod env;
mod errors;
mod fetch;
pub mod http;
mod pipeline;
pub mod spec;

use assemble::{assemble, Assembled};
use env::HubEnv;
use errors::{http_error, Ctx};
use fetch::{is_miss, Cached, Fetch, LocalDir, Record, Remote};
use serde_json::Value;
use spec::HubRef;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use vramscope_core::diffusion::Pipeline;
use vramscope_formats::hf_config::ReadOptions;
use vramscope_formats::model_source::{
    load_local, load_model_with, tuned_variant_model, LoadedModel, Source,
};
use vramscope_formats::FormatError;

pub use assemble::gguf_tag;

/// Largest repo listing accepted from the API.
const MAX_LISTING_BYTES: u64 = 16 << 20;
/// Most files a listing may name.
const MAX_SIBLINGS: usize = 100_000;
/// Models kept in memory per process (the server answers many requests for the same few).
const MEMO_CAP: usize = 64;

/// How to resolve MODEL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub read: ReadOptions,
    /// Skip vramscope's cache (fetch again).
    pub refresh: bool,
    /// Print each request and its bytes on stderr.
    pub verbose: bool,
    /// Forbid the network even without `HF_HUB_OFFLINE` (a server bound beyond loopback
    /// without its opt-in flag).
    pub no_network: bool,
}

/// A resolved model, and the job's `peft` when MODEL was a PEFT adapter repo.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub model: LoadedModel,
    pub peft: Option<Value>,
}

/// A resolved diffusers pipeline (`model_index.json` and its models' configs): its name (the
/// path or `ORG/NAME`) and where it was read.
#[derive(Debug, Clone)]
pub struct ResolvedPipeline {
    pub pipeline: Pipeline,
    pub name: String,
    pub source: Source,
}

/// What MODEL named: a model, or a diffusers pipeline (a directory or repo with
/// `model_index.json`).
/// (A model is the common answer and is moved once per command: kept unboxed, as before.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Reached {
    Model(Resolved),
    Pipeline(Box<ResolvedPipeline>),
}

static MEMO: Mutex<Option<HashMap<String, Reached>>> = Mutex::new(None);

fn memo_key(arg: &str, o: &Options) -> String {
    format!("{arg}\u{0}{}", o.read.assume_llama)
}

/// Resolves MODEL to a model: local path, preset, Hugging Face cache, vramscope's cache, the
/// Hub. A diffusers pipeline is refused with a line saying which commands read one.
pub fn resolve(arg: &str, opts: &Options) -> Result<Resolved, FormatError> {
    match resolve_any(arg, opts)? {
        Reached::Model(r) => Ok(r),
        Reached::Pipeline(p) => Err(FormatError::Remote(format!(
            "{}: a diffusers pipeline ({}, model_index.json): `estimate`, `fit` and `inspect` \
             read it (docs/diffusion.md); other commands take one model",
            p.name, p.pipeline.class
        ))),
    }
}

/// Whether MODEL may name a diffusers pipeline: a local directory with `model_index.json`, or
/// a Hub repo (not a local path nor a preset), which only its listing tells apart.
pub fn may_be_pipeline(arg: &str) -> bool {
    let Some(h) = spec::parse(arg) else {
        return vramscope_formats::diffusers::is_pipeline_dir(Path::new(arg));
    };
    h.forced
        || vramscope_formats::diffusers::is_pipeline_dir(Path::new(arg))
        || (!Path::new(arg).exists() && vramscope_formats::presets::find(arg).is_none())
}

/// Resolves MODEL to a model or a diffusers pipeline, in the order of [`resolve`]: a local
/// directory with `model_index.json` is a pipeline, as is a repo whose listing has one.
pub fn resolve_any(arg: &str, opts: &Options) -> Result<Reached, FormatError> {
    let model = |model| Reached::Model(Resolved { model, peft: None });
    let hub = spec::parse(arg);
    if !hub.as_ref().is_some_and(|h| h.forced) {
        let dir = Path::new(arg);
        if vramscope_formats::diffusers::is_pipeline_dir(dir) {
            let pipeline = vramscope_formats::diffusers::read_pipeline_dir(dir)?;
            return Ok(Reached::Pipeline(Box::new(ResolvedPipeline {
                pipeline,
                name: arg.to_string(),
                source: Source::local("file", arg),
            })));
        }
        if let Some(local) = load_local(arg, opts.read) {
            return local.map(model);
        }
    }
    let Some(h) = hub else {
        return load_model_with(arg, opts.read).map(model);
    };
    // What this process already resolved (a human estimate loads its model three times; with
    // --refresh the first of them fetched afresh).
    let key = memo_key(arg, opts);
    {
        let memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = memo.as_ref().and_then(|m| m.get(&key)) {
            return Ok(r.clone());
        }
    }
    let r = match resolve_hub(&h, opts, 0) {
        Err(FormatError::Unreachable(why)) => match tuned_variant_model(arg) {
            Some(m) => return m.map(model),
            None => return Err(FormatError::Unreachable(why)),
        },
        r => r?,
    };
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    let m = memo.get_or_insert_with(HashMap::new);
    if m.len() >= MEMO_CAP {
        m.clear();
    }
    m.insert(key, r.clone());
    Ok(r)
}

fn resolve_hub(h: &HubRef, opts: &Options, depth: u32) -> Result<Reached, FormatError> {
    let env = HubEnv::from_env();
    let (assembled, source) = find(h, opts, &env)?;
    match assembled {
        Assembled::Model(model) => {
            let mut model = *model;
            model.name = h.repo.clone();
            model.source = source;
            Ok(Reached::Model(Resolved { model, peft: None }))
        }
        Assembled::Pipeline(pipeline) => Ok(Reached::Pipeline(Box::new(ResolvedPipeline {
            pipeline: *pipeline,
            name: h.repo.clone(),
            source,
        }))),
        Assembled::Adapter { base, peft } => {
            if depth > 0 {
                return Err(FormatError::Remote(format!(
                    "{}: a PEFT adapter whose base model is itself an adapter is not read",
                    h.repo
                )));
            }
            let mut base_model = match spec::parse(&base) {
                Some(b) if load_local(&base, opts.read).is_none() => {
                    match resolve_hub(&b, opts, depth + 1)? {
                        Reached::Model(r) => r.model,
                        Reached::Pipeline(_) => {
                            return Err(FormatError::Remote(format!(
                                "{}: a PEFT adapter over the diffusers pipeline {base} is not read",
                                h.repo
                            )))
                        }
                    }
                }
                _ => resolve(&base, opts)?.model,
            };
            base_model.warnings.insert(
                0,
                format!(
                    "{} is a PEFT adapter ({}) over {base}: the base model is estimated with the \
                     adapter's LoRA settings",
                    h.repo,
                    source.describe()
                ),
            );
            Ok(Reached::Model(Resolved {
                model: base_model,
                peft: Some(peft),
            }))
        }
    }
}

fn source(kind: &str, h: &HubRef, commit: &str) -> Source {
    Source {
        kind: kind.into(),
        repo: Some(h.repo.clone()),
        revision: Some(h.rev().to_string()),
        commit: Some(commit.to_string()),
        path: None,
    }
}

/// The caches first, then the Hub.
fn find(h: &HubRef, opts: &Options, env: &HubEnv) -> Result<(Assembled, Source), FormatError> {
    let quant = h.quant.as_deref();
    if let Some((dir, commit)) = env
        .hf_cache
        .as_deref()
        .and_then(|c| cache::hf_snapshot(c, &h.repo, h.rev()))
    {
        let mut f = LocalDir {
            siblings: fetch::list_files(&dir),
            dir,
        };
        match assemble(&mut f, &format!("{}@{commit}", h.repo), quant, opts.read) {
            Ok(a) => return Ok((a, source("hf-cache", h, &commit))),
            Err(e) if is_miss(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if let (Some(dir), false) = (env.cache.as_deref(), opts.refresh) {
        if let Some(rec) =
            cache::commit_of(dir, &h.repo, h.rev()).and_then(|c| cache::load(dir, &h.repo, &c))
        {
            let commit = rec.commit.clone();
            let mut f = Cached(rec);
            match assemble(&mut f, &format!("{}@{commit}", h.repo), quant, opts.read) {
                Ok(a) => return Ok((a, source("hub", h, &commit))),
                Err(e) if is_miss(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    if env.offline {
        return Err(FormatError::Unreachable(format!(
            "{}: not in the Hugging Face cache ({}) nor in vramscope's, and HF_HUB_OFFLINE=1 \
             forbids the network; unset it, or pass a local config.json",
            h.display(),
            env.hf_cache
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "unknown: no HOME".into())
        )));
    }
    if opts.no_network {
        return Err(FormatError::Unreachable(format!(
            "{}: fetching from the Hub is off on this server (start `vramscope serve` with \
             --allow-hub to allow it)",
            h.display()
        )));
    }
    from_hub(h, opts, env)
}

/// The listing (commit and files) from `GET {endpoint}/api/models/{repo}/revision/{rev}`, as
/// `huggingface_hub`'s `HfApi.model_info` asks for it.
fn listing(client: &http::Client, env: &HubEnv, h: &HubRef) -> Result<Record, FormatError> {
    let url = format!(
        "{}/api/models/{}/revision/{}",
        env.endpoint,
        h.repo,
        fetch::encode_path(h.rev()).replace('/', "%2F")
    );
    let ctx = Ctx {
        endpoint: &env.endpoint,
        repo: &h.repo,
        revision: h.rev(),
        file: None,
        has_token: env.token.is_some(),
    };
    let got = client
        .get(&url, None, MAX_LISTING_BYTES)
        .map_err(|e| http_error(e, &ctx))?;
    let bad = |why: &str| {
        FormatError::Remote(format!(
            "{}: the Hub's answer for {} is not a model listing ({why})",
            env.endpoint, h.repo
        ))
    };
    let v: Value = serde_json::from_slice(&got.body).map_err(|_| bad("not JSON"))?;
    let commit = v
        .get("sha")
        .and_then(Value::as_str)
        .filter(|s| cache::is_commit(s))
        .ok_or_else(|| bad("no commit sha"))?
        .to_string();
    let siblings: Vec<String> = v
        .get("siblings")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no siblings"))?
        .iter()
        .take(MAX_SIBLINGS)
        .filter_map(|s| s.get("rfilename").and_then(Value::as_str))
        .filter(|s| !s.is_empty() && !s.split('/').any(|p| p == ".." || p == "."))
        .map(str::to_string)
        .collect();
    Ok(Record {
        repo: h.repo.clone(),
        commit,
        siblings,
        ..Default::default()
    })
}

fn from_hub(h: &HubRef, opts: &Options, env: &HubEnv) -> Result<(Assembled, Source), FormatError> {
    let client = http::Client::new(&env.endpoint, env.token.clone(), env.timeout, opts.verbose);
    let record = listing(&client, env, h)?;
    let commit = record.commit.clone();
    let mut f = Remote {
        client: &client,
        endpoint: &env.endpoint,
        has_token: env.token.is_some(),
        record,
    };
    let label = format!("{}@{commit}", h.repo);
    let result = assemble(
        &mut f as &mut dyn Fetch,
        &label,
        h.quant.as_deref(),
        opts.read,
    );
    if opts.verbose {
        eprintln!(
            "hub: {} requests, {} bytes for {}",
            client.requests(),
            client.bytes(),
            h.display()
        );
    }
    let assembled = result?;
    if let Some(dir) = env.cache.as_deref() {
        cache::save(dir, h.rev(), f.record);
    }
    Ok((assembled, source("hub", h, &commit)))
}
