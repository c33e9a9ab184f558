//! `quantization_config` methods whose scheme sits in nested fields: compressed-tensors
//! (llm-compressor checkpoints) and BitNet. Each returns the contract's `weights` spelling,
//! `None` when the scheme is one vramscope does not size.

use serde_json::{Map, Value};

/// compressed-tensors (`compressed_tensors/quantization/quant_config.py`,
/// `QuantizationConfig`): every `config_groups.*.weights` must be one scheme (a mixed-precision
/// checkpoint is not sized); `format` says how it is stored (`pack-quantized` packs integers
/// into int32, `int-quantized` / `naive-quantized` keep one int8 a value, `float-quantized` one
/// FP8 byte). Other formats (`nvfp4-pack-quantized`, `dense`, ...) are not sized.
pub(super) fn compressed_tensors(q: &Map<String, Value>) -> Option<String> {
    let groups = q.get("config_groups")?.as_object()?;
    let mut schemes = groups
        .values()
        .filter_map(|g| g.get("weights").filter(|w| !w.is_null()));
    let first = schemes.next()?;
    if schemes.any(|w| w != first) {
        return None;
    }
    let w = first.as_object()?;
    let format = q.get("format").and_then(Value::as_str)?;
    let kind = ct_kind(w, format)?;
    let strategy = ct_strategy(w)?;
    let symmetric = w.get("symmetric").and_then(Value::as_bool).unwrap_or(true);
    let asym = if symmetric || kind == "fp8" {
        ""
    } else {
        ":asym"
    };
    Some(format!("ct:{kind}:{strategy}{asym}"))
}

/// The stored value type from `num_bits`, `type` and the checkpoint's `format`.
fn ct_kind(w: &Map<String, Value>, format: &str) -> Option<&'static str> {
    let bits = w.get("num_bits").and_then(Value::as_u64)?;
    let ty = w.get("type").and_then(Value::as_str).unwrap_or("int");
    Some(match (ty, bits, format) {
        ("float", 8, "float-quantized" | "naive-quantized") => "fp8",
        ("int", 4, "pack-quantized") => "int4",
        ("int", 8, "pack-quantized") => "int8p",
        ("int", 8, "int-quantized" | "naive-quantized") => "int8",
        _ => return None,
    })
}

/// The scale layout (`QuantizationArgs.strategy`; absent, it follows `group_size` as
/// `quant_args.py`'s validator infers it: none → tensor, > 0 → group, -1 → channel).
fn ct_strategy(w: &Map<String, Value>) -> Option<String> {
    let group = w.get("group_size").and_then(Value::as_i64);
    let strategy = match w.get("strategy").and_then(Value::as_str) {
        Some(s) => s,
        None => match group {
            None => "tensor",
            Some(-1) => "channel",
            Some(_) => "group",
        },
    };
    Some(match strategy {
        "tensor" => "tensor".into(),
        "channel" => "channel".into(),
        "group" => format!("g{}", group.filter(|g| *g > 0)?),
        "block" => {
            let b = w.get("block_structure")?.as_array()?;
            match b.as_slice() {
                [r, c] => format!("b{}x{}", r.as_u64()?, c.as_u64()?),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// BitNet (transformers `BitNetQuantConfig`): `bitlinear` keeps the packed 2-bit weights in
/// memory; `autobitlinear` offline unpacks them to the model dtype on load; online
/// (quantization-aware training) holds full weights.
pub(super) fn bitnet(q: &Map<String, Value>) -> Option<String> {
    let class = q
        .get("linear_class")
        .and_then(Value::as_str)
        .unwrap_or("bitlinear");
    let mode = q
        .get("quantization_mode")
        .and_then(Value::as_str)
        .unwrap_or("offline");
    match (class, mode) {
        ("bitlinear", _) => Some("bitnet".into()),
        ("autobitlinear", "offline") => Some("bitnet:unpacked".into()),
        _ => None,
    }
}
