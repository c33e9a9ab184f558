use super::*;
use gguf::WeightRole;

fn t(name: &str, shape: &[u64], layer: Option<u32>, c: Component) -> Tensor {
    Tensor::new(name.into(), shape.to_vec(), DType::BF16, layer, c).unwrap()
}

fn sq() -> Tensor {
    t(
        "model.layers.0.self_attn.q_proj.weight",
        &[4096, 4096],
        Some(0),
        Component::Attention,
    )
}

fn ctx() -> QuantContext {
    QuantContext {
        n_layers: 32,
        n_gqa: 1,
        ..QuantContext::default()
    }
}

fn bytes(f: &str, x: &Tensor) -> u64 {
    tensor_bytes(&WeightFormat::parse(f).unwrap(), x, &ctx()).unwrap()
}

#[test]
fn parses_every_form() {
    use WeightFormat as W;
    let gptq = |bits, group| W::Gptq { bits, group };
    let mix = |t| W::Gguf(GgufFormat::Mix(t));
    let pure = |t| W::Gguf(GgufFormat::Pure(t));
    // A file type name gets the file's mix; a ggml-only name or :pure is uniform.
    let forms = [
        ("none", W::None),
        (" NF4-DQ ", W::Nf4Dq),
        ("fp8:b128", W::Fp8 { block: Some(128) }),
        ("gptq:4", gptq(4, Some(128))),
        ("gptq:3:g-1", gptq(3, None)),
        (
            "awq:4:g64",
            W::Awq {
                bits: 4,
                group: Some(64),
            },
        ),
        ("gguf:q4_k_m", mix(FileType::Q4_K_M)),
        ("gguf:Q8_0", mix(FileType::Q8_0)),
        ("gguf:Q4_K", pure(GgmlType::Q4_K)),
        ("gguf:Q4_0:pure", pure(GgmlType::Q4_0)),
    ];
    for (form, want) in forms {
        assert_eq!(W::parse(form).unwrap(), want, "{form}");
    }
    for s in [
        "none",
        "int8",
        "nf4-dq",
        "fp8:b128",
        "gptq:8:g32",
        "awq:4:g-1",
        "gguf:IQ2_M",
        "gguf:Q6_K:pure",
        "gguf:Q8_K",
    ] {
        let f = W::parse(s).unwrap();
        assert_eq!(W::parse(&f.to_string()).unwrap(), f, "{s}");
    }
}

#[test]
fn bad_forms_name_the_field() {
    for s in [
        "",
        "nf5",
        "gptq",
        "gptq:5",
        "gptq:4:64",
        "gptq:4:g0",
        "awq:8",
        "fp8:x",
        "gguf",
        "gguf:Q4_K_X",
        "gguf:Q4_K:fast",
        "int8:g64",
    ] {
        let e = parse(s).unwrap_err().to_string();
        assert!(e.starts_with("weights: "), "{s}: {e}");
        assert!(e.contains("gguf:TYPE"), "{s}: {e}");
    }
}

#[test]
fn square_weight_in_each_format() {
    let w = sq();
    let n = 16_777_216u64;
    assert_eq!(bytes("none", &w), 2 * n);
    // int8 + one fp32 SCB per output row.
    assert_eq!(bytes("int8", &w), n + 4 * 4096);
    // n/2 packed + fp32 absmax per 64 + 16-entry fp32 code.
    assert_eq!(bytes("nf4", &w), 8_388_608 + 4 * 262_144 + 64);
    assert_eq!(bytes("fp4", &w), 8_388_608 + 4 * 262_144 + 64);
    // n/2 + uint8 absmax per 64 + fp32 per 256 absmax blocks (1024) + offset + code.
    assert_eq!(bytes("nf4-dq", &w), 8_388_608 + 262_144 + 4 * 1024 + 4 + 64);
    assert_eq!(bytes("fp8", &w), n + 4);
    // 32 x 32 tiles of 128 x 128, fp32 scale each.
    assert_eq!(bytes("fp8:b128", &w), n + 4 * 32 * 32);
    // qweight [512, 4096] i32 + qzeros [32, 512] i32 + scales [32, 4096] f16 + g_idx [4096].
    assert_eq!(bytes("gptq:4", &w), 8_388_608 + 65_536 + 262_144 + 16_384);
    // g64: 64 groups.
    assert_eq!(
        bytes("gptq:4:g64", &w),
        8_388_608 + 64 * 512 * 4 + 64 * 4096 * 2 + 16_384
    );
    // qweight [4096, 512] i32 + qzeros [32, 512] i32 + scales [32, 4096] f16.
    assert_eq!(bytes("awq:4", &w), 8_388_608 + 65_536 + 262_144);
    // ggml blocks: Q4_K 144 B / 256, Q8_0 34 B / 32.
    assert_eq!(bytes("gguf:Q4_K", &w), 65_536 * 144);
    assert_eq!(bytes("gguf:Q8_0", &w), 524_288 * 34);
}

