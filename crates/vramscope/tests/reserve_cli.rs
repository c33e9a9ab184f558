//! `--reserve GIB`: GiB kept free for other applications, stated beside the capacity in the
//! human output, in bytes in `--json`; a bad value is one line and exit 2.

mod common;
use common::{argv, run_uncoloured as vramscope};

/// 2 GiB = 2 × 1,073,741,824 = 2,147,483,648 bytes.
#[test]
fn reserve_is_stated_beside_the_capacity() {
    let out = vramscope(&["fit", "gpt2", "--gpu", "t4-16gb", "--reserve", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("− 2.00 GiB reserved"), "{text}");

    let out = vramscope(&argv("estimate gpt2 --gpu t4-16gb --reserve 2 --json"));
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["job"]["reserve"], 2_147_483_648u64);
    assert_eq!(r["fit"]["reserve"], 2_147_483_648u64);
    let total = r["per_gpu"]["device_total"].as_i64().unwrap();
    let cap = r["fit"]["capacity"].as_i64().unwrap();
    assert_eq!(
        r["fit"]["headroom"].as_i64().unwrap(),
        cap - 2_147_483_648 - total
    );

    let out = vramscope(&["estimate", "gpt2", "--gpu", "t4-16gb", "--reserve", "2"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("reserved"), "{text}");
}

#[test]
fn a_bad_reserve_is_one_line_and_exit_2() {
    for bad in ["-1", "lots"] {
        let out = vramscope(&["estimate", "gpt2", "--reserve", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("reserve"), "{err}");
    }
}
