//! Checks the GPU catalog before it is compiled in: `data/gpus.json` (inside this crate, so the
//! crate packages with its data) must exist, be a non-empty JSON list, and give every entry the
//! fields `gpu::Gpu` requires with the right types and a unique id. `gpu.rs` `include_str!`s the
//! same file, so a binary whose catalog would fail to load at run time is never built.
//!
//! The path comes from the build script's run-time `CARGO_MANIFEST_DIR` (as in
//! `crates/formats/build.rs`), so a target directory shared between checkouts reads this one's.

use std::{collections::HashSet, env, fs, path::Path};

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| fail("CARGO_MANIFEST_DIR is not set (run the build through cargo)"));
    let path = Path::new(&manifest).join("data").join("gpus.json");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = fs::read_to_string(&path).unwrap_or_else(|e| {
        fail(&format!(
            "cannot read the GPU catalog {}: {e}",
            path.display()
        ))
    });
    let catalog: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| fail(&format!("{} is not valid JSON: {e}", path.display())));
    let entries = catalog
        .as_array()
        .unwrap_or_else(|| fail(&format!("{} must be a JSON list", path.display())));
    if entries.is_empty() {
        fail(&format!("{} lists no GPUs", path.display()));
    }
    let mut ids = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let id = check_entry(entry).unwrap_or_else(|e| {
            fail(&format!("{} entry {i}: {e}", path.display()));
        });
        if !ids.insert(id.clone()) {
            fail(&format!("{}: id '{id}' appears twice", path.display()));
        }
    }
}

/// The entry's id when it has every field `gpu::Gpu` requires, else what is wrong.
fn check_entry(entry: &serde_json::Value) -> Result<String, String> {
    let obj = entry.as_object().ok_or("not a JSON object")?;
    for key in ["id", "name", "vendor", "arch", "source"] {
        match obj.get(key).and_then(|v| v.as_str()) {
            Some(s) if !s.is_empty() => {}
            _ => return Err(format!("\"{key}\" must be a non-empty string")),
        }
    }
    for key in ["memory_bytes", "marketing_gb"] {
        match obj.get(key).and_then(|v| v.as_u64()) {
            Some(n) if n > 0 => {}
            _ => return Err(format!("\"{key}\" must be a positive integer")),
        }
    }
    if !obj.get("bf16").is_some_and(|v| v.is_boolean()) {
        return Err("\"bf16\" must be true or false".into());
    }
    if let Some(a) = obj.get("aliases") {
        if !a
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_string()))
        {
            return Err("\"aliases\" must be a list of strings".into());
        }
    }
    if obj.get("unified_memory").is_some_and(|v| !v.is_boolean()) {
        return Err("\"unified_memory\" must be true or false".into());
    }
    if let Some(p) = obj.get("perf") {
        check_perf(p).map_err(|e| format!("perf: {e}"))?;
    }
    Ok(obj["id"].as_str().unwrap_or_default().to_string())
}

/// The optional `perf` object: positive numbers where given, a source, known dtypes only.
fn check_perf(p: &serde_json::Value) -> Result<(), String> {
    let obj = p.as_object().ok_or("not a JSON object")?;
    let positive = |key: &str, v: &serde_json::Value| match v.as_f64() {
        Some(x) if x > 0.0 => Ok(()),
        _ => Err(format!("\"{key}\" must be a positive number")),
    };
    for key in ["memory_gbps", "host_gbps"] {
        positive(key, obj.get(key).unwrap_or(&serde_json::Value::Null))?;
    }
    for key in ["nvlink_gbps", "network_gbit_s", "node_gpus"] {
        if let Some(v) = obj.get(key) {
            positive(key, v)?;
        }
    }
    if obj
        .get("source")
        .and_then(|v| v.as_str())
        .is_none_or(str::is_empty)
    {
        return Err("\"source\" must be a non-empty string".into());
    }
    let t = obj
        .get("tflops")
        .and_then(|v| v.as_object())
        .ok_or("\"tflops\" must be an object")?;
    for (k, v) in t {
        if !["fp32", "tf32", "bf16", "fp16", "fp8"].contains(&k.as_str()) {
            return Err(format!("tflops: unknown dtype \"{k}\""));
        }
        positive(k, v)?;
    }
    for key in obj.keys() {
        let known = [
            "tflops",
            "memory_gbps",
            "nvlink_gbps",
            "host_gbps",
            "network_gbit_s",
            "node_gpus",
            "source",
        ];
        if !known.contains(&key.as_str()) {
            return Err(format!("unknown field \"{key}\""));
        }
    }
    Ok(())
}

/// Stops the build with one clear line.
fn fail(msg: &str) -> ! {
    panic!("vramscope-core build: {msg}")
}