#[test]
fn only_linear_weights_are_quantized() {
    let emb = t(
        "model.embed_tokens.weight",
        &[32000, 4096],
        None,
        Component::Embedding,
    );
    let norm = t("model.norm.weight", &[4096], None, Component::Norm);
    let head = t("lm_head.weight", &[32000, 4096], None, Component::Head);
    let bias = t(
        "model.layers.0.self_attn.q_proj.bias",
        &[4096],
        Some(0),
        Component::Attention,
    );
    let router = t(
        "model.layers.0.block_sparse_moe.gate.weight",
        &[8, 4096],
        Some(0),
        Component::Router,
    );
    for f in ["int8", "nf4", "nf4-dq", "gptq:4", "awq:4", "fp8"] {
        let wf = parse(f).unwrap();
        for x in [&emb, &norm, &head, &bias, &router] {
            assert!(!is_quantized(&wf, x), "{f} {}", x.name);
            assert_eq!(tensor_bytes(&wf, x, &ctx()).unwrap(), x.bytes);
        }
        assert!(is_quantized(&wf, &sq()));
    }
    // GGUF quantizes embeddings and the head, keeps 1-D and routers in F32.
    let g = parse("gguf:Q8_0").unwrap();
    assert!(is_quantized(&g, &emb) && is_quantized(&g, &head));
    assert_eq!(tensor_bytes(&g, &norm, &ctx()).unwrap(), 4 * 4096);
    assert_eq!(tensor_bytes(&g, &router, &ctx()).unwrap(), 4 * 8 * 4096);
    assert_eq!(tensor_bytes(&g, &bias, &ctx()).unwrap(), 4 * 4096);
}

#[test]
fn gpt2_conv1d_uses_out_rows() {
    let c = QuantContext {
        conv1d: true,
        ..ctx()
    };
    // Conv1D [in=768, out=2304]: 2304 SCB rows.
    let w = t(
        "transformer.h.0.attn.c_attn.weight",
        &[768, 2304],
        Some(0),
        Component::Attention,
    );
    let int8 = tensor_bytes(&WeightFormat::Int8, &w, &c).unwrap();
    assert_eq!(int8, 768 * 2304 + 4 * 2304);
    // GPTQ: qweight [768/32*4=96, 2304] + qzeros [6, 288] + scales [6, 2304] + g_idx [768].
    let g = tensor_bytes(&parse("gptq:4").unwrap(), &w, &c).unwrap();
    assert_eq!(g, 96 * 2304 * 4 + 6 * 288 * 4 + 6 * 2304 * 2 + 768 * 4);
}

#[test]
fn awq_misaligned_is_an_error() {
    let w = t(
        "model.layers.0.mlp.down_proj.weight",
        &[4096, 11000],
        Some(0),
        Component::Mlp,
    );
    let e = tensor_bytes(&parse("awq:4").unwrap(), &w, &ctx()).unwrap_err();
    assert!(e.to_string().contains("AWQ"), "{e}");
}

#[test]
fn qlora_65b_bare_count() {
    // Dev case qlora-nf4-double-quant-65b: 65e9 x 4.126953125 / 8 = 33,531,494,140.625.
    let b = bytes_for_params(&WeightFormat::Nf4Dq, 65_000_000_000, DType::BF16).unwrap();
    assert_eq!(b, 33_531_494_141);
    // nf4: 4.5 bits; int8: 8 bits; gptq:4:g128: 4 + 20/128 bits.
    assert_eq!(
        bytes_for_params(&WeightFormat::Nf4, 1000, DType::BF16).unwrap(),
        563
    );
    assert_eq!(
        bytes_for_params(&WeightFormat::Int8, 1000, DType::BF16).unwrap(),
        1000
    );
    assert_eq!(
        bytes_for_params(&parse("gptq:4").unwrap(), 128_000, DType::BF16).unwrap(),
        64_000 + 2_500
    );
    assert_eq!(
        bytes_for_params(&WeightFormat::None, 10, DType::F32).unwrap(),
        40
    );
    // Q4_K: 4.5 bits per weight.
    assert_eq!(
        bytes_for_params(&parse("gguf:Q4_K_M").unwrap(), 256, DType::BF16).unwrap(),
        144
    );
    assert!(bytes_for_params(&WeightFormat::None, u64::MAX, DType::F64).is_err());
}

