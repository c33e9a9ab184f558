//! vramscope's cache of what was fetched (configs and headers, never weights), keyed by commit:
//! `hub/models--ORG--NAME/refs/<revision>` holds the commit a revision resolved to, and
//! `hub/models--ORG--NAME/commits/<commit>/` the record and the heads of the weight files. A
//! second run of the same model needs no network.

use crate::fetch::{Head, Record};
use std::path::{Path, PathBuf};
use vramscope_formats::files::{read_regular, read_regular_text};

/// Largest record accepted back from disk.
const MAX_RECORD_BYTES: u64 = 256 << 20;

/// A commit id as the Hub gives it: 40 (sha1) to 64 (sha256) hex digits.
pub fn is_commit(s: &str) -> bool {
    (40..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache
        .join("hub")
        .join(format!("models--{}", repo.replace('/', "--")))
}

fn ref_file(cache: &Path, repo: &str, rev: &str) -> PathBuf {
    repo_dir(cache, repo)
        .join("refs")
        .join(rev.replace('/', "%2F"))
}

fn commit_dir(cache: &Path, repo: &str, commit: &str) -> PathBuf {
    repo_dir(cache, repo).join("commits").join(commit)
}

/// The commit a revision resolved to last time (a commit names itself).
pub fn commit_of(cache: &Path, repo: &str, rev: &str) -> Option<String> {
    if is_commit(rev) {
        return Some(rev.to_string());
    }
    let text = read_regular_text(&ref_file(cache, repo, rev), 256, "a ref").ok()?;
    let c = text.trim();
    is_commit(c).then(|| c.to_string())
}

/// The record of a commit, heads included.
pub fn load(cache: &Path, repo: &str, commit: &str) -> Option<Record> {
    let dir = commit_dir(cache, repo, commit);
    let path = dir.join("record.json");
    let bytes = read_regular(&path, MAX_RECORD_BYTES, "a cache record").ok()?;
    let mut rec: Record = serde_json::from_slice(&bytes).ok()?;
    if rec.repo != repo || rec.commit != commit {
        return None;
    }
    for (i, (name, head)) in rec.heads.iter().enumerate() {
        let bytes = read_regular(
            &dir.join("heads").join(i.to_string()),
            head.stored,
            "a head",
        )
        .ok()?;
        if bytes.len() as u64 != head.stored {
            return None;
        }
        rec.head_bytes.insert(name.clone(), bytes);
    }
    Some(rec)
}

/// Writes a record (merged with what an earlier run kept of the same commit) and the ref.
/// Failing to write the cache is not an error: the answer is already there.
pub fn save(cache: &Path, rev: &str, mut rec: Record) {
    if let Some(old) = load(cache, &rec.repo, &rec.commit) {
        for (k, v) in old.texts {
            rec.texts.entry(k).or_insert(v);
        }
        for (k, h) in old.heads {
            let longer = rec.heads.get(&k).is_none_or(|n| n.stored < h.stored);
            if longer {
                if let Some(b) = old.head_bytes.get(&k) {
                    rec.head_bytes.insert(k.clone(), b.clone());
                    rec.heads.insert(k, h);
                }
            }
        }
    }
    let _ = write(cache, rev, &rec);
}

fn write(cache: &Path, rev: &str, rec: &Record) -> std::io::Result<()> {
    let dir = commit_dir(cache, &rec.repo, &rec.commit);
    let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("heads"))?;
    for (i, name) in rec.heads.keys().enumerate() {
        let bytes = rec.head_bytes.get(name).map(Vec::as_slice).unwrap_or(&[]);
        std::fs::write(tmp.join("heads").join(i.to_string()), bytes)?;
    }
    let heads: std::collections::BTreeMap<String, Head> = rec.heads.clone();
    let stored = Record {
        heads,
        ..rec.clone()
    };
    std::fs::write(tmp.join("record.json"), serde_json::to_vec(&stored)?)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir)?;
    let rf = ref_file(cache, &rec.repo, rev);
    if let Some(parent) = rf.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if !is_commit(rev) {
        std::fs::write(rf, &rec.commit)?;
    }
    Ok(())
}

/// The local Hugging Face cache's snapshot of a revision (`huggingface_hub`'s layout:
/// `models--ORG--NAME/refs/<rev>` → commit, `snapshots/<commit>/<files>`).
pub fn hf_snapshot(hf_cache: &Path, repo: &str, rev: &str) -> Option<(PathBuf, String)> {
    let root = hf_cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = if is_commit(rev) {
        rev.to_string()
    } else {
        let f = root.join("refs").join(rev);
        read_regular_text(&f, 256, "a ref").ok()?.trim().to_string()
    };
    if !is_commit(&commit) {
        return None;
    }
    let dir = root.join("snapshots").join(&commit);
    dir.is_dir().then_some((dir, commit))
}
