//! GGUF header reader: the real gguf-py fixture, synthetic headers from a small writer below,
//! hostile headers, and property tests. Every expected size is worked out by hand in a comment
//! from the block structs in ggml-common.h (bytes per block) and the file layout.

mod common;
use common::gguf_bytes::{put_str, put_tensor_info};
use common::shared;

use proptest::prelude::*;
use std::path::Path;
use vramscope_core::ggml::GgmlType;
use vramscope_core::{Component, DType};
use vramscope_formats::gguf::{
    ftype_name, read_gguf, read_gguf_path, tensor_block, tensor_component, GgufArray, GgufFile,
    GgufValue, GgufValueType,
};
use vramscope_formats::FormatError;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/tiny_llama_q8.gguf"
);

// ---------------------------------------------------------------------------------------------
// A test-only GGUF writer (little-endian, spec layout).
// ---------------------------------------------------------------------------------------------

// ggml type ids (ggml.h `enum ggml_type`)
const F32: u32 = 0;
const F16: u32 = 1;
const Q4_0: u32 = 2;
const Q8_0: u32 = 8;
const Q4_K: u32 = 12;
const Q6_K: u32 = 14;
const IQ2_XXS: u32 = 16;
const BF16: u32 = 30;
const MXFP4: u32 = 39;
const NVFP4: u32 = 40;
const Q1_0: u32 = 41;

#[derive(Clone, Debug)]
enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    /// Raw byte, so invalid bools can be written.
    Bool(u8),
    Str(Vec<u8>),
    /// Element type id and items (each item's payload only; nested arrays carry their header).
    Arr(u32, Vec<V>),
    /// An array header claiming `n` elements of type `ty`, with no items written.
    ArrClaim(u32, u64),
    U64(u64),
    I64(i64),
    F64(f64),
}

fn s(x: &str) -> V {
    V::Str(x.as_bytes().to_vec())
}

impl V {
    fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => 0,
            V::I8(_) => 1,
            V::U16(_) => 2,
            V::I16(_) => 3,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::Str(_) => 8,
            V::Arr(..) | V::ArrClaim(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::F64(_) => 12,
        }
    }

    fn payload(&self, b: &mut Vec<u8>) {
        match self {
            V::U8(x) => b.extend(x.to_le_bytes()),
            V::I8(x) => b.extend(x.to_le_bytes()),
            V::U16(x) => b.extend(x.to_le_bytes()),
            V::I16(x) => b.extend(x.to_le_bytes()),
            V::U32(x) => b.extend(x.to_le_bytes()),
            V::I32(x) => b.extend(x.to_le_bytes()),
            V::F32(x) => b.extend(x.to_le_bytes()),
            V::Bool(x) => b.push(*x),
            V::Str(x) => put_str(b, x),
            V::Arr(ty, items) => {
                b.extend(ty.to_le_bytes());
                b.extend((items.len() as u64).to_le_bytes());
                for it in items {
                    it.payload(b);
                }
            }
            V::ArrClaim(ty, n) => {
                b.extend(ty.to_le_bytes());
                b.extend(n.to_le_bytes());
            }
            V::U64(x) => b.extend(x.to_le_bytes()),
            V::I64(x) => b.extend(x.to_le_bytes()),
            V::F64(x) => b.extend(x.to_le_bytes()),
        }
    }
}

#[derive(Clone)]
struct G {
    version: u32,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    kvs: Vec<(Vec<u8>, u32, V)>,
    tensors: Vec<(Vec<u8>, Vec<u64>, u32, u64)>,
}

impl G {
    fn new(version: u32) -> Self {
        G {
            version,
            n_tensors: None,
            n_kv: None,
            kvs: vec![],
            tensors: vec![],
        }
    }
    fn kv(mut self, k: &str, v: V) -> Self {
        let t = v.type_id();
        self.kvs.push((k.as_bytes().to_vec(), t, v));
        self
    }
    /// A KV whose stored type id is `t` regardless of the payload.
    fn kv_typed(mut self, k: &[u8], t: u32, v: V) -> Self {
        self.kvs.push((k.to_vec(), t, v));
        self
    }
    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        self.tensors
            .push((name.as_bytes().to_vec(), dims.to_vec(), ty, offset));
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(self.version.to_le_bytes());
        b.extend(
            self.n_tensors
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        b.extend(self.n_kv.unwrap_or(self.kvs.len() as u64).to_le_bytes());
        for (k, t, v) in &self.kvs {
            put_str(&mut b, k);
            b.extend(t.to_le_bytes());
            v.payload(&mut b);
        }
        for (name, dims, ty, off) in &self.tensors {
            put_tensor_info(&mut b, name, dims, *ty, *off);
        }
        b
    }
}

fn round_up(n: u64, a: u64) -> u64 {
    n.div_ceil(a) * a
}

/// Lays tensors out back to back, each start padded to `align`, from hand-computed sizes.
/// Returns the header and the total file length (header + padding + data).
fn laid_out(mut g: G, specs: &[(&str, &[u64], u32, u64)], align: u64) -> (Vec<u8>, u64) {
    let mut off = 0;
    let mut end = 0;
    for (name, dims, ty, bytes) in specs {
        g = g.tensor(name, dims, *ty, off);
        end = off + bytes;
        off = round_up(end, align);
    }
    let h = g.bytes();
    let len = round_up(h.len() as u64, align) + end;
    (h, len)
}

