//! Zamba2 (`modeling_zamba2.py`, transformers 5.24): Mamba2 layers and shared transformer blocks
//! applied at the hybrid layers, counted by hand from the tensor shapes and checked against
//! transformers building the model from the same config on the meta device:
//!
//! ```text
//! d = json.load(open(path)); cfg = AutoConfig.for_model("zamba2", **{k: v for k, v in d.items() if k != "model_type"})
//! with torch.device("meta"): m = transformers.Zamba2ForCausalLM(cfg)
//! sum(p.numel() for p in m.parameters())        # and dict(m.named_parameters()) for the names
//! ```

mod common;

use std::collections::BTreeMap;
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("hybrid", name)
}

/// One Mamba layer (`Zamba2MambaDecoderLayer`, no biases): `input_layernorm` h, `in_proj`
/// `(2d + 2gn + heads)·h` with d = 2h, `conv1d` `(d + 2gn)·(k + 1)` (always a bias), `dt_bias`,
/// `A_log`, `D` `3·heads`, the gated `norm` d, `out_proj` `h·d`.
fn mamba_layer(h: u64, heads: u64, g: u64, n: u64, k: u64) -> u64 {
    let d = 2 * h;
    let conv = d + 2 * g * n;
    h + (d + conv + heads) * h + conv * (k + 1) + 3 * heads + d + h * d
}

/// One shared block without adapters or biases: `input_layernorm` 2h, q/k/v/o with head_dim
/// `2h / heads` (q and o 2h wide, k and v `kv_heads · head_dim`), `pre_ff_layernorm` h, the
/// fused `gate_up_proj` `2f·h` and `down_proj` `h·f`.
fn shared_block(h: u64, heads: u64, kv: u64, f: u64) -> u64 {
    let hd = 2 * h / heads;
    2 * h + 2 * h * 2 * h + 2 * (2 * h * kv * hd) + 2 * h * h + h + 2 * f * h + f * h
}

/// A tied Zamba2 without attention adapters, as the published 2.7B and 7B: `layers` Mamba
/// layers (d_state 64, conv 4), at each of the `hybrid` applications a linear `h·h` and an MLP
/// adapter of rank 128 (`h·128 + 128·2f`), two shared blocks of 32 heads over 32, the tied
/// embedding of 32000 tokens and the final norm h.
fn zamba2_tied(layers: u64, hybrid: u64, h: u64, (heads, groups): (u64, u64), f: u64) -> u64 {
    layers * mamba_layer(h, heads, groups, 64, 4)
        + hybrid * h * h
        + 2 * shared_block(h, 32, 32, f)
        + hybrid * (h * 128 + 128 * 2 * f)
        + 32000 * h
        + h
}

/// Zyphra/Zamba2-2.7B (`fixtures/hybrid/zamba2-2.7b.json`, rebuilt from published values: see
/// the README): h 2560, 54 layers, hybrid at 6, 12, ..., 42, 47, 51 (9 applications of 2
/// blocks), 32 heads over 32 of 160, ffn 10240, 80 Mamba heads, 1 group, d_state 64, rank 128,
/// no attention adapters, vocab 32000, tied. Mamba layer 2560 + (5120 + 5248 + 80)·2560 +
/// 5248·5 + 240 + 5120 + 2560·5120 = 39,888,240 × 54 = 2,153,964,960; linear 2560² × 9 = 58,982,400; block
/// 5120 + 5120² · 3 + 2560·5120 + 2560 + 3·10240·2560 = 170,401,280 × 2 = 340,802,560; MLP
/// adapter 2560·128 + 128·20480 = 2,949,120 × 9 = 26,542,080; embeddings 81,920,000; final
/// norm 2560: 2,662,214,560 (transformers 5.24 on meta: 2662214560; published as 2.7B).
#[test]
fn zamba2_2_7b() {
    let expected = zamba2_tied(54, 9, 2560, (80, 1), 10240);
    assert_eq!(expected, 2_662_214_560);
    let m = load_model(&fixture("zamba2-2.7b.json")).unwrap();
    assert_eq!(m.params_total, expected);
    let inv = m.inventory.as_ref().unwrap();
    // Block 0 is first applied at layer 6, block 1 at 12; layer 18 applies block 0 again.
    common::assert_shapes(
        &m,
        &[
        (
            "model.layers.6.shared_transformer.self_attn.q_proj.weight",
            vec![5120, 5120],
        ),
        (
            "model.layers.12.shared_transformer.feed_forward.gate_up_proj.weight",
            vec![20480, 2560],
        ),
        (
            "model.layers.6.shared_transformer.feed_forward.gate_up_proj_adapter_list.8.0.weight",
            vec![128, 2560],
        ),
        (
            "model.layers.12.shared_transformer.feed_forward.gate_up_proj_adapter_list.7.1.weight",
            vec![20480, 128],
        ),
        ("model.layers.18.linear.weight", vec![2560, 2560]),
        (
            "model.layers.18.mamba_decoder.mamba.in_proj.weight",
            vec![10448, 2560],
        ),
        ("model.layers.17.mamba.conv1d.bias", vec![5248]),
        ],
    );
    assert!(inv
        .get("model.layers.18.shared_transformer.self_attn.q_proj.weight")
        .is_none());
    assert!(inv
        .get("model.layers.6.shared_transformer.feed_forward.gate_up_proj_adapter_list.1.0.weight")
        .is_none());
}

