//! `--transformers-version` and the job field `transformers_version`: a release is echoed in
//! the report's job; anything else is one line on stderr and exit 2, from a flag or a job file.

mod common;
use common::{argv, run_uncoloured as vramscope};

#[test]
fn a_release_is_echoed() {
    let out = vramscope(&argv("estimate gpt2 --transformers-version 5.17.0 --json"));
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["job"]["transformers_version"], "5.17.0");
    let plain = vramscope(&argv("estimate gpt2 --json"));
    let r: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(r["job"].get("transformers_version").is_none());
}

#[test]
fn nonsense_is_one_line_and_exit_2() {
    for bad in [
        "latest", "5", "5.x", "1.0.0", "10.1", "5.17.0.1", "", "5.17.0-1", "v5.17",
    ] {
        let out = vramscope(&["estimate", "gpt2", "--transformers-version", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{bad:?}: {err}");
        assert!(err.contains("transformers_version"), "{bad:?}: {err}");
    }
    // From a job file, a number is refused as well (a release is a string: 5.20 would read 5.2).
    let dir = std::env::temp_dir().join(format!("vs-tv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.json");
    std::fs::write(&path, r#"{"model": "gpt2", "transformers_version": 5.20}"#).unwrap();
    let out = vramscope(&["estimate", "--job", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("transformers_version") && err.contains("string"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
