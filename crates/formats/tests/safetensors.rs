//! Header-only safetensors reader: the real sharded fixture, agreement with the inventory
//! builder for every naming family, and hostile files (all errors, never a panic).

mod common;
use common::{safetensors_file, shared, TempDir};

use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::fs;
use std::io::{Cursor, Read};
use std::path::Path;
use vramscope_core::model::*;
use vramscope_core::{build_inventory, Component, DType, Tensor};
use vramscope_formats::safetensors::{read_checkpoint, read_file_header, read_header};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/hf_tiny_llama"
);

// ------------------------------------------------------------------------------------------
// helpers

/// Bits per element by safetensors dtype name, from the format's README table (independent of
/// the code under test).
fn bits(dtype: &str) -> u64 {
    match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 8,
        "F16" | "BF16" | "I16" | "U16" => 16,
        "F32" | "I32" | "U32" => 32,
        "F64" | "I64" | "U64" | "C64" => 64,
        _ => panic!("test helper: no size for {dtype}"),
    }
}

/// A complete, valid safetensors file: tensors laid out in the order given, header padded with
/// spaces to 8 bytes, data all zeros.
fn st_file(tensors: &[(&str, &str, &[u64])], metadata: Option<serde_json::Value>) -> Vec<u8> {
    let sized = tensors.iter().map(|&(name, dtype, shape)| {
        (
            name,
            dtype,
            shape,
            shape.iter().product::<u64>() * bits(dtype) / 8,
        )
    });
    let (header, len) = safetensors_file::header_json(sized, metadata);
    raw_file(&header, len as usize)
}

/// `u64` LE length + the header text (space-padded to 8 bytes) + `data_len` zero bytes.
fn raw_file(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = safetensors_file::head_bytes(header);
    out.resize(out.len() + data_len, 0);
    out
}

fn header_of(
    bytes: &[u8],
) -> vramscope_formats::Result<vramscope_formats::safetensors::SafetensorsHeader> {
    read_header(Cursor::new(bytes), bytes.len() as u64, "mem")
}

/// The error text of reading `bytes` as a safetensors file; panics if it was read fine.
fn err_of(bytes: &[u8]) -> String {
    match header_of(bytes) {
        Ok(h) => panic!("expected an error, got {h:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_err_contains(bytes: &[u8], needle: &str) {
    let e = err_of(bytes);
    assert!(
        e.contains(needle),
        "error '{e}' does not mention '{needle}'"
    );
    assert!(!e.contains('\n'), "error is not one line: {e}");
}

fn small_valid() -> Vec<u8> {
    st_file(
        &[
            ("a.weight", "BF16", &[2, 3]),
            ("b.bias", "F32", &[3]),
            ("c.scale", "F4", &[4]),
            ("empty", "F16", &[0, 5]),
        ],
        Some(json!({"format": "pt"})),
    )
}

// ------------------------------------------------------------------------------------------
// the real fixture

/// The fixture's config.json: LlamaForCausalLM, vocab 256, hidden 64, 2 layers, 4 heads of 16,
/// 2 KV heads, intermediate 172, untied, bf16 (2 bytes per parameter).
///
/// embed_tokens      256 × 64                     = 16,384
/// per layer:
///   q_proj (4·16) × 64 = 4,096;  k_proj (2·16) × 64 = 2,048;  v_proj 2,048
///   o_proj 64 × 64 = 4,096
///     attention                                  = 12,288
///   gate_proj 172 × 64 = 11,008;  up_proj 11,008;  down_proj 64 × 172 = 11,008
///     mlp                                        = 33,024
///   input_layernorm 64 + post_attention_layernorm 64 = 128
///   layer total 12,288 + 33,024 + 128            = 45,440   (× 2 layers = 90,880)
/// model.norm 64
/// lm_head           256 × 64                     = 16,384
/// total 16,384 + 90,880 + 64 + 16,384            = 123,712 parameters, × 2 B = 247,424 bytes
/// tensors: 1 + 2 × 9 + 1 + 1                     = 21
const PARAMS: u64 = 123_712;

#[test]
fn fixture_checkpoint_totals() {
    let ck = read_checkpoint(Path::new(fixture())).unwrap();
    let inv = &ck.inventory;
    assert_eq!(inv.tensors.len(), 21);
    assert_eq!(inv.params(), PARAMS);
    assert_eq!(inv.bytes(), 2 * PARAMS);
    assert_eq!(ck.index_total_parameters, Some(PARAMS));
    assert_eq!(ck.index_total_size, Some(2 * PARAMS));
    assert_eq!(ck.files.len(), 5);
    assert!(inv.tensors.iter().all(|t| t.dtype == DType::BF16));
    assert_eq!(ck.metadata.get("format").map(String::as_str), Some("pt"));

    let by = inv.by_component();
    let p = |c: Component| by.get(&c).map(|t| t.params).unwrap_or(0);
    assert_eq!(p(Component::Embedding), 16_384);
    assert_eq!(p(Component::Attention), 2 * 12_288);
    assert_eq!(p(Component::Mlp), 2 * 33_024);
    assert_eq!(p(Component::Norm), 2 * 128 + 64);
    assert_eq!(p(Component::Head), 16_384);
    assert_eq!(p(Component::Experts) + p(Component::Router), 0);

    let layers = inv.by_layer();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[&0].params, 45_440);
    assert_eq!(layers[&1].params, 45_440);
    assert_eq!(layers[&0].tensors, 9);

    let q = inv.get("model.layers.1.self_attn.k_proj.weight").unwrap();
    assert_eq!(q.shape, [32, 64]);
    assert_eq!(q.bytes, 4_096);
    assert_eq!(q.layer, Some(1));
}

#[test]
fn fixture_shards_cover_their_files() {
    let mut n = 0;
    for entry in fs::read_dir(fixture()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("safetensors") {
            continue;
        }
        n += 1;
        let h = read_file_header(&p).unwrap();
        let size = fs::metadata(&p).unwrap().len();
        assert_eq!(8 + h.header_len + h.data_len, size, "{}", p.display());
        assert_eq!(h.header_len % 8, 0, "header is padded to 8 bytes");
    }
    assert_eq!(n, 5);
    // formats.md §5.1: shard 1 has N = 536 and holds embed_tokens (16,384) + layer 0's q (4,096),
    // k (2,048), v (2,048) and o (4,096) = 28,672 bf16 parameters = 57,344 bytes.
    let h =
        read_file_header(&Path::new(fixture()).join("model-00001-of-00005.safetensors")).unwrap();
    assert_eq!(h.header_len, 536);
    assert_eq!(h.tensors.len(), 5);
    assert_eq!(h.data_len, 57_344);
}

/// Counts the bytes pulled through it.
struct Counting<R>(R, u64);

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1 += n as u64;
        Ok(n)
    }
}

