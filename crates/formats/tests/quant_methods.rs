//! `quantization_config` blocks of the newer checkpoint formats → the contract's `weights`
//! spelling, and one model sized end to end. The blocks follow the published layouts:
//! compressed-tensors' `QuantizationConfig` as llm-compressor writes it (e.g.
//! https://huggingface.co/RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16/blob/main/config.json,
//! https://huggingface.co/RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic/blob/main/config.json),
//! DeepSeek-V3's `fp8` block (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json),
//! FBGEMM FP8 (`FbgemmFp8Config`) and BitNet
//! (https://huggingface.co/microsoft/bitnet-b1.58-2B-4T/blob/main/config.json).

use serde_json::{json, Value};
use vramscope_core::estimate::quant::{parse, total_bytes, QuantContext};
use vramscope_formats::model_source::load_inline_config;

/// A tiny Llama (hidden 256, MLP 512, 2 layers, 4 heads, vocab 1024, untied, bf16) carrying `q`.
fn tiny(q: Value) -> Value {
    json!({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 1024, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "quantization_config": q
    })
}

fn format_of(q: Value) -> Option<String> {
    let m = load_inline_config(&tiny(q)).unwrap();
    m.spec.unwrap().quantization
}

fn ct(weights: Value, format: &str) -> Value {
    json!({
        "quant_method": "compressed-tensors", "format": format,
        "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": null,
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": null, "output_activations": null,
            "weights": weights
        }}
    })
}

#[test]
fn compressed_tensors_schemes() {
    let w4a16 = json!({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
        "group_size": 128, "dynamic": false, "actorder": null, "block_structure": null});
    assert_eq!(
        format_of(ct(w4a16, "pack-quantized")).as_deref(),
        Some("ct:int4:g128")
    );
    let asym = json!({"num_bits": 4, "type": "int", "symmetric": false, "group_size": 64});
    assert_eq!(
        format_of(ct(asym, "pack-quantized")).as_deref(),
        Some("ct:int4:g64:asym")
    );
    let fp8_dyn = json!({"num_bits": 8, "type": "float", "symmetric": true,
        "strategy": "channel", "dynamic": false});
    assert_eq!(
        format_of(ct(fp8_dyn, "float-quantized")).as_deref(),
        Some("ct:fp8:channel")
    );
    let fp8_block = json!({"num_bits": 8, "type": "float", "symmetric": true,
        "strategy": "block", "block_structure": [128, 128]});
    assert_eq!(
        format_of(ct(fp8_block, "float-quantized")).as_deref(),
        Some("ct:fp8:b128x128")
    );
    let w8a8 = json!({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel"});
    assert_eq!(
        format_of(ct(w8a8, "int-quantized")).as_deref(),
        Some("ct:int8:channel")
    );
    // NVFP4 and mixed schemes are not sized: the reader says so and counts the config's dtype.
    let nvfp4 = json!({"num_bits": 4, "type": "float", "strategy": "tensor_group",
        "group_size": 16});
    assert_eq!(format_of(ct(nvfp4, "nvfp4-pack-quantized")), None);
}

#[test]
fn fp8_fbgemm_and_bitnet() {
    let deepseek = json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128]});
    assert_eq!(format_of(deepseek).as_deref(), Some("fp8:b128"));
    let fbgemm = json!({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
        "modules_to_not_convert": null});
    assert_eq!(format_of(fbgemm).as_deref(), Some("fp8:row"));
    let bitnet = json!({"linear_class": "autobitlinear", "quant_method": "bitnet",
        "quantization_mode": "offline"});
    assert_eq!(format_of(bitnet).as_deref(), Some("bitnet:unpacked"));
    let packed = json!({"quant_method": "bitnet"});
    assert_eq!(format_of(packed).as_deref(), Some("bitnet"));
}

/// The tiny Llama in compressed-tensors int4, groups of 32, bf16 scales, sized by hand from
/// `pack_quantized/base.py`'s layout (int32 words of 8 values, one bf16 scale per group, an
/// int64[2] `weight_shape`):
/// - q/k/v/o `[256, 256]`: 256 · 32 words · 4 = 32,768 + 256 · 8 scales · 2 = 4,096 + 16 = 36,880
/// - gate/up `[512, 256]`: 512 · 32 · 4 = 65,536 + 512 · 8 · 2 = 8,192 + 16 = 73,744
/// - down `[256, 512]`: 256 · 64 · 4 = 65,536 + 256 · 16 · 2 = 8,192 + 16 = 73,744
/// - a layer: 4 · 36,880 + 3 · 73,744 = 368,752; two: 737,504
/// - in bf16: embeddings and lm_head 2 · 1024 · 256 · 2 = 1,048,576, norms (2 a layer + final)
///   5 · 256 · 2 = 2,560
///
/// Total 737,504 + 1,048,576 + 2,560 = 1,788,640 B.
#[test]
fn tiny_llama_in_int4_groups_sized_by_hand() {
    let w = json!({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
        "group_size": 32});
    let m = load_inline_config(&tiny(ct(w, "pack-quantized"))).unwrap();
    let spec = m.spec.as_ref().unwrap();
    let f = parse(spec.quantization.as_deref().unwrap()).unwrap();
    let inv = m.inventory.as_ref().unwrap();
    let bytes = total_bytes(&f, &inv.tensors, &QuantContext::from_spec(spec)).unwrap();
    assert_eq!(bytes, 1_788_640);
}