/// A header with one tensor of `bytes` at offset 0, and its exact file length.
fn one_tensor(dims: &[u64], ty: u32, bytes: u64) -> (Vec<u8>, u64) {
    laid_out(G::new(3), &[("t.weight", dims, ty, bytes)], 32)
}

fn parse(h: &[u8], len: u64) -> GgufFile {
    read_gguf(h, len, "t.gguf").unwrap_or_else(|e| panic!("rejected: {e}"))
}

/// The error message, checked to be one line naming the file.
fn err_of(h: &[u8], len: u64) -> String {
    match read_gguf(h, len, "t.gguf") {
        Ok(_) => panic!("accepted a bad header"),
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with("t.gguf: "), "{m}");
            assert!(!m.contains('\n'), "{m}");
            m
        }
    }
}

fn assert_err(h: &[u8], len: u64, needle: &str) {
    let m = err_of(h, len);
    assert!(m.contains(needle), "expected '{needle}' in: {m}");
}

// ---------------------------------------------------------------------------------------------
// The real fixture, written by gguf-py 0.19.0 (scripts/make_gguf.py).
// ---------------------------------------------------------------------------------------------

fn fixture_file() -> GgufFile {
    read_gguf_path(Path::new(fixture())).unwrap()
}

#[test]
fn fixture_metadata() {
    let g = fixture_file();
    assert_eq!(g.version, 3);
    // 12 KVs: GGUFWriter(arch="llama") writes general.architecture, then the 11 add_* calls.
    let keys: Vec<&str> = g.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.name",
            "llama.context_length",
            "llama.embedding_length",
            "llama.block_count",
            "llama.feed_forward_length",
            "llama.attention.head_count",
            "llama.attention.head_count_kv",
            "llama.attention.layer_norm_rms_epsilon",
            "general.file_type",
            "tokenizer.ggml.model",
            "tokenizer.ggml.tokens",
        ]
    );
    assert_eq!(g.architecture(), Some("llama"));
    // gguf-py's add_* helpers for counts write u32; the epsilon is f32.
    assert_eq!(g.get("llama.context_length"), Some(&GgufValue::U32(128)));
    assert_eq!(
        g.get("llama.feed_forward_length"),
        Some(&GgufValue::U32(172))
    );
    assert_eq!(
        g.get("llama.attention.layer_norm_rms_epsilon"),
        Some(&GgufValue::F32(1e-6))
    );
    // LlamaFileType.MOSTLY_Q8_0 = 7
    assert_eq!(g.get("general.file_type"), Some(&GgufValue::U32(7)));
    let tokens: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    assert_eq!(
        g.get("tokenizer.ggml.tokens"),
        Some(&GgufValue::Array(GgufArray::String(tokens)))
    );
}

#[test]
fn fixture_summary() {
    let sum = fixture_file().summary();
    assert_eq!(sum.architecture.as_deref(), Some("llama"));
    assert_eq!(sum.name.as_deref(), Some("tiny-test"));
    assert_eq!(sum.context_length, Some(128));
    assert_eq!(sum.embedding_length, Some(64));
    assert_eq!(sum.block_count, Some(2));
    assert_eq!(sum.feed_forward_length, Some(172));
    assert_eq!(sum.head_count, Some(4));
    assert_eq!(sum.head_count_kv, Some(2));
    assert_eq!(sum.vocab_size, Some(8));
    assert_eq!(sum.expert_count, None);
    assert_eq!(sum.file_type, Some(7));
    assert_eq!(sum.file_type_name.as_deref(), Some("MOSTLY_Q8_0"));
}

#[test]
fn fixture_tensors_and_sizes() {
    let g = fixture_file();
    // numpy shapes (8, 64), (64,), Q8_0 (64, 64) are stored reversed (ne[0] first).
    // token_embd: 8*64 f32 = 2048 B at 0; attn_norm: 64 f16 = 128 B at 2048;
    // attn_q: 64*64/32 blocks * 34 B = 4352 B at 2048 + 128 = 2176 (a multiple of 32).
    let t: Vec<(&str, &[u64], GgmlType, u64, u64)> = g
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.dims.as_slice(),
                t.ggml_type,
                t.offset,
                t.bytes,
            )
        })
        .collect();
    assert_eq!(
        t,
        [
            ("token_embd.weight", &[64u64, 8][..], GgmlType::F32, 0, 2048),
            (
                "blk.0.attn_norm.weight",
                &[64][..],
                GgmlType::F16,
                2048,
                128
            ),
            (
                "blk.0.attn_q.weight",
                &[64, 64][..],
                GgmlType::Q8_0,
                2176,
                4352
            ),
        ]
    );

    // Header size by hand: 24 (magic, version, counts) + KVs (8 + key + 4 + value each):
    // 45 + 41 + 36 + 38 + 33 + 41 + 42 + 45 + 54 + 33 + 45 + 125 (8 tokens: 4+8+8*(8+2)) = 578,
    // + tensor infos (8 + name + 4 + 8*n_dims + 4 + 8): 57 + 54 + 59 = 170. 24+578+170 = 772,
    // padded to 32 -> 800.
    assert_eq!(g.alignment, 32);
    assert_eq!(g.data_offset, 800);
    // Every tensor size here is already a multiple of 32, so padding adds nothing:
    // 800 + 2048 + 128 + 4352 = 7328 = the file size.
    let file_len = std::fs::metadata(fixture()).unwrap().len();
    assert_eq!(file_len, 7328);
    let padded: u64 = g.tensors.iter().map(|t| round_up(t.bytes, 32)).sum();
    assert_eq!(g.data_offset + padded, file_len);
    assert_eq!(g.tensor_bytes(), 2048 + 128 + 4352);
}

