//! Helpers shared by this crate's integration tests: the binary, where the fixtures lie, its
//! JSON answers and its one-line errors, and temporary job files.
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

pub mod http;

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

#[path = "../../../core/tests/common/contract_components.rs"]
pub mod contract_components;
#[path = "../../../core/tests/common/shared_dir.rs"]
mod shared_dir;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;
#[path = "../../../core/tests/common/warnings.rs"]
#[allow(dead_code)] // Not every test binary that includes this module uses every helper.
mod warnings;
#[allow(unused_imports)] // Not every test binary that includes this module uses them.
pub use warnings::{assert_never_warns, assert_warns};

/// A file of ../shared/fixtures (checked to exist, see [`shared`]).
pub fn shared_fixture(rel: &str) -> String {
    shared(format!(
        "{}/../../../shared/fixtures/{rel}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// A file under another crate of this workspace, e.g. `in_crate("measure/tests/fixtures", f)`.
pub fn in_crate(dir: &str, rel: &str) -> String {
    format!("{}/../{dir}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// An engine log of `crates/measure/tests/fixtures/logs`.
pub fn log_fixture(rel: &str) -> String {
    in_crate("measure/tests/fixtures/logs", rel)
}

/// A diffusers pipeline of `crates/formats/tests/fixtures/diffusers`.
pub fn diffusers_fixture(rel: &str) -> String {
    in_crate("formats/tests/fixtures/diffusers", rel)
}

/// The `vramscope` binary, with the environment the test runs in.
pub fn vramscope() -> Command {
    Command::cargo_bin("vramscope").unwrap()
}

/// The binary without the variables that change its output: backtraces, colour, the
/// terminal's width.
pub fn plain_vramscope() -> Command {
    let mut c = vramscope();
    for k in [
        "RUST_BACKTRACE",
        "RUST_LIB_BACKTRACE",
        "NO_COLOR",
        "CLICOLOR_FORCE",
        "COLUMNS",
    ] {
        c.env_remove(k);
    }
    c
}

/// `out`'s stdout as JSON, after checking the command succeeded (else a panic with the
/// command's stderr).
pub fn json_ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// `cmd` run: its stdout as JSON, after checking it succeeded (else a panic naming `what`
/// and the command's stderr).
pub fn json_of_cmd(cmd: &mut Command, what: &dyn std::fmt::Debug) -> Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// `cmd` run: its stdout as text, after checking it exited `code` (else a panic with the
/// command's stderr).
pub fn text_with_code(cmd: &mut Command, code: i32) -> String {
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// `cmd` run: its stdout as text, after checking it succeeded.
pub fn text_of_cmd(cmd: &mut Command) -> String {
    text_with_code(cmd, 0)
}

/// `vramscope ARGS` with colour off (`NO_COLOR=1`): its whole output, whatever the exit code.
pub fn run_uncoloured(args: &[&str]) -> Output {
    vramscope()
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `vramscope ARGS`: its stdout as text, after checking it succeeded.
pub fn run_text(args: &[&str]) -> String {
    text_of_cmd(vramscope().args(args))
}

/// Checks that every one of `wants` is in `text`.
pub fn assert_contains_all(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want} not in:\n{text}");
    }
}

/// `vramscope inspect MODEL`'s terminal view (run as [`plain_vramscope`]), checked to hold
/// every one of `wants`.
pub fn inspect_shows(model: &str, wants: &[&str]) {
    let text = text_of_cmd(plain_vramscope().args(["inspect", model]));
    assert_contains_all(&text, wants);
}

/// A fixture of `crates/formats/tests/fixtures`.
pub fn formats_fixture(rel: &str) -> String {
    in_crate("formats/tests/fixtures", rel)
}

/// The strings of the JSON array `list` (a panic on anything else).
pub fn strs(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_else(|| panic!("not a string: {v}")))
        .collect()
}

/// The string `key` of every entry of the JSON array `list`.
pub fn strs_at<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|v| v[key].as_str().unwrap_or_else(|| panic!("no {key} in {v}")))
        .collect()
}

/// `vramscope ARGS`: its stdout as JSON, after checking it succeeded.
pub fn run_json(args: &[&str]) -> Value {
    json_of_cmd(vramscope().args(args), &args)
}

/// The error of a refused command: exit 2, nothing on stdout, one line on stderr (returned
/// trimmed).
pub fn refused_with(out: &Output, what: &dyn std::fmt::Debug) -> String {
    assert_eq!(out.status.code(), Some(2), "{what:?}");
    assert!(out.stdout.is_empty(), "stdout on error: {:?}", out.stdout);
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    err
}

/// `text` written to `name` in this test binary's own temporary folder (`tag` names the
/// binary: the binaries of a crate run at once).
pub fn temp_file(tag: &str, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The entry of the JSON array `list` whose `key` is `name`, or a panic naming it.
pub fn entry<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .find(|e| e[key] == name)
        .unwrap_or_else(|| panic!("no {key} {name} in {list}"))
}

/// A command line's words as the shell splits a line without quotes: `argv("fit gpt2 --json")`.
pub fn argv(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}
