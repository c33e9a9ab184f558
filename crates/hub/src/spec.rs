//! What a MODEL argument names on the Hub: `ORG/NAME`, `ORG/NAME@REV`, `hf://ORG/NAME[@REV]`,
//! the repo's web URL (`https://huggingface.co/ORG/NAME[/tree/REV]`), and `ORG/NAME:QUANT` for a
//! GGUF repo (the llama.cpp `-hf` / ollama syntax).

/// A Hub repository reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    /// `ORG/NAME`.
    pub repo: String,
    /// Branch, tag or commit; `None` = `main`.
    pub revision: Option<String>,
    /// GGUF quant tag (`Q4_K_M`) choosing one file of a GGUF repo.
    pub quant: Option<String>,
    /// `hf://` or a URL: the Hub, never a preset.
    pub forced: bool,
}

impl HubRef {
    /// The revision asked for, `main` by default.
    pub fn rev(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }

    /// `ORG/NAME[@REV][:QUANT]` as a user writes it.
    pub fn display(&self) -> String {
        let mut s = self.repo.clone();
        if let Some(r) = &self.revision {
            s.push('@');
            s.push_str(r);
        }
        if let Some(q) = &self.quant {
            s.push(':');
            s.push_str(q);
        }
        s
    }
}

/// Longest repo name part the Hub accepts (its own limit is 96 characters per part).
const MAX_PART: usize = 96;

/// A Hub repo name part: letters, digits, `-`, `_`, `.`; not starting or ending with `-`/`.`,
/// no `..` or `--` (huggingface_hub `validate_repo_id`).
fn valid_part(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_PART
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !p.starts_with(['-', '.'])
        && !p.ends_with(['-', '.'])
        && !p.contains("..")
        && !p.contains("--")
}

/// A revision: a git ref name or a commit (no spaces, no `..`, bounded).
fn valid_revision(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 256
        && !r.contains("..")
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_quant(q: &str) -> bool {
    !q.is_empty() && q.len() <= 32 && q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses MODEL as a Hub reference; `None` when it is not one (a preset id, a path, a typo).
pub fn parse(arg: &str) -> Option<HubRef> {
    let arg = arg.trim();
    let (rest, forced) = if let Some(r) = arg.strip_prefix("hf://") {
        (r.to_string(), true)
    } else if let Some(r) = web_url_path(arg) {
        (r, true)
    } else {
        (arg.to_string(), false)
    };
    let (base, quant) = match rest.rsplit_once(':') {
        Some((b, q)) if valid_quant(q) => (b.to_string(), Some(q.to_string())),
        Some(_) => return None,
        None => (rest, None),
    };
    let (path, revision) = match base.split_once('@') {
        Some((p, r)) if valid_revision(r) => (p.to_string(), Some(r.to_string())),
        Some(_) => return None,
        None => (base, None),
    };
    let mut parts = path.trim_end_matches('/').splitn(3, '/');
    let org = parts.next()?;
    let name = parts.next()?;
    // `https://huggingface.co/ORG/NAME/tree/REV` (or /blob/REV/file): the revision after tree.
    let revision = match parts.next() {
        None => revision,
        Some(tail) if forced => match tail.split_once('/') {
            Some(("tree" | "blob" | "resolve", r)) if revision.is_none() => {
                let r = r.split('/').next().unwrap_or("");
                valid_revision(r).then(|| r.to_string())?.into()
            }
            _ if tail == "tree" || tail == "blob" => revision,
            _ => return None,
        },
        Some(_) => return None,
    };
    if !valid_part(org) || !valid_part(name) {
        return None;
    }
    Some(HubRef {
        repo: format!("{org}/{name}"),
        revision,
        quant,
        forced,
    })
}

/// The path part of a Hub web URL (`https://huggingface.co/ORG/NAME...`, also `hf.co`).
fn web_url_path(arg: &str) -> Option<String> {
    let rest = arg
        .strip_prefix("https://")
        .or_else(|| arg.strip_prefix("http://"))?;
    let (host, path) = rest.split_once('/')?;
    let host = host.strip_prefix("www.").unwrap_or(host);
    matches!(host, "huggingface.co" | "hf.co").then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(repo: &str, rev: Option<&str>, quant: Option<&str>, forced: bool) -> Option<HubRef> {
        Some(HubRef {
            repo: repo.into(),
            revision: rev.map(Into::into),
            quant: quant.map(Into::into),
            forced,
        })
    }

    #[test]
    fn every_documented_form_parses() {
        // (written, repo, revision, quantization, forced to the Hub)
        let cases = [
            ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", None, None, false),
            (
                "Qwen/Qwen3-8B@v1.0",
                "Qwen/Qwen3-8B",
                Some("v1.0"),
                None,
                false,
            ),
            (
                "hf://Qwen/Qwen3-8B@abc123",
                "Qwen/Qwen3-8B",
                Some("abc123"),
                None,
                true,
            ),
            (
                "https://huggingface.co/Qwen/Qwen3-8B",
                "Qwen/Qwen3-8B",
                None,
                None,
                true,
            ),
            (
                "https://huggingface.co/Qwen/Qwen3-8B/tree/dev",
                "Qwen/Qwen3-8B",
                Some("dev"),
                None,
                true,
            ),
            (
                "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
                "bartowski/Llama-3.2-1B-Instruct-GGUF",
                None,
                Some("Q4_K_M"),
                false,
            ),
        ];
        for (written, repo, rev, quant, forced) in cases {
            assert_eq!(parse(written), r(repo, rev, quant, forced), "{written}");
        }
    }

    #[test]
    fn non_repos_are_not_hub_refs() {
        for s in [
            "gpt2",
            "./model/config.json",
            "/abs/path",
            "a/b/c",
            "org/../x",
            "org/na me",
            "org/-x",
            "https://example.com/a/b",
            "org/name@",
            "org/name:bad-tag!",
            "",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,80}") {
            let _ = parse(&s);
        }
    }
}
