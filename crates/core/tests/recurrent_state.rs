//! The inference cache of every hybrid family (attention layers that cache K/V beside layers
//! that hold a constant recurrent state: Mamba, Mamba2, short convolutions, gated DeltaNet),
//! each from its published config in `crates/formats/tests/fixtures/` (sources in the READMEs),
//! and fit's note that the recurrent part does not grow with context. One row per model; every
//! expected number is derived by hand in the comment beside it from the model's shapes
//! (transformers' `cache_utils.py` `LinearAttentionLayer`: `conv_states` in the model dtype,
//! `recurrent_states` as `zeros_like` the mixer's final state, which every scan returns in
//! fp32 — checked on the CPU with transformers 5.24 for bf16 Jamba, Mamba and Mamba2: conv
//! states `torch.bfloat16`, recurrent states `torch.float32`).

mod common;
mod measured;

/// A model's bf16 cache: at 4,096 tokens one sequence holds `kv_4096` of attention KV plus
/// `state` of recurrent state, `batch` sequences `batch` times that, and doubling the context
/// adds only the attention part.
struct Split {
    /// The config, relative to `crates/formats/tests/fixtures/`.
    config: &'static str,
    batch: u64,
    kv_4096: u64,
    state: u64,
}

const SPLITS: &[Split] = &[
    // ai21labs/AI21-Jamba-1.5-Mini. Per token, each of the 4 attention layers caches K and V of
    // 8 heads × 128: 2,048 values · 2 B (bf16) = 4,096 B, 16,384 B over the 4. Per sequence,
    // each of the 28 Mamba layers holds its conv state `[d_inner 8192, d_conv 4]` = 32,768
    // bf16 values (65,536 B) and its SSM state `[8192, d_state 16]` = 131,072 fp32 values
    // (524,288 B): 589,824 B, × 28 = 16,515,072 B. At 4,096 tokens: 67,108,864 + 16,515,072 B.
    Split {
        config: "hybrid/ai21-jamba-1.5-mini.json",
        batch: 3,
        kv_4096: 67_108_864,
        state: 16_515_072,
    },
    // tiiuae/Falcon-H1-0.5B (every layer attention and a Mamba2 mixer side by side). Per
    // token, each of the 36 layers caches K and V of 2 KV heads × 64: 256 values · 2 B = 512
    // B, 18,432 B over the 36. Per sequence, each mixer holds its conv state `[conv_dim 1536 +
    // 2·128 = 1792, d_conv 4]` = 7,168 bf16 values (14,336 B) and its SSM state `[24 heads, 64,
    // d_state 128]` = 196,608 fp32 values (786,432 B): 800,768 B, × 36 = 28,827,648 B. At
    // 4,096 tokens: 75,497,472 + 28,827,648 B.
    Split {
        config: "hybrid/falcon-h1-0.5b-instruct.json",
        batch: 2,
        kv_4096: 75_497_472,
        state: 28_827_648,
    },
    // LiquidAI/LFM2-1.2B. Per token, each of the 6 attention layers caches K and V of 8 KV
    // heads × 64: 1,024 values · 2 B = 2,048 B, 12,288 B over the 6. Per sequence, each of the
    // 10 conv layers holds `conv_states [hidden 2048, conv_L_cache 3]` of `B · x`
    // (`LinearAttentionLayer.lazy_initialization`: `(*conv_states.shape[:-1],
    // conv_kernel_size)`) = 6,144 bf16 values, 12,288 B; 122,880 B over the 10. At 4,096
    // tokens: 50,331,648 + 122,880 B.
    Split {
        config: "hybrid/lfm2-1.2b.json",
        batch: 2,
        kv_4096: 50_331_648,
        state: 122_880,
    },
    // LiquidAI/LFM2-8B-A1B: 6 attention layers of 8 KV heads × 64 cache 2 · 512 · 2 B = 2,048
    // B per token each, 12,288 B over the 6; its 18 conv layers hold `[2048, 3]` bf16 each,
    // 12,288 B, 221,184 B per sequence. At 4,096 tokens: 50,331,648 + 221,184 B; the experts
    // change neither.
    Split {
        config: "hybrid/lfm2-8b-a1b.json",
        batch: 1,
        kv_4096: 50_331_648,
        state: 221_184,
    },
    // Qwen/Qwen3-Next-80B-A3B-Instruct. Per token, each of the 12 attention layers caches K
    // and V of 2 heads × 256: 1,024 values · 2 B = 2,048 B, 24,576 B over the 12. Per
    // sequence, each of the 36 DeltaNet layers holds its conv state `[conv_dim 2·16·128 +
    // 32·128 = 8,192, kernel 4]` = 32,768 bf16 values (65,536 B) and its recurrent state `[32
    // heads, 128, 128]` = 524,288 values in fp32 (`torch_chunk_gated_delta_rule` returns it in
    // fp32): 2,097,152 B; 2,162,688 B per layer, 77,856,768 B over the 36. At 4,096 tokens:
    // 100,663,296 + 77,856,768 B.
    Split {
        config: "hybrid/qwen3-next-80b-a3b-instruct.json",
        batch: 2,
        kv_4096: 100_663_296,
        state: 77_856_768,
    },
    // Qwen3.5-27B. Per token, each of the 16 attention layers caches K and V of 4 heads × 256:
    // 2,048 values · 2 B = 4,096 B, 65,536 B over the 16; at 4,096 tokens 268,435,456. Per
    // sequence, each of the 48 DeltaNet layers holds its conv state `[conv_dim 2·16·128 +
    // 48·128 = 10,240, kernel 4]` = 40,960 bf16 values (81,920 B) and its recurrent state `[48
    // heads, 128, 128]` = 786,432 fp32 values (3,145,728 B): 3,227,648 B per layer,
    // 154,927,104 B (147.75 MiB) over the 48.
    Split {
        config: "qwen35/qwen3.5-27b.json",
        batch: 2,
        kv_4096: 268_435_456,
        state: 154_927_104,
    },
    // Qwen3.5-35B-A3B. Per token, 10 attention layers × K and V of 2 heads × 256 × 2 B = 20,480
    // B; at 4,096 tokens 83,886,080. Per sequence, 30 DeltaNet layers × (conv `[8,192, 4]` bf16
    // 65,536 B + recurrent `[32, 128, 128]` fp32 2,097,152 B) = 64,880,640 B (61.875 MiB).
    Split {
        config: "qwen35/qwen3.5-35b-a3b.json",
        batch: 1,
        kv_4096: 83_886_080,
        state: 64_880_640,
    },
    // ibm-ai-platform/Bamba-9B: per token, each of the 3 attention layers caches K and V of 8
    // KV heads × 128: 2,048 values · 2 B = 4,096 B, 12,288 B over the 3. Per sequence, each of
    // the 29 Mamba2 mixers holds its conv state `[conv_dim 8192 + 2·128 = 8448, d_conv 4]` =
    // 33,792 bf16 values (67,584 B) and its SSM state `[128 heads, 64, d_state 128]` =
    // 1,048,576 fp32 values (4,194,304 B): 4,261,888 B, × 29 = 123,594,752 B. At 4,096 tokens:
    // 50,331,648 + 123,594,752 B.
    Split {
        config: "granite/bamba-9b.json",
        batch: 2,
        kv_4096: 50_331_648,
        state: 123_594_752,
    },
    // ibm-granite/granite-4.0-h-tiny: per token, 4 attention layers × K and V of 4 KV heads ×
    // 128 = 1,024 values · 2 B = 2,048 B, 8,192 B over the 4. Per sequence, each of the 36
    // mixers: conv `[3072 + 256 = 3328, 4]` = 13,312 bf16 values (26,624 B), SSM `[48, 64,
    // 128]` = 393,216 fp32 values (1,572,864 B): 1,599,488 B, × 36 = 57,581,568 B. At 4,096
    // tokens: 33,554,432 + 57,581,568 B.
    Split {
        config: "granite/granite-4.0-h-tiny.json",
        batch: 1,
        kv_4096: 33_554_432,
        state: 57_581_568,
    },
    // NVIDIA-Nemotron-Nano-9B-v2 (`nemotron_h`: only the `*` layers cache K/V, transformers
    // 5.24 `get_layer_types_and_kwargs`; each `M` layer holds a conv state in the compute dtype
    // and an SSM state in fp32, `mamba_ssm_cache_dtype` "float32"): per token each of the 4 `*`
    // layers caches K and V of 8 KV heads × 128: 2,048 values · 2 B = 4,096 B, 16,384 B over
    // the 4; at 4,096 tokens 67,108,864 B. Per sequence each of the 27 `M` layers holds its
    // conv state `[d_inner 10240 + 2·8·128 = 12288, 4]` = 49,152 values · 2 B = 98,304 B and
    // its SSM state `[128 heads, 80, 128]` = 1,310,720 values · 4 B = 5,242,880 B: 5,341,184 B,
    // × 27 = 144,211,968 B.
    Split {
        config: "hybrid/nemotron-nano-9b-v2.json",
        batch: 3,
        kv_4096: 67_108_864,
        state: 144_211_968,
    },
];

