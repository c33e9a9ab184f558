//! GGUF header pieces as llama.cpp lays them out (`ggml/src/gguf.cpp`, `gguf_writer`:
//! `write(const std::string &)` and `write_tensor_meta`), for the tests that write headers by
//! hand. Shared with `crates/vramscope/tests/hub` by `#[path]`.

/// A GGUF string: its length as a little-endian u64, then its bytes.
pub fn put_str(b: &mut Vec<u8>, s: impl AsRef<[u8]>) {
    let s = s.as_ref();
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s);
}

/// One tensor info: the name, the number of dimensions (u32), each dimension (u64, llama.cpp's
/// order: innermost first), the ggml type id (u32) and the offset into the data section (u64).
pub fn put_tensor_info(b: &mut Vec<u8>, name: impl AsRef<[u8]>, dims: &[u64], ty: u32, off: u64) {
    put_str(b, name);
    b.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b.extend(ty.to_le_bytes());
    b.extend(off.to_le_bytes());
}