#[test]
fn reads_only_the_header() {
    let p = Path::new(fixture()).join("model-00005-of-00005.safetensors");
    let len = fs::metadata(&p).unwrap().len();
    let mut r = Counting(fs::File::open(&p).unwrap(), 0);
    let h = read_header(&mut r, len, "shard5").unwrap();
    assert_eq!(r.1, 8 + h.header_len);
    assert!(r.1 < len);
    // A header-only copy (the data cut off) is still readable when told the real length.
    let bytes = fs::read(&p).unwrap();
    let head = &bytes[..(8 + h.header_len) as usize];
    assert_eq!(read_header(Cursor::new(head), len, "cut").unwrap(), h);
}

#[test]
fn fixture_by_index_file_and_by_shard() {
    let dir = Path::new(fixture());
    let a = read_checkpoint(dir).unwrap();
    let b = read_checkpoint(&dir.join("model.safetensors.index.json")).unwrap();
    assert_eq!(a.inventory, b.inventory);
    let one = read_checkpoint(&dir.join("model-00002-of-00005.safetensors")).unwrap();
    // Shard 2 holds layer 0's gate_proj and up_proj: 2 × 11,008 parameters.
    assert_eq!(one.inventory.params(), 22_016);
    assert_eq!(one.index_total_size, None);
}

/// The fixture's config as a ModelSpec written by hand; the builder's inventory must equal what
/// the headers say, tensor by tensor.
#[test]
fn fixture_matches_the_builder() {
    let norms = vec![
        (NormSlot::PreAttention, Norm::rms(64)),
        (NormSlot::PreMlp, Norm::rms(64)),
    ];
    let l = layer(attn(4, 2, 16, false), dense(172, true, false), norms);
    let s = spec(
        Naming::Llama,
        DType::BF16,
        256,
        64,
        Embedding::plain(64, Positions::Rotary { theta: None }),
        None,
        stack(vec![l.clone(), l], Some(Norm::rms(64))),
        Head::LanguageModel {
            tied: false,
            bias: false,
        },
    );
    let built = build_inventory(&s).unwrap();
    let read = read_checkpoint(Path::new(fixture())).unwrap().inventory;
    assert_same(built.tensors, read.tensors);
}

fn assert_same(mut a: Vec<Tensor>, mut b: Vec<Tensor>) {
    a.sort_by(|x, y| x.name.cmp(&y.name));
    b.sort_by(|x, y| x.name.cmp(&y.name));
    let an: Vec<&str> = a.iter().map(|t| t.name.as_str()).collect();
    let bn: Vec<&str> = b.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(an, bn, "tensor names differ");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "tensor '{}' differs (builder vs header)", x.name);
    }
}

// ------------------------------------------------------------------------------------------
// builder ↔ header agreement for every naming family

fn attn(heads: u64, kv: u64, hd: u64, bias: bool) -> Attention {
    Attention::new(
        AttentionKind::Standard {
            heads,
            kv_heads: kv,
            head_dim: hd,
        },
        ProjBias::all(bias),
    )
}

fn dense_mlp(ffn: u64, gated: bool, bias: bool) -> DenseMlp {
    DenseMlp {
        ffn,
        gated,
        bias,
        activation: "silu".into(),
        gaussian_topk: false,
    }
}

