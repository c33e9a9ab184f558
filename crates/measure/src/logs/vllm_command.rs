//! The `vllm serve MODEL --flag value ...` command line a vLLM log often starts with (users
//! paste it above the log; shells echo it). The flags state what the engine was asked for —
//! `--gpu-memory-utilization`, `--max-model-len`, the parallel sizes, the KV dtype — as vLLM's
//! `EngineArgs.add_cli_args` (`vllm/engine/arg_utils.py`) spells them, `--flag value` or
//! `--flag=value`, continued over lines ending in `\`. Where the engine's own lines state a
//! setting as it applied it (the config line's `max_seq_len`, the profiling line's
//! `gpu_memory_utilization`), theirs is kept.

use super::put;
use serde_json::{json, Map, Value};

/// Lines looked at for the command before the log proper begins.
const LEADING_LINES: usize = 5;

/// The command's words after `serve` (or the OpenAI server module), when one of the log's
/// first non-empty lines runs vLLM; continuation lines (`\` at the end) joined.
pub fn serve_words(text: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut command = String::new();
    for line in lines.by_ref().take(LEADING_LINES) {
        if starts_vllm(line) {
            command.push_str(line.trim_end().trim_end_matches('\\'));
            if !line.trim_end().ends_with('\\') {
                break;
            }
            for more in lines.by_ref() {
                command.push(' ');
                command.push_str(more.trim_end().trim_end_matches('\\'));
                if !more.trim_end().ends_with('\\') {
                    break;
                }
            }
            break;
        }
    }
    let words = split_words(&command);
    let start = words
        .iter()
        .position(|w| w == "serve" || w == "vllm.entrypoints.openai.api_server")?;
    Some(words[start + 1..].to_vec())
}

/// `vllm serve` or `python -m vllm.entrypoints.openai.api_server`, after a prompt or
/// environment assignments.
fn starts_vllm(line: &str) -> bool {
    line.contains("vllm serve ") || line.contains("vllm.entrypoints.openai.api_server")
}

/// Shell words: blanks separate, single and double quotes group (and are dropped).
fn split_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The flags' values by name (without dashes), and the model: the first word that is not a
/// flag or a flag's value, else `--model`.
fn flags(words: &[String]) -> (Map<String, Value>, Option<String>) {
    let mut out = Map::new();
    let mut model = None;
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if let Some(flag) = w.strip_prefix("--").or_else(|| w.strip_prefix('-')) {
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => {
                    let next = words.get(i + 1).filter(|v| !v.starts_with('-'));
                    if next.is_some() {
                        i += 1;
                    }
                    (flag, next.cloned())
                }
            };
            // vLLM's parser takes `--max_model_len` for `--max-model-len`.
            let name = name.replace('_', "-");
            out.insert(name, value.map_or(Value::Bool(true), Value::String));
        } else if model.is_none() {
            model = Some(w.clone());
        }
        i += 1;
    }
    let model = model.or_else(|| out.get("model").and_then(Value::as_str).map(String::from));
    (out, model)
}

/// Lays the command's memory settings into the report's job and engine: the model, the engine's
/// `gpu_memory_utilization`, `max_model_len`, `max_num_seqs`, `max_num_batched_tokens` and
/// `block_size`, the job's tensor/pipeline parallel sizes and KV dtype. A value that does not
/// read as its number is left out (the engine's own lines may still state it).
pub fn read(text: &str, job: &mut Map<String, Value>, engine: &mut Map<String, Value>) {
    let Some(words) = serve_words(text) else {
        return;
    };
    let (f, model) = flags(&words);
    let text_of = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| f.get(*n).and_then(Value::as_str))
            .map(str::trim)
    };
    let count = |names: &[&str]| text_of(names).and_then(|v| v.parse::<u64>().ok());
    if let Some(m) = model {
        put(job, "model", model_name(&m));
    }
    if let Some(u) = text_of(&["gpu-memory-utilization"]).and_then(|v| v.parse::<f64>().ok()) {
        if u.is_finite() {
            put(engine, "gpu_memory_utilization", u);
        }
    }
    let engine_counts = [
        ("max-model-len", "max_model_len"),
        ("max-num-seqs", "max_num_seqs"),
        ("max-num-batched-tokens", "max_num_batched_tokens"),
        ("block-size", "block_size"),
    ];
    for (flag, key) in engine_counts {
        if let Some(n) = count(&[flag]) {
            put(engine, key, n);
        }
    }
    let tp = count(&["tensor-parallel-size", "tp"]);
    let pp = count(&["pipeline-parallel-size", "pp"]);
    if tp.is_some() || pp.is_some() {
        let (tp, pp) = (tp.unwrap_or(1), pp.unwrap_or(1));
        if let Some(gpus) = tp.checked_mul(pp) {
            put(job, "parallel", json!({"gpus": gpus, "tp": tp, "pp": pp}));
        }
    }
    if text_of(&["kv-cache-dtype"]).is_some_and(|k| k.starts_with("fp8")) {
        put(job, "kv_dtype", "fp8");
    }
}

/// `org/name` from a Hugging Face cache path (`.../models--org--name/snapshots/<sha>`), else
/// the name as given.
pub(super) fn model_name(m: &str) -> String {
    m.split('/')
        .find_map(|part| part.strip_prefix("models--"))
        .map(|s| s.replacen("--", "/", 1))
        .unwrap_or_else(|| m.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_quotes_and_continuations() {
        let log = "CUDA_VISIBLE_DEVICES=0,1 \\\n  vllm serve /m \\\n  --kv-transfer-config \
                   '{\"a\": 1}' \\\n  --max-model-len=4096\nINFO 01-01 rest of the log\n";
        assert_eq!(
            serve_words(log).unwrap(),
            [
                "/m",
                "--kv-transfer-config",
                "{\"a\": 1}",
                "--max-model-len=4096"
            ]
        );
        assert_eq!(serve_words("INFO a\nINFO b\n"), None);
        assert_eq!(split_words("a '' b"), ["a", "", "b"]);
    }

    #[test]
    fn flags_and_model() {
        let words: Vec<String> = ["--port", "8000", "org/m", "--enforce-eager", "-tp", "2"]
            .map(String::from)
            .to_vec();
        let (f, model) = flags(&words);
        assert_eq!(model.as_deref(), Some("org/m"));
        assert_eq!(f["enforce-eager"], Value::Bool(true));
        assert_eq!(f["tp"], Value::String("2".into()));
    }
}
