//! Helpers shared by this crate's integration tests: the binary, where the fixtures lie, its
//! JSON answers and its one-line errors, and temporary job files.
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

pub mod http;

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

#[path = "../../../core/tests/common/shared_dir.rs"]
mod shared_dir;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;

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
pub fn temp_file(tag: &str, name: &str, text: &str) -> PathBuf {
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