#[test]
fn dequant_scratch() {
    let ts = vec![
        sq(),
        t(
            "model.layers.0.mlp.up_proj.weight",
            &[11008, 4096],
            Some(0),
            Component::Mlp,
        ),
        t("lm_head.weight", &[32000, 4096], None, Component::Head),
    ];
    let n = 11008 * 4096u64;
    let c = ctx();
    let nf4 = dequant_scratch_bytes(&WeightFormat::Nf4, &ts, &c, 2, false).unwrap();
    assert_eq!(nf4, 2 * n);
    let dq = dequant_scratch_bytes(&WeightFormat::Nf4Dq, &ts, &c, 2, false).unwrap();
    assert_eq!(dq, 2 * n + 4 * n / 64);
    assert_eq!(
        dequant_scratch_bytes(&WeightFormat::Int8, &ts, &c, 2, false).unwrap(),
        0
    );
    assert_eq!(
        dequant_scratch_bytes(&WeightFormat::Int8, &ts, &c, 2, true).unwrap(),
        2 * n
    );
    assert_eq!(
        dequant_scratch_bytes(&WeightFormat::None, &ts, &c, 2, true).unwrap(),
        0
    );
}

/// Llama-2-7B as llama.cpp names it: 32 layers, MHA, vocab 32000, untied output.
fn llama2_7b_gguf() -> Vec<Tensor> {
    let mut v = vec![
        t(
            "token_embd.weight",
            &[32000, 4096],
            None,
            Component::Embedding,
        ),
        t("output_norm.weight", &[4096], None, Component::Norm),
        t("output.weight", &[32000, 4096], None, Component::Head),
    ];
    for l in 0..32u32 {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        let at = Some(l);
        v.push(t(&p("attn_norm"), &[4096], at, Component::Norm));
        v.push(t(&p("attn_q"), &[4096, 4096], at, Component::Attention));
        v.push(t(&p("attn_k"), &[4096, 4096], at, Component::Attention));
        v.push(t(&p("attn_v"), &[4096, 4096], at, Component::Attention));
        v.push(t(
            &p("attn_output"),
            &[4096, 4096],
            at,
            Component::Attention,
        ));
        v.push(t(&p("ffn_norm"), &[4096], at, Component::Norm));
        v.push(t(&p("ffn_gate"), &[11008, 4096], at, Component::Mlp));
        v.push(t(&p("ffn_up"), &[11008, 4096], at, Component::Mlp));
        v.push(t(&p("ffn_down"), &[4096, 11008], at, Component::Mlp));
    }
    v
}

#[test]
fn q4_k_m_mix_of_llama2_7b() {
    let ts = llama2_7b_gguf();
    let c = ctx();
    let stored = storage(&parse("gguf:Q4_K_M").unwrap(), &ts, &c).unwrap();
    let count = |ty: GgmlType| stored.iter().filter(|s| s.ggml == Some(ty)).count();
    // llama.cpp's loader prints for llama-2-7b Q4_K_M: f32 65, q4_K 193, q6_K 33.
    assert_eq!(
        (
            count(GgmlType::F32),
            count(GgmlType::Q4_K),
            count(GgmlType::Q6_K)
        ),
        (65, 193, 33)
    );
    // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2 -> layer 6 yes, 5 no.
    let ty = |name: &str| {
        let i = ts.iter().position(|x| x.name == name).unwrap();
        stored[i].ggml.unwrap()
    };
    assert_eq!(ty("blk.6.attn_v.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.5.ffn_down.weight"), GgmlType::Q4_K);
    assert_eq!(ty("blk.31.ffn_down.weight"), GgmlType::Q6_K);
    assert_eq!(ty("output.weight"), GgmlType::Q6_K);
    assert_eq!(ty("token_embd.weight"), GgmlType::Q4_K);
    // Bytes by hand: token_embd Q4_K 512,000 blocks * 144 = 73,728,000; output Q6_K
    // 512,000 * 210 = 107,520,000; output_norm 16,384. A Q4_K layer: q, k, v, o
    // 4 * 9,437,184 + gate, up, down 3 * 25,362,432 + norms 32,768 = 113,868,800; the 16
    // layers with Q6_K attn_v and ffn_down add 4,325,376 + 11,624,448 = 15,949,824 each.
    let expected = 73_728_000 + 107_520_000 + 16_384 + 32 * 113_868_800 + 16 * 15_949_824;
    assert_eq!(
        total_bytes(&parse("gguf:Q4_K_M").unwrap(), &ts, &c).unwrap(),
        expected
    );
}

