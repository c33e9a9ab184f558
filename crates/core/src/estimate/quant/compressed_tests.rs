//! The formats of `compressed.rs`, each sized by hand from the layout its library allocates.

use super::super::{bits_per_param, tensor_bytes, QuantContext, WeightFormat};
use super::{CtFormat, CtKind, CtStrategy};
use crate::inventory::{Component, Tensor};
use crate::DType;
use proptest::prelude::*;

fn w(shape: &[u64]) -> Tensor {
    Tensor::new(
        "model.layers.0.self_attn.q_proj.weight".into(),
        shape.to_vec(),
        DType::BF16,
        Some(0),
        Component::Attention,
    )
    .unwrap()
}

fn bytes(f: &str, shape: &[u64]) -> u64 {
    let f = WeightFormat::parse(f).unwrap();
    tensor_bytes(&f, &w(shape), &QuantContext::default()).unwrap()
}

#[test]
fn parses_and_spells_back() {
    let f = WeightFormat::parse("CT:INT4:G128").unwrap();
    assert_eq!(
        f,
        WeightFormat::Ct(CtFormat {
            kind: CtKind::IntPacked { bits: 4 },
            strategy: CtStrategy::Group(128),
            asym: false
        })
    );
    for s in [
        "ct:int4:g128",
        "ct:int4:g32:asym",
        "ct:int8:channel",
        "ct:int8p:g128",
        "ct:fp8:tensor",
        "ct:fp8:b128x128",
        "fp8:row",
        "bitnet",
        "bitnet:unpacked",
    ] {
        assert_eq!(WeightFormat::parse(s).unwrap().to_string(), s);
    }
    for bad in [
        "ct",
        "ct:int4",
        "ct:int3:g128",
        "ct:int4:g0",
        "ct:fp8:b128",
        "ct:fp8:tensor:asym",
        "ct:int4:g128:sym",
        "bitnet:2",
    ] {
        let e = WeightFormat::parse(bad).unwrap_err().to_string();
        assert!(e.contains("weights") && e.contains("ct:KIND"), "{bad}: {e}");
    }
}

/// A weight's bytes in each stored form, derived row by row from the formats' layouts.
#[test]
fn weight_bytes_by_form() {
    let rows: [(&str, &[u64], u64); 10] = [
        // pack-quantized int4, groups of 128, bf16 scales (`pack_quantized/base.py`): 4096
        // rows × ceil(4096 · 4 / 32) = 512 int32 words = 8,388,608 B, scales 4096 × 4096/128 =
        // 131,072 bf16 = 262,144 B, `weight_shape` int64[2] = 16 B: 8,650,768 B.
        ("ct:int4:g128", &[4096, 4096], 8_650_768),
        // Asymmetric adds zero points packed along rows: ceil(4096 · 4 / 32) = 512 words × 32
        // groups × 4 B = 65,536 B.
        ("ct:int4:g128:asym", &[4096, 4096], 8_716_304),
        // w8a16 packed: 1024 words a row = 16,777,216 B + the same scales and shape.
        ("ct:int8p:g128", &[4096, 4096], 17_039_376),
        // int8 unpacked per channel: 16,777,216 B of values + 4096 bf16 scales (8,192 B); + 4096
        // int8 zero points (asymmetric) = 16,789,504 B.
        ("ct:int8:channel", &[4096, 4096], 16_785_408),
        ("ct:int8:channel:asym", &[4096, 4096], 16_789_504),
        // FP8 with 128×128 block scales on an 11008×4096 MLP weight: 45,088,768 value bytes +
        // ceil(11008/128) = 86 × 32 = 2,752 bf16 scales (5,504 B) = 45,094,272 B; per tensor,
        // one bf16 scale: 45,088,770 B.
        ("ct:fp8:b128x128", &[11008, 4096], 45_094_272),
        ("ct:fp8:tensor", &[11008, 4096], 45_088_770),
        // FBGEMM FP8: 16,777,216 value bytes + 4096 fp32 row scales (16,384 B) + the 4 B
        // `input_scale_ub` = 16,793,604 B.
        ("fp8:row", &[4096, 4096], 16_793_604),
        // BitNet b1.58 2B's 2560×2560 projection: packed, ceil(2560/4) = 640 × 2560 =
        // 1,638,400 B plus a bf16 `weight_scale` (2 B); unpacked to bf16, 13,107,200 + 2 B.
        ("bitnet", &[2560, 2560], 1_638_402),
        ("bitnet:unpacked", &[2560, 2560], 13_107_202),
    ];
    for (form, shape, want) in rows {
        assert_eq!(bytes(form, shape), want, "{form}");
    }
}

/// Bits a parameter with no shapes: int4 g128 with a bf16 scale per group is (4·128 + 16)/128
/// = 4.125 bits; FP8 b128×128 with bf16 scales (8·16384 + 16)/16384; bitnet 2.
#[test]
fn bits_per_parameter() {
    let p = |s: &str| bits_per_param(&WeightFormat::parse(s).unwrap(), DType::BF16);
    assert_eq!(p("ct:int4:g128"), (528, 128));
    assert_eq!(p("ct:int4:g128:asym"), (532, 128));
    assert_eq!(p("ct:fp8:b128x128"), (131_088, 16_384));
    assert_eq!(p("bitnet"), (2, 1));
    assert_eq!(p("bitnet:unpacked"), (16, 1));
    assert_eq!(p("fp8:row"), (8, 1));
}

proptest! {
    /// Any spelling either parses or is refused with the field named; never a panic.
    #[test]
    fn parser_never_panics(s in "(ct|fp8|bitnet)?(:[a-z0-9x-]{0,8}){0,4}") {
        match WeightFormat::parse(&s) {
            Ok(f) => prop_assert_eq!(WeightFormat::parse(&f.to_string()).unwrap(), f),
            Err(e) => prop_assert!(e.to_string().contains("weights")),
        }
    }
}
