//! Training frameworks' own configs read into job fields (`--from FILE`, the JSON API's
//! `"from"`): DeepSpeed JSON, accelerate YAML, Hugging Face TrainingArguments (JSON/YAML),
//! axolotl, LLaMA-Factory, torchtune and TRL YAML, torchtitan TOML. The format is recognised by the keys a file
//! holds, never by its name. Each reader reports the job fields it sets (with the key each came
//! from), the `"auto"` values it leaves to another file, the techniques vramscope cannot
//! express yet, and the keys it did not read: nothing is dropped silently.
//!
//! Files are merged in order. A field two files of the same format set is taken from the later
//! file (an override layer); two files of different formats that state different values for a
//! field are an error naming both, as transformers' DeepSpeed integration refuses a DeepSpeed
//! config that contradicts the TrainingArguments. A value a file only implies (accelerate's
//! `mixed_precision`, a model's load dtype) gives way to a stated one.

mod accelerate;
mod axolotl;
mod deepspeed;
mod doc;
mod launch_script;
mod llama_factory;
mod reentrant;
mod torchtitan;
mod torchtune;
mod training_args;
mod trl;

use crate::error::{FormatError, Result};
use doc::{Doc, Reading, Strength};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Config files are a few kilobytes; anything past this is not one (and is not parsed).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Deepest `[`/`{` nesting a YAML config may have. libyaml's scanner does work quadratic in the
/// open flow levels before the deserializer's recursion limit is reached (20,000 open `[` took
/// 23 s in a debug build), so deeper text is refused before it is parsed.
const MAX_FLOW_DEPTH: usize = 64;

/// Largest (bytes × flow openers) a YAML config may have. libyaml's scanner keeps one
/// possible simple key per open flow level and walks them all for every token
/// (`yaml_parser_stale_simple_keys` in libyaml's scanner.c), so its work grows as the depth
/// times the tokens. The depth `flow_depth` sees depends on which quotes it takes to open a
/// quoted scalar, and YAML's plain scalars make that guess fallible (`zzz: -'` is plain, so a
/// `[` after it counts: 100,000 deep in 200 kB took 26 s, issue #35). Every `[` and `{` byte,
/// quoted or not, bounds the depth from above whatever the quoting, so this product bounds
/// the scanner's work: 64 levels over the whole 1 MiB, or thousands of braces (a chat
/// template's) in a recipe of a few kilobytes. Real recipes are a few kilobytes with a
/// handful of brackets (the fixtures: at most 5).
const MAX_FLOW_WORK: usize = MAX_FLOW_DEPTH * MAX_CONFIG_BYTES;

/// One config as given: a name for messages (a path, or the API's `name`) and its text.
#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    pub text: String,
}

/// The job fields the files give, and one-line notes for the Report's warnings: per file what
/// it set, what it left to `"auto"`, what is not modelled yet, and what was ignored.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    pub job: Map<String, Value>,
    pub notes: Vec<String>,
}

/// A referenced file (a DeepSpeed config named by another config), looked up by the caller:
/// `(referrer's name, path as written)` → `None` when there is no such file.
pub type Fetch<'a> = dyn Fn(&str, &str) -> Option<std::result::Result<Input, String>> + 'a;

/// The formats read, recognised by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    DeepSpeed,
    Accelerate,
    Torchtune,
    Torchtitan,
    LlamaFactory,
    Axolotl,
    Trl,
    TrainingArguments,
    LaunchScript,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::DeepSpeed => "DeepSpeed config",
            Kind::Accelerate => "accelerate config",
            Kind::Torchtune => "torchtune recipe",
            Kind::Torchtitan => "torchtitan config",
            Kind::LlamaFactory => "LLaMA-Factory recipe",
            Kind::Axolotl => "axolotl recipe",
            Kind::Trl => "TRL trainer config",
            Kind::TrainingArguments => "TrainingArguments",
            Kind::LaunchScript => "launch script",
        }
    }
}

