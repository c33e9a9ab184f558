//! A safetensors file's first bytes as the format's README lays them out (a `u64` LE header
//! length, the JSON header padded with spaces to 8 bytes, then the data): shared by the formats
//! tests and the CLI's hub tests that write one.

use serde_json::{json, Map, Value};

/// The header JSON of tensors `(name, dtype, shape, data bytes)` laid out in the order given
/// after the optional `__metadata__`, and the data's length.
pub fn header_json<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a str, &'a [u64], u64)>,
    metadata: Option<Value>,
) -> (String, u64) {
    let mut header = Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m);
    }
    let mut off = 0u64;
    for (name, dtype, shape, len) in tensors {
        header.insert(
            name.into(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + len]}),
        );
        off += len;
    }
    (Value::Object(header).to_string(), off)
}

/// The file's first bytes: the header's length (`u64` LE), then `header` space-padded to a
/// multiple of 8 bytes.
pub fn head_bytes(header: &str) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out
}