fn dense(ffn: u64, gated: bool, bias: bool) -> Mlp {
    Mlp::Dense(dense_mlp(ffn, gated, bias))
}

fn layer(attention: Attention, mlp: Mlp, norms: Vec<(NormSlot, Norm)>) -> Layer {
    Layer::new(attention, mlp, norms)
}

fn stack(layers: Vec<Layer>, final_norm: Option<Norm>) -> Stack {
    Stack { layers, final_norm }
}

#[allow(clippy::too_many_arguments)]
fn spec(
    naming: Naming,
    dtype: DType,
    vocab: u64,
    hidden: u64,
    embedding: Embedding,
    encoder: Option<Stack>,
    decoder: Stack,
    head: Head,
) -> ModelSpec {
    ModelSpec {
        name: format!("{naming:?}"),
        model_type: "test".into(),
        architecture: "Test".into(),
        naming,
        dtype,
        vocab_size: vocab,
        hidden_size: hidden,
        max_position_embeddings: Some(32),
        embedding,
        encoder,
        decoder,
        head,
        dropout: Default::default(),
        quantization: None,
        softcapping: Default::default(),
        vision: None,
        gemma3n: None,
        loaded_only: Vec::new(),
    }
}

const H: u64 = 8;
const V: u64 = 16;

fn pre2(n: Norm) -> Vec<(NormSlot, Norm)> {
    vec![(NormSlot::PreAttention, n), (NormSlot::PreMlp, n)]
}

fn lm(tied: bool) -> Head {
    Head::LanguageModel { tied, bias: false }
}

/// One tiny spec per naming family the inventory knows, in a fixed order (the last is T5).
fn family_specs() -> Vec<ModelSpec> {
    let mut out = Vec::new();
    dense_llama_specs(&mut out);
    moe_llama_specs(&mut out);
    phi3_specs(&mut out);
    gpt_named_specs(&mut out);
    encoder_specs(&mut out);
    out
}

/// Llama-named dense decoders: Gemma-3-style norms and q/k norms, StarCoder2.
fn dense_llama_specs(out: &mut Vec<ModelSpec>) {
    let rms = Norm::rms(H);
    let ln = Norm::layer(H, true);
    let rotary = || Embedding::plain(H, Positions::Rotary { theta: None });
    // Llama-style with Gemma-3's four norms, q/k norms and q/k/v biases.
    let mut a = attn(2, 1, 4, true);
    a.bias.o = false;
    a.qk_norm = Some(Norm::rms(4));
    let norms = vec![
        (NormSlot::PreAttention, rms),
        (NormSlot::PostAttention, rms),
        (NormSlot::PreMlp, rms),
        (NormSlot::PostMlp, rms),
    ];
    let l = layer(a, dense(12, true, false), norms);
    out.push(spec(
        Naming::Llama,
        DType::BF16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l.clone(), l.clone(), l], Some(rms)),
        lm(false),
    ));
    // StarCoder2-style plain MLP under Llama names, LayerNorm with bias, tied.
    let l = layer(attn(2, 2, 4, true), dense(12, false, true), pre2(ln));
    out.push(spec(
        Naming::Llama,
        DType::F32,
        V,
        H,
        rotary(),
        None,
        stack(vec![l], Some(ln)),
        lm(true),
    ));
}

/// Llama-named mixture-of-experts decoders: Mixtral, Qwen2-MoE, DeepSeek-V3 (MLA).
fn moe_llama_specs(out: &mut Vec<ModelSpec>) {
    let rms = Norm::rms(H);
    let rotary = || Embedding::plain(H, Positions::Rotary { theta: None });
    // Mixtral.
    let moe = |shared: Option<DenseMlp>, shared_gate: bool| {
        Mlp::Moe(MoeMlp {
            experts: 3,
            top_k: 2,
            expert: dense_mlp(6, true, false),
            shared,
            shared_gate,
            router_bias: false,
            input_jitter: 0,
            latent: None,
        })
    };
    let l = layer(attn(2, 1, 4, false), moe(None, false), pre2(rms));
    out.push(spec(
        Naming::Mixtral,
        DType::BF16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l.clone(), l], Some(rms)),
        lm(false),
    ));
    // Qwen2-MoE: shared expert and its gate.
    let l = layer(
        attn(2, 1, 4, true),
        moe(Some(dense_mlp(10, true, false)), true),
        pre2(rms),
    );
    out.push(spec(
        Naming::QwenMoe,
        DType::BF16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l], Some(rms)),
        lm(false),
    ));
    // DeepSeek-V3: MLA, a dense first layer, then MoE with shared experts.
    let mla = |q_lora: Option<u64>| {
        Attention::new(
            AttentionKind::Latent {
                heads: 2,
                q_lora_rank: q_lora,
                kv_lora_rank: 4,
                qk_nope_head_dim: 4,
                qk_rope_head_dim: 2,
                v_head_dim: 4,
                indexer: None,
            },
            ProjBias::default(),
        )
    };
    let l0 = layer(mla(Some(6)), dense(12, true, false), pre2(rms));
    let l1 = layer(
        mla(None),
        moe(Some(dense_mlp(12, true, false)), false),
        pre2(rms),
    );
    out.push(spec(
        Naming::DeepSeek,
        DType::BF16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l0, l1], Some(rms)),
        lm(false),
    ));
}

