//! Where a repo's files are read from: the Hub (range requests), the local Hugging Face cache
//! (a snapshot directory), or vramscope's own cache of what an earlier run fetched. One trait,
//! so that the model is assembled by one piece of code whichever it is.

use crate::errors::{http_error, Ctx};
use crate::http::Client;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use vramscope_formats::FormatError;

/// A file of the repo is not where this fetcher looks (a partial cache): try the next place.
pub const MISS: &str = "\u{0}miss";

pub fn miss() -> FormatError {
    FormatError::Remote(MISS.into())
}

pub fn is_miss(e: &FormatError) -> bool {
    matches!(e, FormatError::Remote(m) if m == MISS)
}

/// Reads a repo's files, whole or their first bytes.
pub trait Fetch {
    /// The repo's file names (relative paths).
    fn siblings(&self) -> &[String];
    /// A whole small file as text, at most `limit` bytes.
    fn text(&mut self, file: &str, limit: u64) -> Result<String, FormatError>;
    /// The first `need` bytes of a file (fewer only when the file is shorter), and its size.
    fn head(&mut self, file: &str, need: u64) -> Result<(Vec<u8>, u64), FormatError>;
    /// Whether `siblings` is the repo's whole listing (the Hub's, or a record of it), so a file
    /// it lacks is not in the repo; a cache directory may hold part of a repo.
    fn whole_listing(&self) -> bool {
        false
    }
}

/// What was fetched of one repo at one commit; kept in vramscope's cache so a second run needs
/// no network.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    pub repo: String,
    pub commit: String,
    pub siblings: Vec<String>,
    /// Whole small files (config.json, adapter_config.json, the safetensors index).
    pub texts: BTreeMap<String, String>,
    /// Weight files: size and the number of the file under `heads/` holding its first bytes.
    pub heads: BTreeMap<String, Head>,
    #[serde(skip)]
    pub head_bytes: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Head {
    pub size: u64,
    pub stored: u64,
}

fn utf8(file: &str, bytes: Vec<u8>) -> Result<String, FormatError> {
    String::from_utf8(bytes).map_err(|_| FormatError::malformed(file, "not UTF-8 text"))
}

/// Percent-encodes a repo file path for a URL (keeps `/` and unreserved characters).
pub fn encode_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------

/// The Hub: `{endpoint}/{repo}/resolve/{commit}/{file}`, recording what it fetched.
pub struct Remote<'a> {
    pub client: &'a Client,
    pub endpoint: &'a str,
    pub has_token: bool,
    pub record: Record,
}

impl Remote<'_> {
    fn url(&self, file: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            self.endpoint,
            self.record.repo,
            self.record.commit,
            encode_path(file)
        )
    }

    fn ctx<'b>(&'b self, file: &'b str) -> Ctx<'b> {
        Ctx {
            endpoint: self.endpoint,
            repo: &self.record.repo,
            revision: &self.record.commit,
            file: Some(file),
            has_token: self.has_token,
        }
    }
}

impl Fetch for Remote<'_> {
    fn siblings(&self) -> &[String] {
        &self.record.siblings
    }

    fn whole_listing(&self) -> bool {
        true
    }

    fn text(&mut self, file: &str, limit: u64) -> Result<String, FormatError> {
        let got = self
            .client
            .get(&self.url(file), None, limit)
            .map_err(|e| http_error(e, &self.ctx(file)))?;
        let text = utf8(file, got.body)?;
        self.record.texts.insert(file.to_string(), text.clone());
        Ok(text)
    }

    fn head(&mut self, file: &str, need: u64) -> Result<(Vec<u8>, u64), FormatError> {
        let got = self
            .client
            .get(&self.url(file), Some((0, need.max(1) - 1)), need)
            .map_err(|e| http_error(e, &self.ctx(file)))?;
        let size = got.total.ok_or_else(|| {
            FormatError::malformed(
                file,
                "the server gave neither Content-Range nor Content-Length for a range request",
            )
        })?;
        if (got.body.len() as u64) < need.min(size) {
            return Err(FormatError::malformed(
                file,
                format!(
                    "the server sent {} bytes of the {} asked for (file of {size} bytes)",
                    got.body.len(),
                    need.min(size)
                ),
            ));
        }
        self.record.heads.insert(
            file.to_string(),
            Head {
                size,
                stored: got.body.len() as u64,
            },
        );
        self.record
            .head_bytes
            .insert(file.to_string(), got.body.clone());
        Ok((got.body, size))
    }
}

// ---------------------------------------------------------------------------------------------

/// A record read back from vramscope's cache.
pub struct Cached(pub Record);

impl Fetch for Cached {
    fn siblings(&self) -> &[String] {
        &self.0.siblings
    }

    fn whole_listing(&self) -> bool {
        true
    }

    fn text(&mut self, file: &str, _limit: u64) -> Result<String, FormatError> {
        self.0.texts.get(file).cloned().ok_or_else(miss)
    }

    fn head(&mut self, file: &str, need: u64) -> Result<(Vec<u8>, u64), FormatError> {
        let h = self.0.heads.get(file).ok_or_else(miss)?;
        let bytes = self.0.head_bytes.get(file).ok_or_else(miss)?;
        if (bytes.len() as u64) < need.min(h.size) {
            return Err(miss());
        }
        Ok((
            bytes[..need.min(bytes.len() as u64) as usize].to_vec(),
            h.size,
        ))
    }
}

// ---------------------------------------------------------------------------------------------

/// A snapshot directory of the local Hugging Face cache (`snapshots/<commit>/`).
pub struct LocalDir {
    pub dir: PathBuf,
    pub siblings: Vec<String>,
}

/// Relative paths of the files under `dir` (two levels deep at most, bounded count).
pub fn list_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new(), 0)];
    while let Some((d, prefix, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten().take(10_000) {
            let name = e.file_name().to_string_lossy().to_string();
            let rel = format!("{prefix}{name}");
            let p = e.path();
            if p.is_dir() && depth < 2 {
                stack.push((p, format!("{rel}/"), depth + 1));
            } else if p.is_file() {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

impl Fetch for LocalDir {
    fn siblings(&self) -> &[String] {
        &self.siblings
    }

    fn text(&mut self, file: &str, limit: u64) -> Result<String, FormatError> {
        let path = self.dir.join(file);
        std::fs::symlink_metadata(&path).map_err(|_| miss())?;
        let shown = path.display().to_string();
        let bytes = vramscope_formats::files::read_regular(&path, limit, file)
            .map_err(|e| FormatError::io(&shown, e))?;
        utf8(&shown, bytes)
    }

    fn head(&mut self, file: &str, need: u64) -> Result<(Vec<u8>, u64), FormatError> {
        let path = self.dir.join(file);
        let shown = path.display().to_string();
        std::fs::symlink_metadata(&path).map_err(|_| miss())?;
        let (f, size) = vramscope_formats::files::open_regular(&path)
            .map_err(|e| FormatError::io(&shown, e))?;
        let mut buf = Vec::new();
        f.take(need)
            .read_to_end(&mut buf)
            .map_err(|e| FormatError::io(&shown, e))?;
        Ok((buf, size))
    }
}