#[test]
fn each_family_caches_kv_in_attention_layers_and_a_constant_state_elsewhere() {
    for s in SPLITS {
        let config = measured::formats_fixture(s.config);
        let kv = |batch: u64, seq: u64| measured::kv_cache(&config, batch, seq);
        let one = s.kv_4096 + s.state;
        assert_eq!(kv(1, 4096), one, "{}: one sequence", s.config);
        assert_eq!(kv(s.batch, 4096), s.batch * one, "{}: batch", s.config);
        // Doubling the context doubles only the attention part.
        let grown = kv(1, 8192) - kv(1, 4096);
        assert_eq!(grown, s.kv_4096, "{}: doubled context", s.config);
    }
}

/// fit's note on a model (bf16 inference at 4,096 tokens on an H200, the search bounded by
/// `max_positions`): it names the recurrent layers, their state per sequence (printed to four
/// figures) and the attention layers whose KV grows.
struct Note {
    config: &'static str,
    max_positions: u64,
    says: &'static [&'static str],
}

const NOTES: &[Note] = &[
    // Jamba: the 28 state-space layers' 16,515,072 B (above) = 15.75 MiB.
    Note {
        config: "hybrid/ai21-jamba-1.5-mini.json",
        max_positions: 262_144,
        says: &["28 state-space layers", "15.75 MiB", "4 attention layers"],
    },
    // Falcon-H1: the 36 mixers' 28,827,648 B (above) = 27.49 MiB; every layer also attends.
    Note {
        config: "hybrid/falcon-h1-0.5b-instruct.json",
        max_positions: 16_384,
        says: &[
            "36 layers' state-space mixers",
            "27.49 MiB",
            "36 layers' attention KV cache",
        ],
    },
    // LFM2-1.2B: the 10 short-convolution layers' 122,880 B (above) = 120 KiB.
    Note {
        config: "hybrid/lfm2-1.2b.json",
        max_positions: 128_000,
        says: &[
            "10 short-convolution (LFM2) layers",
            "120.0 KiB",
            "6 attention layers",
        ],
    },
    // Qwen3-Next: the 36 gated DeltaNet layers' 77,856,768 B (above) = 74.25 MiB.
    Note {
        config: "hybrid/qwen3-next-80b-a3b-instruct.json",
        max_positions: 262_144,
        says: &[
            "36 gated DeltaNet (linear-attention) layers",
            "74.25 MiB",
            "12 attention layers",
        ],
    },
    // Qwen3.5-27B: 154,927,104 B (above) = 147.75 MiB, 147.8 to four figures.
    Note {
        config: "qwen35/qwen3.5-27b.json",
        max_positions: 262_144,
        says: &[
            "48 gated DeltaNet (linear-attention) layers",
            "147.8 MiB",
            "16 attention layers",
        ],
    },
    // Qwen3.5-35B-A3B: 64,880,640 B (above) = 61.875 MiB, 61.88 to four figures.
    Note {
        config: "qwen35/qwen3.5-35b-a3b.json",
        max_positions: 262_144,
        says: &[
            "30 gated DeltaNet (linear-attention) layers",
            "61.88 MiB",
            "10 attention layers",
        ],
    },
    // granite-4.0-h-tiny: the 36 mixers' 57,581,568 B (above) = 54.91 MiB.
    Note {
        config: "granite/granite-4.0-h-tiny.json",
        max_positions: 131_072,
        says: &["36 state-space layers", "54.91 MiB", "4 attention layers"],
    },
    // Nemotron-Nano-9B-v2: the 27 mixers' 144,211,968 B (above) = 137.53 MiB, 137.5 to four
    // figures; only the 4 `*` layers attend (the 25 MLP layers are not attention layers).
    Note {
        config: "hybrid/nemotron-nano-9b-v2.json",
        max_positions: 131_072,
        says: &[
            "27 state-space layers",
            "137.5 MiB",
            "only the 4 attention layers' KV cache",
        ],
    },
    // Zamba2-7B: the 81 layers' state (153,446,400 B = 146.3 MiB per sequence, zamba2.rs) is
    // constant; the 13 hybrid layers' K/V grows with the context.
    Note {
        config: "hybrid/zamba2-7b.json",
        max_positions: 4096,
        says: &[
            "81 state-space layers",
            "146.3 MiB",
            "only the 13 attention layers' KV cache",
        ],
    },
];

#[test]
fn fit_says_the_recurrent_state_is_constant() {
    for n in NOTES {
        let config = measured::formats_fixture(n.config);
        let note = measured::constant_state_note(&config, n.max_positions);
        for part in n.says {
            assert!(note.contains(part), "{}: {part:?} not in {note}", n.config);
        }
    }
}