/// Which format a parsed document is, by its keys (most specific first).
pub fn detect(m: &Map<String, Value>) -> Option<Kind> {
    if deepspeed::detect(m) {
        Some(Kind::DeepSpeed)
    } else if accelerate::detect(m) {
        Some(Kind::Accelerate)
    } else if torchtune::detect(m) {
        Some(Kind::Torchtune)
    } else if torchtitan::detect(m) {
        Some(Kind::Torchtitan)
    } else if llama_factory::detect(m) {
        Some(Kind::LlamaFactory)
    } else if axolotl::detect(m) {
        Some(Kind::Axolotl)
    } else if trl::detect(m).is_some() {
        Some(Kind::Trl)
    } else if training_args::detect(m) {
        Some(Kind::TrainingArguments)
    } else {
        None
    }
}

/// Parses a config's text: JSON when it starts with `{`, TOML when it parses as a non-empty TOML
/// table (torchtitan's configs; YAML's `key: value` is never valid TOML), else YAML. The top
/// level must be a mapping.
pub fn parse(input: &Input) -> Result<Map<String, Value>> {
    let bad = |m: String| FormatError::malformed(&input.name, m);
    if input.text.len() > MAX_CONFIG_BYTES {
        return Err(bad(format!(
            "{} bytes is too large for a training config (limit {MAX_CONFIG_BYTES})",
            input.text.len()
        )));
    }
    let value: Value = if input.text.trim_start().starts_with('{') {
        serde_json::from_str(&input.text).map_err(|e| bad(format!("invalid JSON: {e}")))?
    } else if let Some(t) = toml_table(&input.text) {
        t
    } else {
        if flow_depth(&input.text) > MAX_FLOW_DEPTH {
            return Err(bad(format!(
                "invalid YAML: nested deeper than {MAX_FLOW_DEPTH} levels of [ ] or {{ }}"
            )));
        }
        check_flow_work(&input.text).map_err(bad)?;
        yaml_serde::from_str(&input.text).map_err(|e| {
            bad(format!(
                "invalid YAML: {}",
                e.to_string().replace('\n', " ")
            ))
        })?
    };
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Err(bad("empty: no settings to read".into())),
        other => Err(bad(format!(
            "expected a mapping of settings at the top (got {})",
            kind_of(&other)
        ))),
    }
}

/// The text as a TOML document, when it is one with at least one key.
fn toml_table(text: &str) -> Option<Value> {
    match toml::from_str::<Value>(text) {
        Ok(Value::Object(m)) if !m.is_empty() => Some(Value::Object(m)),
        _ => None,
    }
}

/// The deepest nesting of flow collections (`[`, `{`) outside quoted scalars and comments:
/// what the YAML parser would open.
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut prev = '\n';
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            // A quote opens a scalar only where a token starts (`don't` is plain text).
            (None, '"' | '\'') if prev.is_whitespace() || ":,[{-".contains(prev) => quote = Some(c),
            (None, '#') if prev.is_whitespace() => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
            }
            (None, '[' | '{') => {
                depth += 1;
                max = max.max(depth);
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = c;
    }
    max
}

/// Refuses text whose length times its count of `[` and `{` bytes passes `MAX_FLOW_WORK`.
fn check_flow_work(text: &str) -> std::result::Result<(), String> {
    let openers = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if openers.saturating_mul(text.len()) <= MAX_FLOW_WORK {
        return Ok(());
    }
    Err(format!(
        "invalid YAML: {openers} '[' or '{{' in {} bytes is more than a config has (at most \
         {MAX_FLOW_WORK} bytes × brackets, so that parsing stays linear)",
        text.len()
    ))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "a list",
        Value::String(_) => "text",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "nothing",
        Value::Object(_) => "a mapping",
    }
}

/// One file read: its name, format, what it says, and the keys it did not read.
struct Read {
    name: String,
    kind: Kind,
    reading: Reading,
    ignored: Vec<String>,
}