/// Phi-3: fused qkv and gate_up.
fn phi3_specs(out: &mut Vec<ModelSpec>) {
    let rms = Norm::rms(H);
    let rotary = || Embedding::plain(H, Positions::Rotary { theta: None });
    // Phi-3: fused qkv and gate_up.
    let l = layer(attn(2, 2, 4, false), dense(12, true, false), pre2(rms));
    out.push(spec(
        Naming::Phi3,
        DType::BF16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l], Some(rms)),
        lm(false),
    ));
}

/// GPT-2, GPTBigCode, GPT-NeoX, OPT and Falcon names.
fn gpt_named_specs(out: &mut Vec<ModelSpec>) {
    let ln = Norm::layer(H, true);
    let rotary = || Embedding::plain(H, Positions::Rotary { theta: None });
    let learned = || Embedding::plain(H, Positions::Learned { rows: 32 });
    // GPT-2 (Conv1D shapes), tied.
    let l = layer(attn(2, 2, 4, true), dense(32, false, true), pre2(ln));
    out.push(spec(
        Naming::Gpt2,
        DType::F32,
        V,
        H,
        learned(),
        None,
        stack(vec![l.clone(), l], Some(ln)),
        lm(true),
    ));
    // GPTBigCode with multi-query attention.
    let l = layer(attn(2, 1, 4, true), dense(32, false, true), pre2(ln));
    out.push(spec(
        Naming::BigCode,
        DType::F16,
        V,
        H,
        learned(),
        None,
        stack(vec![l], Some(ln)),
        lm(true),
    ));
    // GPT-NeoX: parallel residual, untied embed_out.
    let mut l = layer(attn(2, 2, 4, true), dense(32, false, true), pre2(ln));
    l.parallel_residual = true;
    out.push(spec(
        Naming::NeoX,
        DType::F16,
        V,
        H,
        rotary(),
        None,
        stack(vec![l.clone(), l], Some(ln)),
        lm(false),
    ));
    // OPT-350m style: learned positions, projections between a 4-wide embedding and hidden 8.
    let l = layer(attn(2, 2, 4, true), dense(32, false, true), pre2(ln));
    let mut e = learned();
    e.dim = 4;
    e.projection = true;
    out.push(spec(
        Naming::Opt,
        DType::F16,
        V,
        H,
        e,
        None,
        stack(vec![l], Some(ln)),
        lm(false),
    ));
    // Falcon with two norms (ln_attn / ln_mlp) and parallel residual; bare base model.
    let mut l = layer(attn(2, 1, 4, false), dense(32, false, false), pre2(ln));
    l.parallel_residual = true;
    out.push(spec(
        Naming::Falcon,
        DType::BF16,
        V,
        H,
        Embedding::plain(H, Positions::None),
        None,
        stack(vec![l], Some(ln)),
        Head::None { pooler: false },
    ));
}

/// BERT, RoBERTa and T5 v1.1.
fn encoder_specs(out: &mut Vec<ModelSpec>) {
    let rms = Norm::rms(H);
    let ln = Norm::layer(H, true);
    let learned = || Embedding::plain(H, Positions::Learned { rows: 32 });
    // BERT masked LM (untied) and BERT base with pooler; RoBERTa masked LM (tied).
    let post = vec![(NormSlot::PostAttention, ln), (NormSlot::PostMlp, ln)];
    let l = layer(attn(2, 2, 4, true), dense(32, false, true), post);
    let mut e = learned();
    e.token_types = 2;
    e.norm = Some(ln);
    for (naming, head) in [
        (Naming::Bert, Head::MaskedLm { tied: false }),
        (Naming::Bert, Head::None { pooler: true }),
        (Naming::Roberta, Head::MaskedLm { tied: true }),
    ] {
        out.push(spec(
            naming,
            DType::F32,
            V,
            H,
            e.clone(),
            None,
            stack(vec![l.clone(), l.clone()], None),
            head,
        ));
    }
    // T5 v1.1: 2 encoder blocks and 3 decoder blocks, gated, relative bias in each first block.
    let t5_attn = |first: bool| {
        let mut a = attn(2, 2, 4, false);
        a.relative_bias_buckets = first.then_some(32);
        a
    };
    let enc = (0..2)
        .map(|i| layer(t5_attn(i == 0), dense(12, true, false), pre2(rms)))
        .collect();
    let dec = (0..3)
        .map(|i| {
            let mut l = layer(
                t5_attn(i == 0),
                dense(12, true, false),
                vec![
                    (NormSlot::PreAttention, rms),
                    (NormSlot::PreCrossAttention, rms),
                    (NormSlot::PreMlp, rms),
                ],
            );
            l.cross_attention = Some(attn(2, 2, 4, false));
            l
        })
        .collect();
    out.push(spec(
        Naming::T5,
        DType::F32,
        V,
        H,
        Embedding::plain(H, Positions::Relative { buckets: 32 }),
        Some(stack(enc, Some(rms))),
        stack(dec, Some(rms)),
        lm(false),
    ));
}