/// Zyphra/Zamba2-7B (`fixtures/hybrid/zamba2-7b.json`, rebuilt from published values): h 3584,
/// 81 layers, 13 hybrid (6, 11, 17, ..., 77) over 2 blocks, ffn 14336, 112 Mamba heads in 2
/// groups, d_state 64, rotary, rank 128, vocab 32000, tied. Mamba layer 3584 + (7168 + 7424 +
/// 112)·3584 + 7424·5 + 336 + 7168 + 3584·7168 = 78,437,456 × 81 = 6,353,433,936; linear 3584² × 13 =
/// 166,985,728; block 7168 + 7168²·3 + 3584·7168 + 3584 + 3·14336·3584 = 333,982,208 × 2 =
/// 667,964,416; adapters (3584·128 + 128·28672) × 13 = 53,673,984; embeddings 114,688,000;
/// final norm 3584: 7,356,749,648 (transformers 5.24 on meta: 7356749648).
#[test]
fn zamba2_7b() {
    let expected = zamba2_tied(81, 13, 3584, (112, 2), 14336);
    assert_eq!(expected, 7_356_749_648);
    assert_eq!(
        load_model(&fixture("zamba2-7b.json")).unwrap().params_total,
        expected
    );
}

/// A tiny untied config with every option on (`fixtures/hybrid/zamba2-tiny-adapters.json`:
/// h 32, 7 layers, hybrid at 1, 3, 4, 6 over 2 blocks, attention adapters, biases, rank 4,
/// untied): every tensor, named and shaped, is the one transformers 5.24 builds
/// (`zamba2-tiny-adapters.tensors.json`, written by the snippet above from `named_parameters`).
/// Untied, transformers ties no block (`get_expanded_tied_weights_keys` returns nothing when
/// `tie_word_embeddings` is false), so each hybrid layer holds its own block with both of its
/// block's adapter slots. By hand: Mamba layer 32 + 164·32 + 164 + 96·5 + 12 + 64 + 64·32 + 32
/// = 8,080 × 7 = 56,560; linear 1,024 × 4; block 64 + 4096 + 2048·3 + 32 + 3072 + 96 + 1536 +
/// 32 = 15,072; adapters per slot 32·4 + 4·96 + 3·(64·4 + 4·64) = 2,048; untied: 4 · (15,072 +
/// 2 · 2,048) = 76,672; embeddings and head 2 · 3,072; final norm 32: 143,504. Tied (the same
/// file with `tie_word_embeddings` true): 2 blocks, 4 slots, one embedding: 3,072 + 56,560 +
/// 4,096 + 30,144 + 8,192 + 32 = 102,096 (transformers on meta: 143504 and 102096).
#[test]
fn tiny_zamba2_every_tensor_as_transformers_names_it() {
    let path = fixture("zamba2-tiny-adapters.json");
    let m = load_model(&path).unwrap();
    assert_eq!(m.params_total, 143_504);
    let theirs: serde_json::Value =
        common::read_json(&fixture("zamba2-tiny-adapters.tensors.json"));
    let theirs: BTreeMap<String, Vec<u64>> = theirs["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, s)| {
            (
                n.clone(),
                s.as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect();
    let ours: BTreeMap<String, Vec<u64>> = m
        .inventory
        .as_ref()
        .unwrap()
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone()))
        .collect();
    assert_eq!(ours, theirs);

    let mut v: serde_json::Value = common::read_json(&path);
    v["tie_word_embeddings"] = true.into();
    let tied = parse_config_str(&v.to_string(), "tied").unwrap();
    let inv = vramscope_core::inventory::build_inventory(&tied.spec).unwrap();
    assert_eq!(inv.params(), 102_096);
}