#[test]
fn fixture_inventory_in_pytorch_order() {
    let g = read_gguf_path(Path::new(fixture())).unwrap();
    let inv = g.inventory().unwrap();
    type Row<'a> = (&'a str, &'a [u64], DType, u64, Option<u32>, Component);
    let rows: Vec<Row> = inv
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.shape.as_slice(),
                t.dtype,
                t.bytes,
                t.layer,
                t.component,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            // the numpy shapes of make_gguf.py again
            (
                "token_embd.weight",
                &[8u64, 64][..],
                DType::F32,
                2048,
                None,
                Component::Embedding
            ),
            (
                "blk.0.attn_norm.weight",
                &[64][..],
                DType::F16,
                128,
                Some(0),
                Component::Norm
            ),
            (
                "blk.0.attn_q.weight",
                &[64, 64][..],
                DType::Ggml(GgmlType::Q8_0),
                4352,
                Some(0),
                Component::Attention
            ),
        ]
    );
    assert_eq!(inv.params(), 8 * 64 + 64 + 64 * 64);
    assert_eq!(inv.bytes(), 6528);
}

#[test]
fn fixture_reads_only_the_header() {
    let all = std::fs::read(fixture()).unwrap();
    // Give the reader the 800 header bytes only, but the true file length.
    let g = parse(&all[..800], all.len() as u64);
    let mut want = read_gguf_path(Path::new(fixture())).unwrap();
    want.path = "t.gguf".into();
    assert_eq!(g, want);
}

#[test]
fn fixture_every_truncation_is_an_error() {
    let all = std::fs::read(fixture()).unwrap();
    for k in 0..all.len() {
        // A file cut at k bytes: header incomplete, or tensor data past the end.
        let m = err_of(&all[..k], k as u64);
        assert!(!m.is_empty());
        // A reader that stops early although the length claims the whole file.
        if k < 772 {
            err_of(&all[..k], all.len() as u64);
        }
    }
    assert!(read_gguf(&all[..], all.len() as u64, "t.gguf").is_ok());
}

#[test]
fn file_errors_name_the_path() {
    let missing = Path::new("/nonexistent/dir/model.gguf");
    match read_gguf_path(missing) {
        Err(FormatError::Io { path, .. }) => assert_eq!(path, "/nonexistent/dir/model.gguf"),
        other => panic!("{other:?}"),
    }
    let dir = std::env::temp_dir();
    let m = read_gguf_path(&dir).unwrap_err().to_string();
    assert!(m.contains("not a regular file"), "{m}");
}

// ---------------------------------------------------------------------------------------------
// Synthetic headers
// ---------------------------------------------------------------------------------------------

fn every_value_type() -> G {
    G::new(3)
        .kv("u8", V::U8(200))
        .kv("i8", V::I8(-100))
        .kv("u16", V::U16(60000))
        .kv("i16", V::I16(-30000))
        .kv("u32", V::U32(4_000_000_000))
        .kv("i32", V::I32(-2_000_000_000))
        .kv("f32", V::F32(1.5))
        .kv("bool", V::Bool(1))
        .kv("str", s("héllo"))
        .kv("u64", V::U64(u64::MAX))
        .kv("i64", V::I64(i64::MIN))
        .kv("f64", V::F64(-0.25))
        .kv("arr.u8", V::Arr(0, vec![V::U8(1), V::U8(2)]))
        .kv("arr.i8", V::Arr(1, vec![V::I8(-1)]))
        .kv("arr.u16", V::Arr(2, vec![V::U16(7)]))
        .kv("arr.i16", V::Arr(3, vec![V::I16(-7)]))
        .kv("arr.u32", V::Arr(4, vec![V::U32(11008), V::U32(14336)]))
        .kv("arr.i32", V::Arr(5, vec![V::I32(-5), V::I32(5)]))
        .kv("arr.f32", V::Arr(6, vec![V::F32(0.5)]))
        .kv("arr.bool", V::Arr(7, vec![V::Bool(0), V::Bool(1)]))
        .kv("arr.str", V::Arr(8, vec![s("a"), s("")]))
        .kv("arr.u64", V::Arr(10, vec![V::U64(1 << 40)]))
        .kv("arr.i64", V::Arr(11, vec![V::I64(-1)]))
        .kv("arr.f64", V::Arr(12, vec![V::F64(2.0)]))
        .kv("arr.empty", V::Arr(4, vec![]))
        .kv(
            "arr.nested",
            V::Arr(
                9,
                vec![
                    V::Arr(4, vec![V::U32(1), V::U32(2)]),
                    V::Arr(8, vec![s("x")]),
                ],
            ),
        )
}