/// Writes the builder's tensors as a safetensors file (zeros for data), in reverse order so the
/// header order says nothing, and reads them back.
#[test]
fn every_family_reads_back_as_built() {
    let specs = family_specs();
    assert_eq!(specs.len(), 15);
    let dir = TempDir::new("families");
    for (i, s) in specs.iter().enumerate() {
        let built = build_inventory(s).unwrap();
        let mut header = serde_json::Map::new();
        let mut off = 0u64;
        for t in built.tensors.iter().rev() {
            header.insert(
                t.name.clone(),
                json!({"dtype": t.dtype.name(), "shape": t.shape,
                       "data_offsets": [off, off + t.bytes]}),
            );
            off += t.bytes;
        }
        let bytes = raw_file(&serde_json::Value::Object(header).to_string(), off as usize);
        let p = dir.write(&format!("{i}.safetensors"), &bytes);
        let read = read_checkpoint(&p)
            .unwrap_or_else(|e| panic!("{:?}: {e}", s.naming))
            .inventory;
        assert_same(built.tensors, read.tensors);
    }
}

#[test]
fn t5_decoder_layers_follow_the_encoder() {
    let s = family_specs().pop().unwrap();
    assert_eq!(s.naming, Naming::T5);
    let inv = build_inventory(&s).unwrap();
    // 2 encoder blocks → decoder block 0 is layer 2, block 2 is layer 4.
    let q = |n: &str| inv.get(n).unwrap().layer;
    assert_eq!(q("decoder.block.0.layer.0.SelfAttention.q.weight"), Some(2));
    assert_eq!(
        q("decoder.block.2.layer.1.EncDecAttention.o.weight"),
        Some(4)
    );
}

// ------------------------------------------------------------------------------------------
// hostile single files

#[test]
fn valid_small_file_reads() {
    let bytes = small_valid();
    let h = header_of(&bytes).unwrap();
    let names: Vec<&str> = h.tensors.iter().map(|t| t.name.as_str()).collect();
    // a: 2×3 BF16 = 12 B at [0,12); b: 3 F32 = 12 B at [12,24); c: 4 F4 = 2 B at [24,26);
    // empty: 0 B at [26,26).
    assert_eq!(names, ["a.weight", "b.bias", "c.scale", "empty"]);
    assert_eq!(h.data_len, 26);
    assert_eq!(h.tensors[2].data_offsets, (24, 26));
    assert_eq!(h.tensors[2].dtype, DType::F4);
    assert_eq!(h.metadata.get("format").map(String::as_str), Some("pt"));
}

fn with_len(len: u64, rest: &[u8]) -> Vec<u8> {
    let mut v = len.to_le_bytes().to_vec();
    v.extend_from_slice(rest);
    v
}

#[test]
fn header_length_past_the_file() {
    assert_err_contains(&with_len(1 << 60, b"{}      "), "exceeds");
    assert_err_contains(&with_len(100_000_001, b"{}      "), "exceeds");
    assert_err_contains(&with_len(u64::MAX, b""), "exceeds");
    assert_err_contains(&with_len(9, b"{}      "), "runs past");
    assert_err_contains(&with_len(1000, &[b' '; 100]), "runs past");
    assert_err_contains(&[1, 0, 0], "too short");
    assert_err_contains(&[], "too short");
    // A reader shorter than the length it was said to have.
    let r = read_header(Cursor::new(with_len(8, b"{}")), 1000, "short").unwrap_err();
    assert!(r.to_string().contains("ends inside"), "{r}");
}

#[test]
fn header_not_an_object() {
    let e = err_of(&raw_file("[1, 2, 3]", 0));
    assert!(e.contains("expected a JSON object"), "{e}");
    let e = err_of(&raw_file("\"a string\"", 0));
    assert!(e.contains("expected a JSON object"), "{e}");
    assert_err_contains(&raw_file("42", 0), "expected a JSON object");
    assert_err_contains(&raw_file("{\"a\": ", 0), "header JSON");
    assert_err_contains(&raw_file("", 0), "header JSON");
    assert_err_contains(&raw_file("{} trailing", 0), "header JSON");
    let mut bad_utf8 = raw_file("{\"ab\": 1}", 0);
    bad_utf8[10] = 0xff; // inside the key
    assert_err_contains(&bad_utf8, "UTF-8");
    assert_err_contains(&raw_file("{\"x\": 3}", 0), "for tensor 'x'");
    assert_err_contains(
        &raw_file("{\"__metadata__\": {\"k\": 1}}", 0),
        "'__metadata__'",
    );
    assert_err_contains(&raw_file("{\"__metadata__\": []}", 0), "'__metadata__'");
    // Empty header object and null metadata: a valid empty file.
    assert_eq!(header_of(&raw_file("{}", 0)).unwrap().data_len, 0);
    assert!(header_of(&raw_file("{\"__metadata__\": null}", 0)).is_ok());
}

