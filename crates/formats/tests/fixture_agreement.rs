//! The real sharded checkpoint in `../shared/fixtures/hf_tiny_llama` (saved by transformers
//! 5.24): the inventory built from its config.json and the one read from its safetensors
//! headers must agree tensor by tensor.

mod common;
use common::shared;

use std::path::PathBuf;
use vramscope_core::Tensor;
use vramscope_formats::model_source::{load_model, Origin};

fn fixture(rel: &str) -> PathBuf {
    shared(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures")
            .join(rel),
    )
}

fn sorted(mut v: Vec<Tensor>) -> Vec<Tensor> {
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

#[test]
fn config_and_headers_agree_exactly() {
    let dir = fixture("hf_tiny_llama");
    let from_config = load_model(dir.join("config.json").to_str().unwrap()).unwrap();
    let from_headers = load_model(dir.to_str().unwrap()).unwrap();
    assert_eq!(from_config.origin, Origin::ConfigJson);
    assert_eq!(from_headers.origin, Origin::Safetensors);
    assert!(
        from_headers.spec.is_some(),
        "the directory's config.json is read too"
    );
    assert!(
        from_headers.warnings.is_empty(),
        "{:?}",
        from_headers.warnings
    );
    let a = sorted(from_config.inventory.unwrap().tensors);
    let b = sorted(from_headers.inventory.unwrap().tensors);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y);
    }
    // vocab 256, hidden 64, 2 layers, q 64·64, k/v 64·32 (2 KV heads of 16), o 64·64, MLP
    // 3·64·172, two norms of 64; final norm 64; untied head 256·64:
    // 2·16384 + 2·(4096 + 2·2048 + 4096 + 33024 + 128) + 64 = 123,712, in bf16 = 247,424 B.
    let expected =
        2 * 256 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64;
    assert_eq!(expected, 123_712);
    assert_eq!(from_headers.params_total, expected);
    assert_eq!(b.iter().map(|t| t.bytes).sum::<u64>(), 2 * expected);
}

#[test]
fn gguf_fixture_loads_as_a_model() {
    let m = load_model(fixture("tiny_llama_q8.gguf").to_str().unwrap()).unwrap();
    assert_eq!(m.origin, Origin::Gguf);
    // make_gguf.py: token_embd F32 [8, 64] (512), blk.0.attn_norm F16 [64], blk.0.attn_q Q8_0
    // [64, 64] (4096): 4,672 parameters; bytes 2048 + 128 + 4096/32·34 = 6,528.
    assert_eq!(m.params_total, 512 + 64 + 4096);
    assert_eq!(m.inventory.unwrap().bytes(), 2048 + 128 + 4352);
}

#[test]
fn missing_paths_and_unknown_names_are_clear() {
    let e = load_model("./no/such/config.json").unwrap_err().to_string();
    assert!(e.contains("no such file"), "{e}");
    let e = load_model("llama-3.1-8").unwrap_err().to_string();
    assert!(
        e.contains("did you mean") && e.contains("llama-3.1-8b"),
        "{e}"
    );
}