fn check_every_value_type(g: &GgufFile) {
    use GgufValue as GV;
    let expect: Vec<(&str, GgufValue)> = vec![
        ("u8", GV::U8(200)),
        ("i8", GV::I8(-100)),
        ("u16", GV::U16(60000)),
        ("i16", GV::I16(-30000)),
        ("u32", GV::U32(4_000_000_000)),
        ("i32", GV::I32(-2_000_000_000)),
        ("f32", GV::F32(1.5)),
        ("bool", GV::Bool(true)),
        ("str", GV::String("héllo".into())),
        ("u64", GV::U64(u64::MAX)),
        ("i64", GV::I64(i64::MIN)),
        ("f64", GV::F64(-0.25)),
        ("arr.u8", GV::Array(GgufArray::U8(vec![1, 2]))),
        ("arr.i8", GV::Array(GgufArray::I8(vec![-1]))),
        ("arr.u16", GV::Array(GgufArray::U16(vec![7]))),
        ("arr.i16", GV::Array(GgufArray::I16(vec![-7]))),
        ("arr.u32", GV::Array(GgufArray::U32(vec![11008, 14336]))),
        ("arr.i32", GV::Array(GgufArray::I32(vec![-5, 5]))),
        ("arr.f32", GV::Array(GgufArray::F32(vec![0.5]))),
        ("arr.bool", GV::Array(GgufArray::Bool(vec![false, true]))),
        (
            "arr.str",
            GV::Array(GgufArray::String(vec!["a".into(), "".into()])),
        ),
        ("arr.u64", GV::Array(GgufArray::U64(vec![1 << 40]))),
        ("arr.i64", GV::Array(GgufArray::I64(vec![-1]))),
        ("arr.f64", GV::Array(GgufArray::F64(vec![2.0]))),
        ("arr.empty", GV::Array(GgufArray::U32(vec![]))),
        (
            "arr.nested",
            GV::Array(GgufArray::Array(vec![
                GgufArray::U32(vec![1, 2]),
                GgufArray::String(vec!["x".into()]),
            ])),
        ),
    ];
    let got: Vec<(&str, GgufValue)> = g
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    assert_eq!(got, expect);
    // The 13 value types, by their ids 0..=12.
    let mut seen: Vec<u32> = g
        .metadata
        .iter()
        .map(|(_, v)| v.value_type() as u32)
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, (0..=12).collect::<Vec<u32>>());
}

#[test]
fn every_value_type_in_v2_and_v3() {
    for version in [2, 3] {
        let mut g = every_value_type();
        g.version = version;
        let h = g.bytes();
        // No tensors: the file is just the header.
        let f = parse(&h, h.len() as u64);
        assert_eq!(f.version, version);
        assert!(f.tensors.is_empty());
        check_every_value_type(&f);
    }
}

#[test]
fn value_accessors() {
    let h = every_value_type().bytes();
    let f = parse(&h, h.len() as u64);
    assert_eq!(f.get("u16").and_then(GgufValue::as_u64), Some(60000));
    assert_eq!(f.get("i8").and_then(GgufValue::as_u64), None); // negative
    assert_eq!(f.get("i8").and_then(GgufValue::as_f64), Some(-100.0));
    assert_eq!(f.get("str").and_then(GgufValue::as_str), Some("héllo"));
    assert_eq!(f.get("bool").and_then(GgufValue::as_bool), Some(true));
    let a = f.get("arr.u32").and_then(GgufValue::as_array).unwrap();
    assert_eq!(a.element_type(), GgufValueType::U32);
    assert_eq!(a.to_u64s(), Some(vec![11008, 14336]));
    assert_eq!(f.get("missing"), None);
}

