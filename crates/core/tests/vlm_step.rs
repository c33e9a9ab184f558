//! A vision-language training step: the Qwen2-VL vision tower and merger op by op, against
//! steps of a tiny Qwen2-VL measured on the CPU tensor by tensor
//! (`validation/cpu-measured-vlm.json`, made with `../shared/measure/measure.py` patched as
//! `scripts/measure_vlm.patch`; validation/README.md; each case within 3 %: `cpu_measured.rs`'s
//! row). The hand derivations below read
//! transformers 5.24's `models/qwen2_vl/modeling_qwen2_vl.py`: `PatchEmbed.forward`,
//! `Qwen2VLVisionRotaryEmbedding.forward`, `apply_rotary_pos_emb_vision`,
//! `VisionAttention.forward`, `Qwen2VLVisionBlock.forward`, `VisionMlp` with
//! `activations.py` `QuickGELUActivation`, `PatchMerger.forward`.

mod common;

mod measured;

use serde_json::{json, Value};

use common::run_job as run;

/// The tiny Qwen2-VL the measurements ran (tower: depth 2, `embed_dim` 32, 4 heads of 8,
/// MLP 128 with `quick_gelu`, patch 14, temporal patch 2, merge 2; language: hidden 64).
fn tiny() -> Value {
    let spec: Value = common::validation("specs/cpu-tiny-qwen2vl-fp32-adamw-images.json");
    spec["hf_config"].clone()
}

fn activations(precision: &str, batch: u64, images: Value, freeze: Value) -> u64 {
    run(
        json!({"model": {"hf_config": tiny()}, "task": "train", "batch": batch, "seq": 64,
               "precision": precision, "optimizer": "adamw", "attention": "sdpa",
               "images": images, "freeze": freeze}),
    )
    .per_gpu
    .components
    .activations
}

/// fp32, batch 2, two 112×112 images per sequence: 4 images of 8 × 8 = 64 patches, 256
/// patches of width D = 32 → one tower tensor is 256 · 32 · 4 B = 32,768 B (call it 1 D),
/// the MLP's 256 · 128 · 4 B = 131,072 B. What one block saves besides its input and output:
/// norm1's output (saved by `qkv`) 1 D and its mean and rstd (256 · 4 B = 1,024 B each); the
/// fused `qkv` output, 3 D, kept whole because SDPA saves v, a view of it; the rotated q and k
/// (new tensors) 2 D; the four per-image SDPA outputs, 1 D in all, and their logsumexps
/// (4 · 4 heads · 64 · 4 B = 4,096 B); `torch.cat` of the outputs (saved by `proj`) 1 D; the
/// first residual sum (saved by norm2) 1 D; norm2's output 1 D and its statistics 2,048 B;
/// `fc1`'s output, QuickGELU's sigmoid and product (`x · sigmoid(1.702 x)`: the product saves
/// both operands, `fc2` saves the product) 3 · 131,072 B:
/// 10 · 32,768 + 2 · 2,048 + 4,096 + 393,216 = 729,088 B. Each block also keeps its input
/// (LayerNorm saves it): the patch embedding's output, then block 0's output, 32,768 B each.
/// The rotary tables, cos and sin of 256 × 8 fp32, 2 · 8,192 B, are saved by every block.
/// Freezing the tower leaves none of this (the merger still trains and saves the same
/// either way; the fp32 pixels are the step's input either way):
/// 2 · (729,088 + 32,768) + 16,384 = 1,540,096 B. The measured run's per-tensor list at the
/// end of the forward has exactly these tensors for each block.
#[test]
fn qwen2_vl_tower_saves_op_by_op_fp32() {
    let images = json!({"count": 2, "width": 112, "height": 112});
    let trained = activations("fp32", 2, images.clone(), json!([]));
    let frozen = activations("fp32", 2, images, json!(["vision"]));
    assert_eq!(10 * 32_768 + 2 * 2_048 + 4_096 + 3 * 131_072, 729_088u64);
    assert_eq!(trained - frozen, 2 * (729_088 + 32_768) + 16_384);
}

/// bf16-mixed, batch 1, three 84 × 56 images: 3 images of 6 × 4 = 24 patches, 72 patches. The
/// patch embedding's `Conv3d` is on autocast's 16-bit list, so the tower's residual stream is
/// bf16 (72 · 32 · 2 B = 4,608 B = 1 D16) and each LayerNorm (fp32 list) saves an fp32 copy
/// of it (9,216 B) instead of the stream itself, which the block then frees. One block saves:
/// norm1's fp32 copy 9,216 B and statistics 2 · 512 B (72 · 4 B = 288 B each, rounded to
/// 512); `qkv`'s bf16 input copy 1 D16; the qkv output 3 D16 = 13,824 B; q and k rotated in
/// fp32 and cast back to bf16 (`.to(orig_q_dtype)`) 2 D16; the SDPA outputs 1 D16 and
/// logsumexps (3 · 4 · 24 · 4 B = 1,152 B → 1,536 B); the `cat` 1 D16; norm2's fp32 copy
/// 9,216 B and statistics 1,024 B; `fc1`'s bf16 input copy 1 D16; `fc1`'s output, the sigmoid
/// and the product, 3 · 72 · 128 · 2 B = 55,296 B: 118,784 B in all, plus its output (the next
/// stream tensor) less its input (not saved): + 4,608 − 4,608. Autocast's bf16 weight copies
/// of the block (the estimate counts weights and biases: 2 · (32·96 + 96) + 2 · (32·32 + 32) +
/// 2 · (32·128 + 128) + 2 · (128·32 + 32) = 25,152 B). Before the blocks: the pixels' bf16 copy
/// (72 patches · 1,176 values · 2 B = 169,344 → 169,472 B), the conv weight's bf16 copy
/// (32 · 1,176 · 2 B = 75,264 B) and the fp32 rotary tables (2 · 72 · 8 · 4 B = 2 · 2,304 →
/// 2 · 2,560 B). Freezing the tower leaves none of it:
/// 169,472 + 75,264 + 5,120 + 2 · (118,784 + 25,152) = 537,728 B.
#[test]
fn qwen2_vl_tower_stream_is_16_bit_under_autocast() {
    let images = json!({"count": 3, "width": 84, "height": 56});
    let trained = activations("bf16-mixed", 1, images.clone(), json!([]));
    let frozen = activations("bf16-mixed", 1, images, json!(["vision"]));
    assert_eq!(
        9_216
            + 1_024
            + 4_608
            + 13_824
            + 2 * 4_608
            + 4_608
            + 1_536
            + 4_608
            + 9_216
            + 1_024
            + 4_608
            + 55_296,
        118_784u64
    );
    assert_eq!(
        trained - frozen,
        169_472 + 75_264 + 5_120 + 2 * (118_784 + 25_152)
    );
}

