//! What one config file says, as the readers collect it: the job fields it sets (with the key
//! each came from), the `"auto"` values left for another file, the techniques vramscope cannot
//! express yet, and every key it did not read (so nothing is dropped silently).

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use vramscope_core::job::Job;

/// A file's parsed document with the keys read so far (dotted paths).
pub(crate) struct Doc<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
    used: &'a std::cell::RefCell<BTreeSet<String>>,
}

impl<'a> Doc<'a> {
    pub(crate) fn new(
        map: &'a Map<String, Value>,
        used: &'a std::cell::RefCell<BTreeSet<String>>,
    ) -> Self {
        Doc {
            map,
            prefix: String::new(),
            used,
        }
    }

    /// The dotted path of `key` in this document.
    pub(crate) fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Whether the key is present with a non-null value (does not mark it read).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !v.is_null())
    }

    /// The value of `key`, marking it read; `null` reads as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        let v = self.map.get(key)?;
        self.used.borrow_mut().insert(self.path(key));
        (!v.is_null()).then_some(v)
    }

    /// The object under `key` as a document of its own (its keys are tracked one by one).
    pub(crate) fn section(&self, key: &str) -> Option<Doc<'a>> {
        match self.map.get(key) {
            Some(Value::Object(m)) => Some(Doc {
                map: m,
                prefix: format!("{}.", self.path(key)),
                used: self.used,
            }),
            _ => None,
        }
    }

    /// The object under `key` as a document (see `section`): none when absent or null, an
    /// error naming the key when it holds something else.
    pub(crate) fn object(&self, key: &str) -> Result<Option<Doc<'a>>, String> {
        match self.section(key) {
            Some(d) => Ok(Some(d)),
            None if self.has(key) => Err(format!("{}: expected an object", self.path(key))),
            None => Ok(None),
        }
    }

    /// Marks keys read that carry nothing about memory, so they are not listed as ignored.
    pub(crate) fn skip(&self, keys: &[&str]) {
        for k in keys {
            if self.map.contains_key(*k) {
                self.used.borrow_mut().insert(self.path(k));
            }
        }
    }
}

/// The keys of `map` (dotted, under `prefix`) that no reader used, nulls left out: a key whose
/// object was partly read is listed by the sub-keys left unread.
pub(crate) fn unread(
    map: &Map<String, Value>,
    prefix: &str,
    used: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in map {
        let path = format!("{prefix}{k}");
        if used.contains(&path) || v.is_null() {
            continue;
        }
        let inner = format!("{path}.");
        match v {
            Value::Object(m) if used.iter().any(|u| u.starts_with(&inner)) => {
                out.extend(unread(m, &inner, used));
            }
            _ => out.push(path),
        }
    }
    out
}

/// How firmly a file states a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strength {
    /// The file states it.
    Stated,
    /// Implied by a setting whose meaning another file may decide (accelerate's
    /// `mixed_precision` when the trainer's own flags say otherwise, a model's load dtype):
    /// any stated value replaces it without a conflict.
    Weak,
}

/// One job field a file sets.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    /// Job field, dotted for nested objects (`parallel.zero`).
    pub path: &'static str,
    pub value: Value,
    /// The file's key(s) it was read from, for messages.
    pub key: String,
    pub strength: Strength,
}

/// Everything one file says.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    pub fields: Vec<Field>,
    /// Job fields the file leaves to `"auto"`: (field, the file's key).
    pub autos: Vec<(&'static str, String)>,
    /// One-line remarks: what a key was read as, techniques not modelled yet.
    pub notes: Vec<String>,
    /// Other config files this one names (DeepSpeed config paths): (key, path).
    pub refs: Vec<(String, String)>,
    /// DeepSpeed's batch triple, settled after every file is read.
    pub ds_batch: Option<Batch>,
}

impl Reading {
    /// Sets a job field as stated by the file.
    pub(crate) fn set(&mut self, path: &'static str, value: Value, key: impl Into<String>) {
        self.fields.push(Field {
            path,
            value,
            key: key.into(),
            strength: Strength::Stated,
        });
    }

    /// Sets a job field that any stated value elsewhere replaces.
    pub(crate) fn set_weak(&mut self, path: &'static str, value: Value, key: impl Into<String>) {
        self.fields.push(Field {
            path,
            value,
            key: key.into(),
            strength: Strength::Weak,
        });
    }

    pub(crate) fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// A technique: set as `field` when this build's job accepts the value, else listed as
    /// "read but not modelled yet" so it is never dropped silently.
    pub(crate) fn technique(&mut self, key: &str, path: &'static str, value: Value) {
        if accepts(path, &value) {
            self.set(path, value, key);
        } else {
            self.not_modelled(key, &format!("{path} {}", short(&value)));
        }
    }

    /// Sets `path` to `known`, vramscope's name for what `key` states, or lists `key` as read
    /// but not modelled when there is none.
    pub(crate) fn set_known(&mut self, path: &'static str, known: Option<&str>, key: String) {
        match known {
            Some(v) => self.set(path, json!(v), key),
            None => self.not_modelled(&key, path),
        }
    }

    /// A setting vramscope has no job field or model for yet.
    pub(crate) fn not_modelled(&mut self, key: &str, what: &str) {
        self.notes
            .push(format!("read but not modelled yet: {key} ({what})"));
    }