#[test]
fn quantized_sizes_by_hand_and_reversed_dims() {
    // bytes = elements / block * bytes per block (ggml-common.h):
    let specs: &[(&str, &[u64], u32, u64)] = &[
        // Q4_K: 4096*4096 = 16,777,216 / 256 = 65,536 blocks * 144 B
        ("blk.0.attn_q.weight", &[4096, 4096], Q4_K, 65_536 * 144),
        // Q4_0: 4096*11008 = 45,088,768 / 32 = 1,409,024 blocks * 18 B
        ("blk.0.ffn_up.weight", &[4096, 11008], Q4_0, 1_409_024 * 18),
        // Q6_K: 11008*4096 / 256 = 176,128 blocks * 210 B
        ("blk.0.ffn_down.weight", &[11008, 4096], Q6_K, 176_128 * 210),
        // IQ2_XXS: 256*4 / 256 = 4 blocks * 66 B
        ("blk.1.attn_k.weight", &[256, 4], IQ2_XXS, 4 * 66),
        // MXFP4 experts: 2880*2880*32 = 265,420,800 / 32 = 8,294,400 blocks * 17 B
        (
            "blk.1.ffn_gate_exps.weight",
            &[2880, 2880, 32],
            MXFP4,
            8_294_400 * 17,
        ),
        // NVFP4: 64*2 / 64 = 2 blocks * 36 B
        ("blk.1.ffn_up_shexp.weight", &[64, 2], NVFP4, 2 * 36),
        // Q1_0: 128*3 / 128 = 3 blocks * 18 B
        ("blk.1.ffn_gate_inp.weight", &[128, 3], Q1_0, 3 * 18),
        // BF16: 4096 * 2 B
        ("output_norm.weight", &[4096], BF16, 8192),
        // Q8_0: 4096*32000/32 = 4,096,000 blocks * 34 B
        ("output.weight", &[4096, 32000], Q8_0, 4_096_000 * 34),
    ];
    let (h, len) = laid_out(G::new(3).kv("general.architecture", s("llama")), specs, 32);
    let f = parse(&h, len);
    for (t, spec) in f.tensors.iter().zip(specs) {
        assert_eq!(t.name, spec.0);
        assert_eq!(t.dims, spec.1);
        assert_eq!(t.bytes, spec.3, "{}", t.name);
        assert_eq!(t.offset % 32, 0);
    }
    let inv = f.inventory().unwrap();
    let by_name = |n: &str| inv.get(n).unwrap().clone();
    // PyTorch order: nn.Linear(4096, 11008).weight is [11008, 4096]; experts outermost.
    assert_eq!(by_name("blk.0.ffn_up.weight").shape, [11008, 4096]);
    assert_eq!(by_name("blk.0.ffn_down.weight").shape, [4096, 11008]);
    assert_eq!(
        by_name("blk.1.ffn_gate_exps.weight").shape,
        [32, 2880, 2880]
    );
    assert_eq!(by_name("output.weight").shape, [32000, 4096]);
    assert_eq!(
        by_name("blk.0.attn_q.weight").dtype,
        DType::Ggml(GgmlType::Q4_K)
    );
    assert_eq!(by_name("output_norm.weight").dtype, DType::BF16);
    for (t, spec) in inv.tensors.iter().zip(specs) {
        assert_eq!(t.bytes, spec.3, "{}", t.name);
    }
    let comps: Vec<(Option<u32>, Component)> =
        inv.tensors.iter().map(|t| (t.layer, t.component)).collect();
    assert_eq!(
        comps,
        [
            (Some(0), Component::Attention),
            (Some(0), Component::Mlp),
            (Some(0), Component::Mlp),
            (Some(1), Component::Attention),
            (Some(1), Component::Experts),
            (Some(1), Component::Mlp),
            (Some(1), Component::Router),
            (None, Component::Norm),
            (None, Component::Head),
        ]
    );
}

#[test]
fn component_names_from_llama_cpp() {
    // Names from gguf-py TENSOR_NAMES (constants.py) with .weight/.bias added.
    let cases = [
        ("token_embd.weight", Component::Embedding),
        ("token_embd_norm.weight", Component::Embedding),
        ("position_embd.weight", Component::Embedding),
        ("token_types.weight", Component::Embedding),
        ("output.weight", Component::Head),
        ("output_norm.weight", Component::Norm),
        ("rope_freqs.weight", Component::Attention),
        ("cls.output.weight", Component::Head),
        ("blk.0.attn_qkv.weight", Component::Attention),
        ("blk.0.attn_q.bias", Component::Attention),
        ("blk.0.attn_output.weight", Component::Attention),
        ("blk.0.attn_q_a.weight", Component::Attention),
        ("blk.0.attn_q_b.weight", Component::Attention),
        ("blk.0.attn_kv_a_mqa.weight", Component::Attention),
        ("blk.0.attn_kv_b.weight", Component::Attention),
        ("blk.0.attn_sinks.weight", Component::Attention),
        ("blk.0.attn_norm.weight", Component::Norm),
        ("blk.0.attn_q_norm.weight", Component::Norm),
        ("blk.0.attn_q_a_norm.weight", Component::Norm),
        ("blk.0.attn_kv_a_norm.weight", Component::Norm),
        ("blk.0.ffn_norm.weight", Component::Norm),
        ("blk.0.post_attention_norm.weight", Component::Norm),
        ("blk.0.post_ffw_norm.weight", Component::Norm),
        ("blk.0.ffn_gate.weight", Component::Mlp),
        ("blk.0.ffn_up.weight", Component::Mlp),
        ("blk.0.ffn_down.weight", Component::Mlp),
        ("blk.0.ffn_gate_shexp.weight", Component::Mlp),
        ("blk.0.ffn_down_shexp.weight", Component::Mlp),
        ("blk.0.ffn_gate_exps.weight", Component::Experts),
        ("blk.0.ffn_up_exps.weight", Component::Experts),
        ("blk.0.ffn_down_exps.weight", Component::Experts),
        ("blk.0.ffn_gate_up_exps.weight", Component::Experts),
        ("blk.0.ffn_gate_inp.weight", Component::Router),
        ("blk.0.ffn_gate_inp_shexp.weight", Component::Router),
        ("blk.0.exp_probs_b.bias", Component::Router),
        ("blk.0.ssm_in.weight", Component::Attention),
        ("blk.0.ssm_norm.weight", Component::Norm),
        ("blk.0.time_mix_key.weight", Component::Attention),
        ("blk.0.channel_mix_key.weight", Component::Mlp),
        ("enc.blk.0.attn_rel_b.weight", Component::Attention),
        ("dec.blk.0.cross_attn_q.weight", Component::Attention),
        ("dec.blk.0.cross_attn_norm.weight", Component::Norm),
        ("v.blk.0.ln1.weight", Component::Norm),
        ("v.patch_embd.weight", Component::Embedding),
    ];
    for (name, c) in cases {
        assert_eq!(tensor_component(name), c, "{name}");
    }
    assert_eq!(tensor_block("blk.31.attn_q.weight"), Some(31));
    assert_eq!(tensor_block("dec.blk.2.ffn_up.weight"), Some(2));
    assert_eq!(tensor_block("blk.x.attn_q.weight"), None);
    assert_eq!(tensor_block("output.weight"), None);
}