/// Reads one config: parse, recognise, read. A launch script (shell) is read line by line for
/// the environment it sets (`launch_script.rs`).
fn read_one(input: &Input) -> Result<Read> {
    if input.text.len() <= MAX_CONFIG_BYTES && launch_script::detect(&input.text) {
        let mut reading = Reading::default();
        launch_script::read(&input.text, &mut reading)
            .map_err(|m| FormatError::malformed(&input.name, m))?;
        return Ok(Read {
            name: input.name.clone(),
            kind: Kind::LaunchScript,
            reading,
            ignored: Vec::new(),
        });
    }
    let map = parse(input)?;
    let kind = detect(&map).ok_or_else(|| {
        FormatError::malformed(
            &input.name,
            "not a config vramscope reads (DeepSpeed JSON, accelerate YAML, TrainingArguments, \
             axolotl, LLaMA-Factory, torchtune, TRL or torchtitan TOML, a launch script setting \
             PYTORCH_CUDA_ALLOC_CONF): none of their keys is present",
        )
    })?;
    let used = RefCell::new(BTreeSet::new());
    let doc = Doc::new(&map, &used);
    let mut reading = Reading::default();
    let res = match kind {
        Kind::DeepSpeed => deepspeed::read(&doc, &mut reading),
        Kind::Accelerate => accelerate::read(&doc, &mut reading),
        Kind::Torchtune => torchtune::read(&doc, &mut reading),
        Kind::Torchtitan => torchtitan::read(&doc, &mut reading),
        Kind::LlamaFactory => llama_factory::read(&doc, &mut reading),
        Kind::Axolotl => axolotl::read(&doc, &mut reading),
        Kind::Trl => trl::read(&doc, &mut reading, trl::detect(&map).expect("detected")),
        Kind::TrainingArguments => training_args::read(&doc, &mut reading),
        // Recognised by its text before parsing, never by keys.
        Kind::LaunchScript => launch_script::read(&input.text, &mut reading),
    };
    res.map_err(|m| FormatError::malformed(&input.name, m))?;
    let ignored = doc::unread(&map, "", &used.borrow());
    Ok(Read {
        name: input.name.clone(),
        kind,
        reading,
        ignored,
    })
}

/// The base name of a path as written (`examples/deepspeed/ds_z3.json` → `ds_z3.json`).
fn base_name(p: &str) -> &str {
    p.rsplit(['/', '\\']).next().unwrap_or(p)
}

/// Reads every input, and after each the DeepSpeed configs it names: from the inputs when one
/// has that base name, else through `fetch`.
fn read_all(inputs: &[Input], fetch: &Fetch) -> Result<Vec<Read>> {
    let mut out = Vec::new();
    for input in inputs {
        let first = read_one(input)?;
        let refs = first.reading.refs.clone();
        out.push(first);
        for (key, path) in refs {
            let given = inputs
                .iter()
                .find(|i| base_name(&i.name) == base_name(&path));
            let at = out.len() - 1;
            if let Some(g) = given {
                out[at]
                    .reading
                    .note(format!("{key}: {path} is read from {}", g.name));
                continue;
            }
            match fetch(&input.name, &path) {
                Some(Ok(file)) => {
                    out[at].reading.note(format!("{key}: read {}", file.name));
                    out.push(read_one(&file)?);
                }
                Some(Err(e)) => {
                    return Err(FormatError::malformed(&input.name, format!("{key}: {e}")))
                }
                None => out[at].reading.note(format!(
                    "{key}: {path} was not found beside this file, so its settings are not read \
                     (give it with --from)"
                )),
            }
        }
    }
    Ok(out)
}

/// Where a merged field's value came from.
struct Origin {
    file: usize,
    key: String,
    strength: Strength,
    value: Value,
}