#[test]
fn mixes_and_fallbacks() {
    let ts = llama2_7b_gguf();
    let c = ctx();
    let count = |f: &str, ty: GgmlType| {
        storage(&parse(f).unwrap(), &ts, &c)
            .unwrap()
            .iter()
            .filter(|s| s.ggml == Some(ty))
            .count()
    };
    // Q4_K_S: attn_v of the first 4 layers and ffn_down of the first 32/8 = 4 layers Q5_K.
    assert_eq!(count("gguf:Q4_K_S", GgmlType::Q5_K), 8);
    assert_eq!(count("gguf:Q4_K_S", GgmlType::Q6_K), 1); // output
                                                         // Q3_K_M: attn_v Q5_K for the first 2, Q4_K after; ffn_down Q5_K below 32/16 = 2, else
                                                         // Q4_K; attn_output Q4_K.
    assert_eq!(count("gguf:Q3_K_M", GgmlType::Q5_K), 4);
    assert_eq!(count("gguf:Q3_K_M", GgmlType::Q4_K), 30 + 30 + 32);
    // Q2_K without GQA: attn_v, ffn_down, attn_output Q3_K; q, k, gate, up and the
    // embedding Q2_K.
    assert_eq!(count("gguf:Q2_K", GgmlType::Q3_K), 96);
    assert_eq!(count("gguf:Q2_K", GgmlType::Q2_K), 4 * 32 + 1);
    // Pure Q4_0 keeps the output in Q4_0; the Q4_0 file type gives it Q6_K.
    assert_eq!(count("gguf:Q4_0:pure", GgmlType::Q4_0), 226);
    assert_eq!(count("gguf:Q4_0", GgmlType::Q6_K), 1);
    // 70B-class models bump Q4_K attn_v to Q5_K.
    let big = QuantContext { llm_70b: true, ..c };
    let n = storage(&parse("gguf:Q4_K_S").unwrap(), &ts, &big)
        .unwrap()
        .iter()
        .filter(|s| s.ggml == Some(GgmlType::Q5_K))
        .count();
    assert_eq!(n, 32 + 4);
    // A row of 11040 = 43 * 256 + 32 is not whole 256-blocks: Q4_K falls back to Q5_0
    // (block 32, 22 B).
    let odd = t(
        "blk.0.ffn_down.weight",
        &[4096, 11040],
        Some(0),
        Component::Mlp,
    );
    assert_eq!(
        tensor_bytes(&parse("gguf:Q4_K").unwrap(), &odd, &c).unwrap(),
        4096 * 345 * 22
    );
    // 100 is not whole 32-blocks either: F16.
    let odder = t("blk.0.ffn_down.weight", &[64, 100], Some(0), Component::Mlp);
    assert_eq!(
        tensor_bytes(&parse("gguf:Q4_K").unwrap(), &odder, &c).unwrap(),
        64 * 100 * 2
    );
    // Q8_0 has no fallback in llama-quantize.
    assert!(tensor_bytes(&parse("gguf:Q8_0").unwrap(), &odder, &c).is_err());
}

#[test]
fn tied_embedding_takes_the_output_rule() {
    let mut ts = llama2_7b_gguf();
    ts.retain(|x| x.name != "output.weight");
    let p = storage(&parse("gguf:Q4_K_M").unwrap(), &ts, &ctx()).unwrap();
    assert_eq!(p[0].ggml, Some(GgmlType::Q6_K));
}

#[test]
fn hf_names_map_to_llama_cpp_categories() {
    let c = ctx();
    let cat = |name: &str, comp| gguf::role(&t(name, &[64, 64], Some(0), comp));
    assert_eq!(
        cat(
            "model.layers.0.self_attn.v_proj.weight",
            Component::Attention
        ),
        WeightRole::AttnV
    );
    assert_eq!(
        cat("transformer.h.0.attn.c_attn.weight", Component::Attention),
        WeightRole::AttnQkv
    );
    assert_eq!(
        cat("transformer.h.0.mlp.c_proj.weight", Component::Mlp),
        WeightRole::FfnDown
    );
    assert_eq!(
        cat("transformer.h.0.attn.c_proj.weight", Component::Attention),
        WeightRole::AttnOutput
    );
    assert_eq!(
        cat(
            "bert.encoder.layer.0.intermediate.dense.weight",
            Component::Mlp
        ),
        WeightRole::FfnUp
    );
    assert_eq!(
        cat("bert.encoder.layer.0.output.dense.weight", Component::Mlp),
        WeightRole::FfnDown
    );
    assert_eq!(
        cat(
            "model.layers.0.block_sparse_moe.experts.3.w2.weight",
            Component::Experts
        ),
        WeightRole::FfnDown
    );
    assert_eq!(
        cat(
            "model.layers.0.self_attn.kv_b_proj.weight",
            Component::Attention
        ),
        WeightRole::AttnKvB
    );
    assert_eq!(cat("lm_head.weight", Component::Head), WeightRole::Output);
    // Q4_K_M on an HF-named v_proj of layer 0 (use_more_bits) -> Q6_K.
    let v = t(
        "model.layers.0.self_attn.v_proj.weight",
        &[4096, 4096],
        Some(0),
        Component::Attention,
    );
    assert_eq!(
        tensor_bytes(&parse("gguf:Q4_K_M").unwrap(), &v, &c).unwrap(),
        65_536 * 210
    );
    // An HF position table is not quantized and is stored F32.
    let wpe = t(
        "transformer.wpe.weight",
        &[1024, 768],
        None,
        Component::Embedding,
    );
    assert_eq!(
        tensor_bytes(&parse("gguf:Q4_K_M").unwrap(), &wpe, &c).unwrap(),
        4 * 1024 * 768
    );
}