    /// Sets `path` to `key`'s value as `read` (`count_of`, `str_of`, ...) reads it, when `doc`
    /// states it.
    pub(crate) fn set_from<'d, T: Into<Value>>(
        &mut self,
        doc: &Doc<'d>,
        key: &str,
        path: &'static str,
        read: fn(&Doc<'d>, &str) -> Result<Option<T>, String>,
    ) -> Result<(), String> {
        if let Some(v) = read(doc, key)? {
            self.set(path, v.into(), key);
        }
        Ok(())
    }

    /// Sets `checkpointing` from `key`'s switch, when `doc` states it: on is `full` (every
    /// layer recomputed from its input), off is `none`.
    pub(crate) fn set_checkpointing(&mut self, doc: &Doc, key: &str) -> Result<(), String> {
        if let Some(on) = bool_of(doc, key)? {
            let how = if on { "full" } else { "none" };
            self.set("checkpointing", json!(how), key);
        }
        Ok(())
    }

    /// The value a field was set to, if any.
    pub(crate) fn value_of(&self, path: &str) -> Option<&Value> {
        self.fields
            .iter()
            .rev()
            .find(|f| f.path == path)
            .map(|f| &f.value)
    }
}

/// Whether this build's job parser accepts `value` for the (possibly dotted) field: a job with
/// only that field must deserialize and resolve. Later builds that add a field (the techniques
/// of issue 20) are picked up without a change here.
pub(crate) fn accepts(path: &str, value: &Value) -> bool {
    let mut obj = Map::new();
    super::set_path(&mut obj, path, value.clone());
    if path == "rl" {
        obj.insert("task".into(), Value::String("rl".into()));
    }
    serde_json::from_value::<Job>(Value::Object(obj))
        .ok()
        .is_some_and(|j| j.resolve(None).is_ok())
}

/// A value for a message: strings bare, everything else as JSON.
pub(crate) fn short(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // `2e8` parses as a float: shown as the whole number it is.
        Value::Number(n)
            if n.as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e16) =>
        {
            format!("{}", n.as_f64().unwrap_or(0.0) as i64)
        }
        other => other.to_string(),
    }
}

/// Whether a value is DeepSpeed's / the trainers' `"auto"`.
pub(crate) fn is_auto(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("auto"))
}

/// A boolean as YAML and JSON files write it (`true`, `True`, `"true"`, `yes`, 1).
pub(crate) fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Some(true),
            "false" | "no" | "off" | "0" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A whole number ≥ 0 as files write it (`8`, `8.0`, `1e9`, `"8"`).
pub(crate) fn as_count(v: &Value) -> Option<u64> {
    let f = match v {
        Value::Number(n) => n.as_u64().map(|u| u as f64).or_else(|| n.as_f64())?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= 9.0e15).then_some(f as u64)
}

/// A whole number for `key`, or an error naming the key.
pub(crate) fn count_of(doc: &Doc, key: &str) -> Result<Option<u64>, String> {
    typed_of(doc, key, "a whole number", as_count)
}

/// A boolean for `key`, or an error naming the key.
pub(crate) fn bool_of(doc: &Doc, key: &str) -> Result<Option<bool>, String> {
    typed_of(doc, key, "true or false", as_bool)
}

/// `key`'s value read by `read`, or an error naming the key and `what` it expected.
fn typed_of<T>(
    doc: &Doc,
    key: &str,
    what: &str,
    read: fn(&Value) -> Option<T>,
) -> Result<Option<T>, String> {
    match doc.get(key) {
        None => Ok(None),
        Some(v) => read(v)
            .map(Some)
            .ok_or_else(|| format!("{}: expected {what} (got {})", doc.path(key), short(v))),
    }
}

/// A `peft` section of `method` (`lora`, `qlora`): `rank` from `rank_key` and `alpha` from
/// `lora_alpha`, each with the format's default when it has one (else left to the job's).
pub(crate) fn lora_of(
    doc: &Doc,
    method: &str,
    rank_key: &str,
    (rank, alpha): (Option<u64>, Option<f64>),
) -> Result<Map<String, Value>, String> {
    let mut p = Map::new();
    p.insert("method".into(), json!(method));
    if let Some(rank) = count_of(doc, rank_key)?.or(rank) {
        p.insert("rank".into(), json!(rank));
    }
    if let Some(a) = number_of(doc, "lora_alpha")?.or(alpha) {
        p.insert("alpha".into(), json!(a));
    }
    Ok(p)
}

/// A string for `key`, or an error naming the key.
pub(crate) fn str_of<'a>(doc: &Doc<'a>, key: &str) -> Result<Option<&'a str>, String> {
    match doc.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(format!("{}: expected text (got {v})", doc.path(key))),
    }
}

/// A number (integer or float) for `key`, or an error naming the key.
pub(crate) fn number_of(doc: &Doc, key: &str) -> Result<Option<f64>, String> {
    match doc.get(key) {
        None => Ok(None),
        Some(v) => {
            let f = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            match f {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(format!(
                    "{}: expected a number (got {})",
                    doc.path(key),
                    short(v)
                )),
            }
        }
    }
}

/// A list of module names: a YAML/JSON list of strings, or one comma-separated string.
pub(crate) fn names_of(doc: &Doc, key: &str) -> Result<Option<Vec<String>>, String> {
    let bad = |v: &Value| format!("{}: expected module names (got {v})", doc.path(key));
    match doc.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        )),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string).ok_or_else(|| bad(t)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(v) => Err(bad(v)),
    }
}

/// DeepSpeed's three batch figures as the file gives them: `None` absent, `Some(None)` "auto".
#[derive(Debug, Clone, Default)]
pub(crate) struct Batch {
    pub train: Option<Option<u64>>,
    pub micro: Option<Option<u64>>,
    pub accum: Option<Option<u64>>,
}