/// Configs transformers could not build, or would build otherwise than they say, are refused
/// with the field named, in one line.
#[test]
fn zamba2_inconsistent_configs_are_refused() {
    let base: serde_json::Value = common::read_json(&fixture("zamba2-tiny-adapters.json"));
    let cases: [(&str, serde_json::Value, &str); 6] = [
        ("num_hidden_layers", 8.into(), "num_hidden_layers"),
        (
            "layers_block_type",
            serde_json::json!(["mamba", "attention"]),
            "layers_block_type",
        ),
        ("n_mamba_heads", 5.into(), "n_mamba_heads"),
        ("num_attention_heads", 3.into(), "num_attention_heads"),
        ("mamba_ngroups", 3.into(), "mamba_ngroups"),
        ("num_mem_blocks", 0.into(), "num_mem_blocks"),
    ];
    for (key, value, word) in cases {
        let mut v = base.clone();
        v[key] = value;
        common::assert_refused(&v.to_string(), word);
    }
}

/// Legacy `"mamba"` entries read as `"linear_attention"`, and `layer_types` (the attribute
/// map's alias) reads as `layers_block_type`: the same model either way.
#[test]
fn zamba2_layer_type_spellings_agree() {
    let base: serde_json::Value = common::read_json(&fixture("zamba2-tiny-adapters.json"));
    let mut alias = base.clone();
    let list = alias
        .as_object_mut()
        .unwrap()
        .remove("layers_block_type")
        .unwrap();
    let renamed: Vec<serde_json::Value> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            if t == "mamba" {
                "linear_attention".into()
            } else {
                t.clone()
            }
        })
        .collect();
    alias["layer_types"] = renamed.into();
    let a = parse_config_str(&base.to_string(), "a").unwrap().spec;
    let b = parse_config_str(&alias.to_string(), "b").unwrap().spec;
    assert_eq!(a.decoder.layers, b.decoder.layers);
}

/// Zyphra's pre-transformers Zamba2-7B config (`fixtures/unsupported/zamba2-7b.json`: its own
/// key names, `state_size`, `ffn_hidden_size`, `mamba_headdim` 64, no `n_mamba_heads`):
/// transformers 5.24 would build it with the default 8 Mamba heads of 7168 // 8 = 896, not the
/// model's 112 of 64, so it is refused, naming `mamba_headdim`.
#[test]
fn zamba2_pre_transformers_config_is_refused() {
    let path = common::fixture_path("unsupported", "zamba2-7b.json");
    let err = load_model(&path).unwrap_err().to_string();
    assert!(
        err.contains("mamba_headdim") && err.contains("896"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
}

/// The tiny Zamba2 of the measured training steps (`validation/specs/cpu-tiny-zamba2-*.json`):
/// h 256, 6 layers, hybrid at 1, 3, 5 over 2 blocks, 8 heads of 64, ffn 512, 8 Mamba heads,
/// d_state 16, q/k/v and MLP adapters of rank 16, vocab 8192, tied. Mamba layer 256 + (512 +
/// 544 + 8)·256 + 544·5 + 24 + 512 + 256·512 = 406,968 × 6 = 2,441,808; linear 65,536 × 3 =
/// 196,608; block 512 + 512²·3 + 512·256 + 256 + 3·512·256 = 1,311,488 × 2 = 2,622,976;
/// adapters 256·16 + 16·1024 + 3·(512·16 + 16·512) = 69,632 × 3 = 208,896; embeddings
/// 2,097,152; final norm 256: 7,567,696 (what `measure.py` printed for the run's model).
#[test]
fn tiny_zamba2_of_the_measured_steps() {
    let parsed = common::measured_config("cpu-tiny-zamba2-fp32-adamw-eager");
    let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
    assert_eq!(inv.params(), 7_567_696);
}