#[test]
fn encoder_decoder_layers_are_global() {
    // T5-style: two encoder blocks then one decoder block, all F32 [4].
    let (h, len) = laid_out(
        G::new(3),
        &[
            ("enc.blk.0.attn_q.weight", &[4], F32, 16),
            ("enc.blk.1.attn_q.weight", &[4], F32, 16),
            ("dec.blk.0.attn_q.weight", &[4], F32, 16),
        ],
        32,
    );
    let inv = parse(&h, len).inventory().unwrap();
    let layers: Vec<Option<u32>> = inv.tensors.iter().map(|t| t.layer).collect();
    assert_eq!(layers, [Some(0), Some(1), Some(2)]);
}

#[test]
fn custom_alignment() {
    // general.alignment = 64: data starts at the header end rounded to 64, offsets too.
    let g = G::new(3).kv("general.alignment", V::U32(64));
    let (h, len) = laid_out(
        g.clone(),
        &[("a.weight", &[10], F32, 40), ("b.weight", &[10], F32, 40)],
        64,
    );
    let f = parse(&h, len);
    assert_eq!(f.alignment, 64);
    assert_eq!(f.data_offset, round_up(h.len() as u64, 64));
    assert_eq!(f.tensors[1].offset, 64);
    // Offset 32 is aligned to the default 32 but not to 64.
    let h = g.tensor("a.weight", &[10], F32, 32).bytes();
    assert_err(&h, 1 << 20, "not a multiple of the alignment 64");
}

#[test]
fn summary_takes_largest_per_layer_value_and_ftype_names() {
    let h = G::new(3)
        .kv("general.architecture", s("openelm"))
        .kv(
            "openelm.attention.head_count",
            V::Arr(5, vec![V::I32(12), V::I32(16)]),
        )
        .kv("openelm.block_count", V::U64(28))
        .kv("openelm.vocab_size", V::U32(32000))
        .kv("general.file_type", V::U32(15))
        .bytes();
    let sum = parse(&h, h.len() as u64).summary();
    assert_eq!(sum.head_count, Some(16));
    assert_eq!(sum.block_count, Some(28));
    assert_eq!(sum.vocab_size, Some(32000));
    assert_eq!(sum.file_type_name.as_deref(), Some("MOSTLY_Q4_K_M"));
    // llama.h enum llama_ftype
    assert_eq!(ftype_name(0).as_deref(), Some("ALL_F32"));
    assert_eq!(ftype_name(18).as_deref(), Some("MOSTLY_Q6_K"));
    assert_eq!(ftype_name(32).as_deref(), Some("MOSTLY_BF16"));
    assert_eq!(ftype_name(38).as_deref(), Some("MOSTLY_MXFP4_MOE"));
    assert_eq!(
        ftype_name(1024 + 15).as_deref(),
        Some("MOSTLY_Q4_K_M (guessed)")
    );
    assert_eq!(ftype_name(999), None);
}

#[test]
fn nesting_up_to_the_limit() {
    // 8 levels deep is accepted, 9 is refused.
    fn nest(levels: usize) -> V {
        let mut v = V::Arr(4, vec![V::U32(1)]);
        for _ in 1..levels {
            v = V::Arr(9, vec![v]);
        }
        v
    }
    let h = G::new(3).kv("deep", nest(8)).bytes();
    parse(&h, h.len() as u64);
    let h = G::new(3).kv("deep", nest(9)).bytes();
    assert_err(&h, h.len() as u64, "deeper than 8");
}

// ---------------------------------------------------------------------------------------------
// Hostile headers
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_magic_and_versions() {
    let mut h = G::new(3).bytes();
    h[3] = b'G';
    assert_err(&h, h.len() as u64, "not a GGUF file");
    for (v, needle) in [
        (1, "version 1 is not supported"),
        (4, "version 4 is not supported (only versions 2 and 3)"),
        (0, "version 0 is not supported"),
        (0x0300_0000, "big-endian"),
    ] {
        let h = G::new(v).bytes();
        assert_err(&h, h.len() as u64, needle);
    }
}

