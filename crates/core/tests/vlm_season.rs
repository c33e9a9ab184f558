//! PaliGemma 2 and LFM2-VL training steps against tiny configs measured on the CPU tensor by
//! tensor (`validation/cpu-measured-vlm-season.json`, made with `../shared/measure/measure.py`
//! patched as `scripts/measure_vlm.patch` then `scripts/measure_vlm_season.patch`;
//! validation/README.md): image steps through the whole model, tower and projector included.
//! Each measured case within 3 %: `cpu_measured.rs`'s row.

mod common;

mod measured;

fn fixture(name: &str) -> serde_json::Value {
    measured::formats_fixture(&format!("vlm/{name}.json"))
}

fn components(job: serde_json::Value) -> vramscope_core::report::Components {
    common::run_job(job).per_gpu.components
}

/// LFM2-VL-1.6B in bf16 training, one 1024 × 768 image (`vramscope-formats`'
/// `vlm_season.rs`: 3 × 2 tiles of 512 px plus a 416 × 576 thumbnail, 7 tower images padded to
/// 1,024 patches; the thumbnail's 26 · 36 = 936 patches are fewer, so the tower attends under
/// a mask). With SDPA each of the 26 layers keeps the mask as a bf16 bias of
/// 7 · 1,024² · 2 B = 14,680,064 B (`convert_boolean_attn_mask`); `flash_attention_2` unpads
/// and keeps none: 26 · 14,680,064 = 381,681,664 B apart (the language model, frozen here,
/// attends unmasked either way, and its saves do not change with the kernel).
#[test]
fn siglip2_padding_mask_bias_per_layer() {
    let act = |kernel: &str| {
        components(serde_json::json!({
            "model": {"hf_config": fixture("lfm2-vl-1.6b")}, "task": "train", "batch": 1,
            "seq": 256, "precision": "bf16", "optimizer": "adamw", "attention": kernel,
            "freeze": ["language"], "images": {"count": 1, "width": 1024, "height": 768}}))
        .activations
    };
    assert_eq!(7u64 * 1024 * 1024 * 2, 14_680_064);
    assert_eq!(act("sdpa") - act("flash"), 26 * 14_680_064);
}

/// Inference caches by hand from the language models' cache classes. PaliGemma 2 at 448 px
/// (`Gemma2` through `DynamicCache`: every layer keeps K and V of `kv_heads · head_dim` per
/// position; the 4,096 window is wider than the sequence), one image = 1,024 tokens, 1,000 text
/// tokens: 26 layers · 2 · 4 · 256 · 2 B · 2,024 = 215,547,904 B. LFM2-VL-1.6B
/// (`Lfm2HybridConvCache`: K and V on its 6 attention layers, `[batch, hidden, L_cache]` of
/// conv state on the other 10), one 1024 × 768 image = 1,779 tokens, 221 text tokens:
/// 6 · 2 · 8 · 64 · 2 B · 2,000 + 10 · 2,048 · 3 · 2 B = 24,576,000 + 122,880 = 24,698,880 B.
#[test]
fn inference_caches_by_hand() {
    let kv = |name: &str, seq: u64, w: u64, h: u64| {
        components(serde_json::json!({
            "model": {"hf_config": fixture(name)}, "task": "infer", "batch": 1, "seq": seq,
            "new_tokens": 0, "precision": "bf16",
            "images": {"count": 1, "width": w, "height": h}}))
        .kv_cache
    };
    assert_eq!(26u64 * 2 * 4 * 256 * 2 * 2_024, 215_547_904);
    assert_eq!(kv("paligemma2-3b-pt-448", 1_000, 640, 480), 215_547_904);
    assert_eq!(
        6u64 * 2 * 8 * 64 * 2 * 2_000 + 10 * 2_048 * 3 * 2,
        24_698_880
    );
    assert_eq!(kv("lfm2-vl-1.6b", 221, 1_024, 768), 24_698_880);
}