/// The tiny LLaVA the CLIP-tower measurements ran (`validation/specs/cpu-tiny-llava-*.json`):
/// CLIP tower 3 layers × 64 (4 heads, MLP 256, `quick_gelu`), 112 px images of 14 px
/// patches, `vision_feature_layer: -2`; Llama text model 2 × 64.
fn tiny_llava() -> Value {
    let spec: Value = common::validation("specs/cpu-tiny-llava-fp32-adamw-sdpa-b2-1img.json");
    spec["hf_config"].clone()
}

/// fp32, batch 2, one 112 × 112 image per sequence: 2 tower images of 64 patches + the class
/// token = 65 positions, width 64 → one tensor D = 2 · 65 · 64 · 4 B = 33,280 B, the MLP's
/// M = 2 · 65 · 256 · 4 B = 133,120 B, a LayerNorm's mean or rstd 2 · 65 · 4 B = 520 → 1,024 B.
/// `modeling_clip.py`: the embeddings (`cat` of the class embedding and patches, plus the
/// positions) are saved by `pre_layrnorm` with its statistics: D + 2,048. Each block that
/// reaches the projector (`vision_feature_layer: -2`: 2 of 3; the third's graph is dropped
/// with the tower's output) saves its input (layer_norm1's) D, layer_norm1's statistics 2,048
/// and output D (read by q/k/v), q, k and v 3 D (SDPA saves them), SDPA's output D (its
/// `transpose(1, 2)` is already contiguous: no copy before `out_proj`) and logsumexp
/// 2 · 4 · 65 · 4 B = 2,080 → 2,560, the residual sum D, layer_norm2's statistics 2,048 and
/// output D, `fc1`'s output, QuickGELU's sigmoid and product 3 M: 8 D + 6,656 + 3 M =
/// 672,256 B. Freezing the tower leaves none of it (the projector trains either way):
/// 35,328 + 2 · 672,256 = 1,379,840 B — what the measured runs' forward ends differ by
/// (3,702,272 − 2,322,432 B of ACTIVATION).
#[test]
fn clip_tower_saves_op_by_op_fp32() {
    let act = |freeze: Value| {
        run(
            json!({"model": {"hf_config": tiny_llava()}, "task": "train", "batch": 2,
                   "seq": 32, "precision": "fp32", "optimizer": "adamw", "attention": "sdpa",
                   "images": {"count": 1, "width": 112, "height": 112}, "freeze": freeze}),
        )
        .per_gpu
        .components
        .activations
    };
    assert_eq!(8 * 33_280 + 6_656 + 3 * 133_120, 672_256u64);
    assert_eq!(3_702_272u64 - 2_322_432, 1_379_840);
    assert_eq!(
        act(json!([])) - act(json!(["vision"])),
        33_280 + 2_048 + 2 * 672_256
    );
}

/// Pixtral's tower over several images (`modeling_pixtral.py`): with SDPA all the
/// micro-batch's patches are one sequence under `generate_block_attention_mask`'s `[N, N]`
/// mask in the embeddings' dtype, which the memory-efficient kernel keeps for backward;
/// `flash_attention_2` runs per image with no mask. Pixtral-12B in bf16, two 512 × 512 images
/// (32 × 32 = 1,024 patches each): N = 2,048, the mask 2,048² · 2 B = 8,388,608 B — the whole
/// difference, as the SDPA and flash blocks save the same per patch.
#[test]
fn pixtral_tower_mask_over_joined_images() {
    let cfg: Value = common::repo_json("crates/formats/tests/fixtures/vlm/pixtral-12b.json");
    let act = |kernel: &str| {
        run(
            json!({"model": {"hf_config": cfg.clone()}, "task": "train", "batch": 1,
                   "seq": 128, "precision": "bf16", "optimizer": "adamw", "attention": kernel,
                   "freeze": ["language"],
                   "images": {"count": 2, "width": 512, "height": 512}}),
        )
        .per_gpu
        .components
        .activations
    };
    assert_eq!(2_048u64 * 2_048 * 2, 8_388_608);
    assert_eq!(act("sdpa") - act("flash"), 8_388_608);
}