/// Reads and merges the configs into job fields (see the module doc for the rules).
pub fn resolve(inputs: &[Input], fetch: &Fetch) -> Result<Resolved> {
    let reads = read_all(inputs, fetch)?;
    let mut merged: Vec<(&'static str, Origin)> = Vec::new();
    for (i, rd) in reads.iter().enumerate() {
        for f in &rd.reading.fields {
            merge_field(&reads, &mut merged, i, f)?;
        }
    }
    let mut job = Map::new();
    for (path, o) in &merged {
        check_field(path, &o.value)
            .map_err(|m| FormatError::malformed(&reads[o.file].name, format!("{}: {m}", o.key)))?;
        set_path(&mut job, path, o.value.clone());
    }
    let mut notes = Vec::new();
    let trl = reads.iter().any(|rd| rd.kind == Kind::Trl);
    reentrant::settle(&mut job, trl, &mut notes);
    for rd in &reads {
        if let Some(b) = &rd.reading.ds_batch {
            let mut n = Vec::new();
            deepspeed::settle(b, &mut job, &mut n)
                .map_err(|m| FormatError::malformed(&rd.name, m))?;
            notes.extend(n.into_iter().map(|l| format!("from {}: {l}", rd.name)));
        }
    }
    for (i, rd) in reads.iter().enumerate() {
        notes.extend(file_notes(i, rd, &merged, &job));
    }
    Ok(Resolved { job, notes })
}

/// Lays one file's field over what earlier files gave.
fn merge_field(
    reads: &[Read],
    merged: &mut Vec<(&'static str, Origin)>,
    file: usize,
    f: &doc::Field,
) -> Result<()> {
    let new = Origin {
        file,
        key: f.key.clone(),
        strength: f.strength,
        value: f.value.clone(),
    };
    let Some(slot) = merged.iter_mut().find(|(p, _)| *p == f.path) else {
        merged.push((f.path, new));
        return Ok(());
    };
    let old = &slot.1;
    let same = old.value == new.value;
    let keeps_stated = old.strength == Strength::Stated && new.strength == Strength::Weak;
    let overrides = old.file == file
        || old.strength == Strength::Weak
        || reads[old.file].kind == reads[file].kind;
    if !same && !keeps_stated && !overrides {
        let (a, b) = (&reads[old.file].name, &reads[file].name);
        return Err(FormatError::malformed(
            format!("{a} and {b}"),
            format!(
                "{}: {a} says {} ({}), {b} says {} ({}); the two files contradict each other",
                f.path,
                doc::short(&old.value),
                old.key,
                doc::short(&new.value),
                new.key
            ),
        ));
    }
    let replace = !same && !keeps_stated;
    if replace {
        slot.1 = new;
    }
    Ok(())
}

/// Checks one field as the job's validator does, so a bad value is named with its file and key.
fn check_field(path: &str, value: &Value) -> std::result::Result<(), String> {
    let mut obj = Map::new();
    set_path(&mut obj, path, value.clone());
    if path == "rl" {
        obj.insert("task".into(), Value::String("rl".into()));
    }
    if path == reentrant::FIELD {
        // The kind of full checkpointing: checked beside the checkpointing it names.
        obj.insert("checkpointing".into(), Value::String("full".into()));
    }
    let job: vramscope_core::job::Job =
        serde_json::from_value(Value::Object(obj)).map_err(|e| e.to_string())?;
    job.resolve(None).map(|_| ()).map_err(|e| e.to_string())
}

/// One file's lines: what it set (that survived the merge), `"auto"` values no file resolved,
/// its remarks, and the keys it ignored.
fn file_notes(
    i: usize,
    rd: &Read,
    merged: &[(&'static str, Origin)],
    job: &Map<String, Value>,
) -> Vec<String> {
    let mut set: Vec<String> = merged
        .iter()
        .filter(|(_, o)| o.file == i)
        .map(|(p, o)| format!("{p} {}", doc::short(&o.value)))
        .collect();
    set.dedup();
    let mut out = vec![format!(
        "from {} ({}): {}",
        rd.name,
        rd.kind.describe(),
        if set.is_empty() {
            "no job field".to_string()
        } else {
            set.join(", ")
        }
    )];
    for (field, key) in &rd.reading.autos {
        if get_path(job, field).is_none() {
            out.push(format!(
                "from {}: {key} is \"auto\" and no other file gives {field}: left to the flags or \
                 vramscope's default (for precision: bf16 where the GPU has it, else fp16)",
                rd.name
            ));
        }
    }
    out.extend(
        rd.reading
            .notes
            .iter()
            .map(|n| format!("from {}: {n}", rd.name)),
    );
    if !rd.ignored.is_empty() {
        out.push(format!(
            "from {}: ignored (no bearing on the estimate, or not known): {}",
            rd.name,
            rd.ignored.join(", ")
        ));
    }
    out
}

/// Sets a dotted path (`parallel.zero`) in a JSON object, creating the objects on the way.
pub(crate) fn set_path(obj: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            obj.insert(path.to_string(), value);
        }
        Some((head, rest)) => {
            let slot = obj
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                set_path(inner, rest, value);
            }
        }
    }
}

/// The value at a dotted path.
fn get_path<'a>(obj: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    match path.split_once('.') {
        None => obj.get(path),
        Some((head, rest)) => get_path(obj.get(head)?.as_object()?, rest),
    }
}