#[test]
fn context_from_a_spec() {
    use crate::model::*;
    let layer = Layer::new(
        Attention::new(
            AttentionKind::Standard {
                heads: 64,
                kv_heads: 8,
                head_dim: 128,
            },
            ProjBias::default(),
        ),
        Mlp::Dense(DenseMlp {
            ffn: 28672,
            gated: true,
            bias: false,
            activation: "silu".into(),
            gaussian_topk: false,
        }),
        vec![],
    );
    let spec = ModelSpec {
        name: "llama-70b-like".into(),
        model_type: "llama".into(),
        architecture: "LlamaForCausalLM".into(),
        naming: Naming::Llama,
        dtype: DType::BF16,
        vocab_size: 128256,
        hidden_size: 8192,
        max_position_embeddings: None,
        embedding: Embedding::plain(8192, Positions::Rotary { theta: None }),
        encoder: None,
        decoder: Stack {
            layers: vec![layer; 80],
            final_norm: None,
        },
        head: Head::LanguageModel {
            tied: false,
            bias: false,
        },
        dropout: Default::default(),
        quantization: None,
        softcapping: Default::default(),
        vision: None,
        gemma3n: None,
        loaded_only: Vec::new(),
    };
    let c = QuantContext::from_spec(&spec);
    // 64 query heads over 8 KV heads; 80 layers of Llama = llama.cpp's LLM_TYPE_70B.
    assert_eq!((c.n_layers, c.n_gqa, c.n_expert), (80, 8, 0));
    assert!(c.llm_70b && !c.falcon && !c.conv1d && !c.tied_embeddings);
}

/// MXFP4 (OCP Microscaling v1.0: 32 E2M1 values + one E8M0 scale = 17 B per block) sizes the
/// expert matrices only; attention weights and expert biases stay as stored. gpt-oss stores
/// its experts `[E, in, out]`: a down_proj `[2, 64, 96]` is 2 · 96 rows of 64 inputs = 2 · 96 ·
/// 2 blocks · 17 B = 6,528 B; a Mixtral-style `[out, in]` expert `w1` `[96, 40]` is 96 rows of
/// ceil(40 / 32) = 2 blocks = 3,264 B.
#[test]
fn mxfp4_sizes_expert_matrices_only() {
    let f = WeightFormat::parse("MXFP4").unwrap();
    assert_eq!(f, WeightFormat::Mxfp4);
    assert_eq!(f.to_string(), "mxfp4");
    assert_eq!(bits_per_param(&f, DType::BF16), (136, 32));
    let gpt_oss = QuantContext {
        experts_in_out: true,
        ..ctx()
    };
    let down = t(
        "model.layers.0.mlp.experts.down_proj",
        &[2, 64, 96],
        Some(0),
        Component::Experts,
    );
    assert_eq!(tensor_bytes(&f, &down, &gpt_oss).unwrap(), 6_528);
    let w1 = t(
        "model.layers.0.block_sparse_moe.experts.0.w1.weight",
        &[96, 40],
        Some(0),
        Component::Experts,
    );
    assert_eq!(tensor_bytes(&f, &w1, &ctx()).unwrap(), 3_264);
    let bias = t(
        "model.layers.0.mlp.experts.down_proj_bias",
        &[2, 96],
        Some(0),
        Component::Experts,
    );
    assert_eq!(tensor_bytes(&f, &bias, &gpt_oss).unwrap(), 2 * 96 * 2);
    assert_eq!(tensor_bytes(&f, &sq(), &ctx()).unwrap(), 4096 * 4096 * 2);
}