fn one(entry: serde_json::Value, data_len: usize) -> Vec<u8> {
    raw_file(&json!({ "t": entry }).to_string(), data_len)
}

#[test]
fn bad_tensor_entries() {
    let ok = json!({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]});
    assert!(header_of(&one(ok, 8)).is_ok());
    let cases: &[(serde_json::Value, &str)] = &[
        (
            json!({"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}),
            "unknown dtype 'Q4'",
        ),
        (
            json!({"dtype": "bf16", "shape": [2], "data_offsets": [0, 4]}),
            "unknown dtype",
        ),
        (
            json!({"dtype": 5, "shape": [2], "data_offsets": [0, 8]}),
            "dtype string",
        ),
        (json!({"shape": [2], "data_offsets": [0, 8]}), "no 'dtype'"),
        (
            json!({"dtype": "F32", "data_offsets": [0, 8]}),
            "no 'shape'",
        ),
        (json!({"dtype": "F32", "shape": [2]}), "no 'data_offsets'"),
        (
            json!({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}),
            "non-negative integer",
        ),
        (
            json!({"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}),
            "non-negative integer",
        ),
        (
            json!({"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}),
            "non-negative integer",
        ),
        (
            json!({"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}),
            "non-negative integer",
        ),
        (
            json!({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}),
            "list of non-negative",
        ),
        (
            json!({"dtype": "F32", "shape": [2], "data_offsets": [0]}),
            "expected [begin, end]",
        ),
        (
            json!({"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}),
            "expected [begin, end]",
        ),
        (
            json!({"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}),
            "non-negative integer",
        ),
        (
            json!({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}),
            "begin > end",
        ),
        // 2 F32 = 8 bytes, offsets say 6
        (
            json!({"dtype": "F32", "shape": [2], "data_offsets": [0, 6]}),
            "needs 8 bytes",
        ),
        // 3 × F4 = 12 bits: not whole bytes
        (
            json!({"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}),
            "not whole bytes",
        ),
        // 2^32 × 2^32 elements overflow u64
        (
            json!({"dtype": "F32", "shape": [1u64 << 32, 1u64 << 32], "data_offsets": [0, 8]}),
            "overflows",
        ),
        // 2^62 × 64 bits fits in u128 but the data region cannot fit in the file
        (
            json!({"dtype": "F64", "shape": [4611686018427387904u64], "data_offsets": [0, 8]}),
            "needs",
        ),
    ];
    for (entry, needle) in cases {
        let e = err_of(&one(entry.clone(), 8));
        assert!(e.contains(needle), "{entry}: '{e}' lacks '{needle}'");
        assert!(e.contains("'t'"), "{entry}: '{e}' does not name the tensor");
    }
}

#[test]
fn duplicate_keys() {
    let e = err_of(&raw_file(
        r#"{"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
            "t": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}"#,
        2,
    ));
    assert!(e.contains("'t' appears twice"), "{e}");
    let e = err_of(&raw_file(
        r#"{"t": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}"#,
        1,
    ));
    assert!(e.contains("'dtype' appears twice"), "{e}");
}

fn two(a: [u64; 2], b: [u64; 2], data_len: usize) -> Vec<u8> {
    // Both U8 tensors of the sizes their offsets span.
    raw_file(
        &json!({
            "a": {"dtype": "U8", "shape": [a[1].saturating_sub(a[0])], "data_offsets": a},
            "b": {"dtype": "U8", "shape": [b[1].saturating_sub(b[0])], "data_offsets": b},
        })
        .to_string(),
        data_len,
    )
}

#[test]
fn offsets_must_tile_the_data() {
    assert!(header_of(&two([0, 4], [4, 10], 10)).is_ok());
    assert!(
        header_of(&two([6, 10], [0, 6], 10)).is_ok(),
        "header order is free"
    );
    assert_err_contains(&two([0, 6], [4, 10], 10), "overlaps");
    assert_err_contains(&two([0, 4], [0, 4], 4), "overlaps");
    assert_err_contains(&two([0, 4], [6, 10], 10), "unused");
    assert_err_contains(&two([2, 4], [4, 10], 10), "unused");
    // Past the file: the data buffer claims 10 bytes, the file holds 4 of them.
    assert_err_contains(&two([0, 4], [4, 10], 4), "truncated");
    // Trailing bytes after the data buffer.
    assert_err_contains(&two([0, 4], [4, 10], 12), "after the data buffer");
    // 100 GB of data claimed in a tiny file.
    let big = 100_000_000_000u64;
    let bytes = raw_file(
        &json!({"t": {"dtype": "U8", "shape": [big], "data_offsets": [0, big]}}).to_string(),
        0,
    );
    assert_err_contains(&bytes, "truncated");
    // Offsets near u64::MAX: 8 + N + data_len overflows.
    let m = u64::MAX;
    let bytes = raw_file(
        &json!({"t": {"dtype": "U8", "shape": [m], "data_offsets": [0, m]}}).to_string(),
        0,
    );
    assert_err_contains(&bytes, "overflows");
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = small_valid();
    let dir = TempDir::new("trunc");
    for len in 0..bytes.len() {
        let cut = &bytes[..len];
        assert!(header_of(cut).is_err(), "length {len} was accepted");
        let p = dir.write("t.safetensors", cut);
        assert!(
            read_checkpoint(&p).is_err(),
            "file of length {len} was accepted"
        );
    }
    let p = dir.write("t.safetensors", &bytes);
    assert!(read_checkpoint(&p).is_ok());
}

// ------------------------------------------------------------------------------------------
// checkpoints: directories and indexes

fn tiny(names: &[&str]) -> Vec<u8> {
    let entries: Vec<(&str, &str, &[u64])> =
        names.iter().map(|n| (*n, "BF16", &[4u64][..])).collect();
    st_file(&entries, Some(json!({"format": "pt"})))
}

fn index(map: serde_json::Value) -> Vec<u8> {
    json!({"metadata": {"total_size": 16}, "weight_map": map})
        .to_string()
        .into_bytes()
}

fn ck_err(p: &Path) -> String {
    match read_checkpoint(p) {
        Ok(c) => panic!(
            "expected an error for {}, got {} tensors",
            p.display(),
            c.inventory.tensors.len()
        ),
        Err(e) => {
            let s = e.to_string();
            assert!(!s.contains('\n'), "{s}");
            s
        }
    }
}

#[test]
fn directory_choices() {
    // model.safetensors wins over an adapter and a variant.
    let d = TempDir::new("dir1");
    d.write(
        "model.safetensors",
        &tiny(&["model.embed_tokens.weight", "lm_head.weight"]),
    );
    d.write(
        "model.fp16.safetensors",
        &tiny(&["model.embed_tokens.weight"]),
    );
    d.write(
        "adapter_model.safetensors",
        &tiny(&["base_model.lora_A.weight"]),
    );
    let c = read_checkpoint(&d.0).unwrap();
    assert_eq!(c.files, [d.path("model.safetensors")]);
    assert_eq!(c.inventory.tensors.len(), 2);

    // Shards without an index: merged; the adapter is skipped.
    let d = TempDir::new("dir2");
    d.write(
        "part-1.safetensors",
        &tiny(&["model.layers.0.mlp.up_proj.weight"]),
    );
    d.write(
        "part-2.safetensors",
        &tiny(&["model.layers.1.mlp.up_proj.weight"]),
    );
    d.write("adapter_model.safetensors", &tiny(&["lora.weight"]));
    let c = read_checkpoint(&d.0).unwrap();
    assert_eq!(c.files.len(), 2);
    assert_eq!(c.inventory.params(), 8);
    assert_eq!(c.inventory.by_layer().len(), 2);

    // ... but a tensor in two of them is an error naming both files.
    d.write(
        "part-3.safetensors",
        &tiny(&["model.layers.1.mlp.up_proj.weight"]),
    );
    let e = ck_err(&d.0);
    assert!(e.contains("part-2") && e.contains("part-3"), "{e}");

    // Only an adapter: read it.
    let d = TempDir::new("dir3");
    d.write("adapter_model.safetensors", &tiny(&["lora.weight"]));
    assert_eq!(read_checkpoint(&d.0).unwrap().inventory.tensors.len(), 1);

    // Nothing to read.
    let d = TempDir::new("dir4");
    d.write("config.json", b"{}");
    assert!(ck_err(&d.0).contains("no model.safetensors.index.json"));
    assert!(read_checkpoint(&d.path("missing")).is_err());

    // Two variant indexes and no main one: ambiguous.
    let d = TempDir::new("dir5");
    d.write(
        "model.fp16.safetensors.index.json",
        &index(json!({"a": "x.safetensors"})),
    );
    d.write(
        "model.bf16.safetensors.index.json",
        &index(json!({"a": "x.safetensors"})),
    );
    assert!(ck_err(&d.0).contains("several safetensors indexes"));
}

#[test]
fn sharded_checkpoint_errors() {
    let d = TempDir::new("idx");
    d.write("s1.safetensors", &tiny(&["a", "b"]));
    d.write("s2.safetensors", &tiny(&["c"]));
    let idx = d.path("model.safetensors.index.json");
    let put = |v: serde_json::Value| fs::write(&idx, index(v)).unwrap();

    put(json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}));
    let c = read_checkpoint(&d.0).unwrap();
    assert_eq!(c.inventory.tensors.len(), 3);
    assert_eq!(c.index_total_size, Some(16));
    assert_eq!(c.index_total_parameters, None);

    // A missing shard is named.
    put(json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s9.safetensors"}));
    let e = ck_err(&d.0);
    assert!(
        e.contains("'s9.safetensors'") && e.contains("does not exist"),
        "{e}"
    );

    // Shard paths that leave the directory.
    for bad in [
        "../s2.safetensors",
        "/tmp/s2.safetensors",
        "x/../../s2.safetensors",
        "",
    ] {
        put(json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": bad}));
        let e = ck_err(&d.0);
        assert!(e.contains("not a file name inside"), "{bad}: {e}");
    }

    // In the index, absent from its shard.
    put(
        json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors",
               "d": "s2.safetensors"}),
    );
    let e = ck_err(&d.0);
    assert!(e.contains("'d'") && e.contains("no such tensor"), "{e}");

    // In a shard, absent from the index.
    put(json!({"a": "s1.safetensors", "c": "s2.safetensors"}));
    let e = ck_err(&d.0);
    assert!(e.contains("'b'") && e.contains("not in weight_map"), "{e}");

    // In a shard, but the index says another shard.
    put(json!({"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}));
    let e = ck_err(&d.0);
    assert!(
        e.contains("'b'") && e.contains("puts it in 's2.safetensors'"),
        "{e}"
    );

    // The same tensor in two shards.
    d.write("s3.safetensors", &tiny(&["c"]));
    put(
        json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors",
               "x": "s3.safetensors"}),
    );
    let e = ck_err(&d.0);
    assert!(e.contains("'c' is in both"), "{e}");

    // Broken indexes.
    for (text, needle) in [
        ("not json", "not valid JSON"),
        ("[]", "not a JSON object"),
        ("{\"metadata\": {}}", "'weight_map': missing"),
        ("{\"weight_map\": []}", "'weight_map'"),
        ("{\"weight_map\": {}}", "is empty"),
        ("{\"weight_map\": {\"a\": 3}}", "'weight_map.a'"),
        (
            "{\"metadata\": {\"total_size\": -1}, \"weight_map\": {\"a\": \"s1.safetensors\"}}",
            "'metadata.total_size'",
        ),
        (
            r#"{"metadata": {"total_parameters": "many"}, "weight_map": {"a": "s.safetensors"}}"#,
            "'metadata.total_parameters'",
        ),
        (
            "{\"metadata\": 7, \"weight_map\": {\"a\": \"s1.safetensors\"}}",
            "'metadata'",
        ),
    ] {
        fs::write(&idx, text).unwrap();
        let e = ck_err(&d.0);
        assert!(e.contains(needle), "{text}: '{e}' lacks '{needle}'");
    }

    // A shard that is itself broken reports the shard.
    d.write("s2.safetensors", &tiny(&["c"])[..20]);
    put(json!({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}));
    assert!(ck_err(&d.0).contains("s2.safetensors"));
}

// ------------------------------------------------------------------------------------------
// fuzzing: never a panic

fn check_invariants(bytes: &[u8]) {
    if let Ok(h) = header_of(bytes) {
        assert_eq!(8 + h.header_len + h.data_len, bytes.len() as u64);
        let mut end = 0;
        for t in &h.tensors {
            assert_eq!(t.data_offsets.0, end);
            end = t.data_offsets.1;
        }
        assert_eq!(end, h.data_len);
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                claimed in any::<u64>()) {
        check_invariants(&bytes);
        // A reader that is shorter or longer than the length claimed for it.
        let _ = read_header(Cursor::new(&bytes), claimed % 4096, "claimed");
    }

    #[test]
    fn random_json_headers_never_panic(text in r#"[\[\]{}",:0-9a-zA-Z_ .\-]{0,120}"#,
                                       data in 0usize..64) {
        check_invariants(&raw_file(&text, data));
    }

    #[test]
    fn mutations_never_panic(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
                             cut in any::<usize>(), extend in 0usize..16) {
        let mut bytes = small_valid();
        for (i, b) in &edits {
            let n = bytes.len();
            bytes[i % n] = *b;
        }
        check_invariants(&bytes);
        let n = bytes.len();
        check_invariants(&bytes[..cut % (n + 1)]);
        bytes.resize(n + extend, b' ');
        check_invariants(&bytes);
    }

    #[test]
    fn mutated_header_text_never_panics(pos in any::<usize>(),
                                        insert in r#"[\[\]{}",:0-9\-. e]{1,6}"#) {
        // Splice JSON punctuation into the header text and fix the length field, so the parser
        // (not the length check) sees the damage.
        let valid = small_valid();
        let n = u64::from_le_bytes(valid[..8].try_into().unwrap()) as usize;
        let mut text = valid[8..8 + n].to_vec();
        let at = pos % (text.len() + 1);
        text.splice(at..at, insert.bytes());
        let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&text);
        bytes.extend_from_slice(&valid[8 + n..]);
        check_invariants(&bytes);
    }

    #[test]
    fn names_never_panic(name in ".{0,60}") {
        let _ = vramscope_formats::hf_names::classify(&name);
    }
}

#[test]
fn metadata_is_merged_first_wins() {
    let d = TempDir::new("meta");
    let a = st_file(
        &[("x", "U8", &[1])],
        Some(json!({"format": "pt", "k": "1"})),
    );
    let b = st_file(
        &[("y", "U8", &[1])],
        Some(json!({"format": "np", "z": "2"})),
    );
    d.write("a.safetensors", &a);
    d.write("b.safetensors", &b);
    let c = read_checkpoint(&d.0).unwrap();
    let want: BTreeMap<String, String> = [("format", "pt"), ("k", "1"), ("z", "2")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(c.metadata, want);
}

/// The fixture's path, checked to exist.
fn fixture() -> &'static str {
    shared(FIXTURE)
}