#[test]
fn impossible_counts_fail_before_allocating() {
    let mut g = G::new(3);
    g.n_tensors = Some(1 << 40);
    let h = g.bytes();
    assert_err(
        &h,
        h.len() as u64,
        "tensor count 1099511627776 is impossible",
    );
    // Even with a (claimed) 1 TB file, 2^60 KVs need more than 13 * 2^60 bytes.
    let mut g = G::new(3);
    g.n_kv = Some(1 << 60);
    let h = g.bytes();
    assert_err(
        &h,
        1 << 40,
        "metadata count 1152921504606846976 is impossible",
    );
    let mut g = G::new(3);
    g.n_kv = Some(u64::MAX);
    g.n_tensors = Some(u64::MAX);
    let h = g.bytes();
    assert_err(&h, u64::MAX, "impossible");
}

#[test]
fn hostile_strings() {
    // Key length 2^62.
    let mut h = G::new(3).bytes();
    h[16..24].copy_from_slice(&1u64.to_le_bytes()); // one KV
    h.extend((1u64 << 62).to_le_bytes());
    h.extend([0u8; 16]);
    assert_err(
        &h,
        h.len() as u64,
        "claims a length of 4611686018427387904 bytes",
    );
    // A string value running past the end of the file.
    let mut h = G::new(3).kv("k", s("abc")).bytes();
    let n = h.len();
    h[n - 11..n - 3].copy_from_slice(&1000u64.to_le_bytes());
    assert_err(&h, h.len() as u64, "claims 1000 bytes but only 3 remain");
    // Non-UTF-8 key and value.
    let h = G::new(3).kv_typed(&[0x6b, 0xff], 4, V::U32(1)).bytes();
    assert_err(&h, h.len() as u64, "not valid UTF-8");
    let h = G::new(3).kv("k", V::Str(vec![0xc3])).bytes();
    assert_err(&h, h.len() as u64, "not valid UTF-8");
    // Empty and duplicate keys.
    let h = G::new(3).kv("", V::U8(1)).bytes();
    assert_err(&h, h.len() as u64, "empty key");
    let h = G::new(3).kv("k", V::U8(1)).kv("k", V::U8(2)).bytes();
    assert_err(&h, h.len() as u64, "'k' appears twice");
}

#[test]
fn hostile_arrays_and_types() {
    // 2^50 u8 elements claimed, a few bytes present.
    let h = G::new(3)
        .kv("a", V::ArrClaim(0, 1 << 50))
        .kv("pad", V::U64(0))
        .bytes();
    assert_err(&h, h.len() as u64, "claims 1125899906842624 elements");
    // 1000 u32 elements need 4000 bytes.
    let h = G::new(3).kv("a", V::ArrClaim(4, 1000)).bytes();
    assert_err(&h, h.len() as u64, "at least 4000 bytes");
    // 100 strings need at least 800 bytes of length fields.
    let h = G::new(3).kv("a", V::ArrClaim(8, 100)).bytes();
    assert_err(&h, h.len() as u64, "at least 800 bytes");
    // Unknown value type (13) for a value and for array elements.
    let h = G::new(3).kv_typed(b"k", 13, V::U32(0)).bytes();
    assert_err(&h, h.len() as u64, "unknown value type 13");
    let h = G::new(3).kv("k", V::ArrClaim(99, 0)).bytes();
    assert_err(&h, h.len() as u64, "unknown value type 99");
    // A bool must be 0 or 1.
    let h = G::new(3).kv("k", V::Bool(2)).bytes();
    assert_err(&h, h.len() as u64, "must be 0 or 1");
}

#[test]
fn bad_alignment_values() {
    for (v, needle) in [
        (V::U32(48), "48 is not a power of two"),
        (V::U32(0), "0 is not a power of two"),
        (V::U64(32), "must be a u32"),
    ] {
        let h = G::new(3).kv("general.alignment", v).bytes();
        assert_err(&h, h.len() as u64, needle);
    }
}

#[test]
fn hostile_tensor_infos() {
    let (h, len) = one_tensor(&[4096, 4096], 4, 0); // 4 = Q4_2, removed from ggml
    assert_err(&h, len + (1 << 30), "unknown ggml type id 4");
    let (h, len) = one_tensor(&[32], 43, 0); // one past GGML_TYPE_Q2_0
    assert_err(&h, len + 64, "unknown ggml type id 43");
    let (h, len) = one_tensor(&[32], u32::MAX, 0);
    assert_err(&h, len + 64, "unknown ggml type id 4294967295");
    let (h, len) = one_tensor(&[1, 1, 1, 1, 1], F32, 4);
    assert_err(&h, len, "5 dimensions (must be 1 to 4)");
    let (h, len) = one_tensor(&[], F32, 4);
    assert_err(&h, len, "0 dimensions");
    let (h, len) = one_tensor(&[4, 0], F32, 0);
    assert_err(&h, len, "dimension 1 of size 0");
    // 2^32 * 2^32 = 2^64 elements.
    let (h, len) = one_tensor(&[1 << 32, 1 << 32], F32, 0);
    assert_err(&h, len, "overflows");
    // 2^62 F32 elements = 2^64 bytes.
    let (h, len) = one_tensor(&[1 << 31, 1 << 31], F32, 0);
    assert_err(&h, len, "byte size that overflows");
    // A Q4_K row of 100 elements is not whole 256-blocks.
    let (h, len) = one_tensor(&[100, 256], Q4_K, 0);
    assert_err(
        &h,
        len,
        "rows of 100 elements, not a multiple of the Q4_K block size 256",
    );
    // Data past the end: 64 F32 = 256 B but the file has 255.
    let (h, len) = one_tensor(&[64], F32, 256);
    parse(&h, len);
    assert_err(&h, len - 1, "runs past the end of the file");
    // Offset so large that data_offset + offset overflows.
    let h = G::new(3).tensor("t", &[1], F32, u64::MAX - 31).bytes();
    assert_err(&h, u64::MAX, "runs past the end");
}

#[test]
fn misaligned_overlapping_and_duplicate_tensors() {
    let h = G::new(3).tensor("a", &[64], F32, 16).bytes();
    assert_err(
        &h,
        1 << 20,
        "offset 16 is not a multiple of the alignment 32",
    );
    // a: 64 F32 = 256 B at 0; b at 128 lies inside it.
    let h = G::new(3)
        .tensor("a", &[64], F32, 0)
        .tensor("b", &[64], F32, 128)
        .bytes();
    assert_err(&h, 1 << 20, "'a' (bytes 0..256) and 'b' (from 128) overlap");
    // Same, listed in the other order.
    let h = G::new(3)
        .tensor("b", &[64], F32, 128)
        .tensor("a", &[64], F32, 0)
        .bytes();
    assert_err(&h, 1 << 20, "overlap");
    // Touching is fine: b at 256.
    let h = G::new(3)
        .tensor("b", &[64], F32, 256)
        .tensor("a", &[64], F32, 0)
        .bytes();
    parse(&h, round_up(h.len() as u64, 32) + 512);
    let h = G::new(3)
        .tensor("a", &[8], F32, 0)
        .tensor("a", &[8], F32, 32)
        .bytes();
    assert_err(&h, 1 << 20, "tensor name 'a' appears twice");
}

#[test]
fn every_truncation_of_a_synthetic_header_is_an_error() {
    let (h, len) = laid_out(
        every_value_type(),
        &[
            ("blk.0.attn_q.weight", &[256, 2], Q4_K, 2 * 144),
            ("blk.0.attn_norm.weight", &[256], F16, 512),
        ],
        32,
    );
    parse(&h, len);
    for k in 0..h.len() {
        err_of(&h[..k], k as u64);
        err_of(&h[..k], len);
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// What any accepted header must satisfy.
fn check_invariants(g: &GgufFile, len: u64) {
    assert!(g.version == 2 || g.version == 3);
    assert!(g.alignment.is_power_of_two());
    assert_eq!(g.data_offset % g.alignment, 0);
    let mut names = std::collections::HashSet::new();
    let mut spans = vec![];
    for t in &g.tensors {
        assert!(names.insert(&t.name));
        assert!(!t.dims.is_empty() && t.dims.len() <= 4);
        assert_eq!(t.dims[0] % t.ggml_type.block_size(), 0);
        assert_eq!(t.ggml_type.bytes_for(t.elements()), Some(t.bytes));
        assert_eq!(t.offset % g.alignment, 0);
        assert!(g.data_offset + t.offset + t.bytes <= len);
        spans.push((t.offset, t.offset + t.bytes));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0);
    }
    let inv = g.inventory().unwrap();
    assert_eq!(inv.bytes(), g.tensor_bytes());
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(fixture()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                extra in 0u64..1_000_000) {
        if let Ok(g) = read_gguf(&bytes[..], bytes.len() as u64 + extra, "p") {
            check_invariants(&g, bytes.len() as u64 + extra);
        }
    }

    #[test]
    fn random_bytes_after_a_valid_preamble_never_panic(
        version in 2u32..=3,
        n_tensors in 0u64..4,
        n_kv in 0u64..4,
        tail in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut b = b"GGUF".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(n_tensors.to_le_bytes());
        b.extend(n_kv.to_le_bytes());
        b.extend(tail);
        if let Ok(g) = read_gguf(&b[..], b.len() as u64, "p") {
            check_invariants(&g, b.len() as u64);
        }
    }

    #[test]
    fn mutated_fixture_never_panics(
        edits in proptest::collection::vec((0usize..800, any::<u8>()), 1..8),
        cut in 0usize..=7328,
    ) {
        let mut b = fixture_bytes();
        for (i, x) in edits {
            b[i] = x;
        }
        b.truncate(cut);
        if let Ok(g) = read_gguf(&b[..], b.len() as u64, "p") {
            check_invariants(&g, b.len() as u64);
        }
    }

    #[test]
    fn mutated_synthetic_header_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let (mut h, len) = laid_out(
            every_value_type(),
            &[("blk.0.ffn_up.weight", &[512, 2], Q4_K, 4 * 144)],
            32,
        );
        for (i, x) in edits {
            let i = i.index(h.len());
            h[i] = x;
        }
        if let Ok(g) = read_gguf(&h[..], len, "p") {
            check_invariants(&g, len);
        }
    }
}

/// The fixture's path, checked to exist.
fn fixture() -> &'static str {
    shared(FIXTURE)
}
