//! The diffusion job's memory, checked against figures derived by hand from diffusers' forward
//! code (each comment walks the tensors alive at the moment) and against the real SDXL VAE's
//! shape (`block_out_channels` [128, 256, 512, 512], 4 latent channels, `layers_per_block` 2,
//! `sample_size` 1024: stabilityai/stable-diffusion-xl-base-1.0 `vae/config.json`).

use vramscope_core::diffusion::job::{DiffusionJob, Offload};
use vramscope_core::diffusion::vae_decode::{decode_peak, decoder_peak, resnet_peak, DecodeMode};
use vramscope_core::diffusion::{estimate, fit, Arch, ClipText, Flux, Pipeline, Role, Vae};

/// SDXL's config sets these three; the rest are `AutoencoderKL`'s defaults (3 → 3 channels,
/// 4 latent channels, both quant convs, `force_upcast`).
fn sdxl_vae() -> Vae {
    Vae {
        block_out_channels: vec![128, 256, 512, 512],
        layers_per_block: 2,
        sample_size: 1024,
        ..Vae::default()
    }
}

const PLAIN: DecodeMode = DecodeMode {
    tiling: false,
    slicing: false,
    eager: false,
};

/// `ResnetBlock2D` 256 → 128 channels (the shortcut conv exists): after `norm1` and SiLU the
/// input, the norm and the activation (3 × 256 = 768); at the close input 256 + h 128 +
/// shortcut 128 + sum 128 + quotient 128 = 768. 128 → 128: the close, 4 × 128 = 512 > 384.
#[test]
fn resnet_moments_by_hand() {
    assert_eq!(resnet_peak(256, 128, 1, 0), 768);
    assert_eq!(resnet_peak(128, 128, 1, 0), 512);
    assert_eq!(resnet_peak(128, 128, 10, 7), 5127);
}

/// SDXL's VAE decoding 1024² (a 128² latent): the last up block runs at 1024² = 1,048,576
/// pixels on the previous block's 256-channel output (kept by `Decoder.forward`'s `sample`):
/// its first resnet 256 → 128 peaks at 768 channels' worth, its next ones at 256 (held) + 4 ×
/// 128 = 768 too; the upsampler before it 512 + 256 + 8 × 256 over 512² = 704 per full-res
/// pixel, less. Plus z and `post_quant_conv`'s output, 2 × 4 × 128² = 131,072.
/// 768 × 1,048,576 + 131,072 = 805,437,440 elements (3,221,749,760 B in fp32).
#[test]
fn sdxl_vae_decode_at_1024() {
    let v = sdxl_vae();
    assert_eq!(decoder_peak(&v, 128, 128, false), 805_437_440);
    // Tiling changes nothing at 1024²: the latent is one 128-latent tile (sample_size 1024 / 8).
    let tiled = DecodeMode {
        tiling: true,
        ..PLAIN
    };
    assert_eq!(decode_peak(&v, 1, 128, 128, tiled), 805_437_440);
    // Four images at once: four times; sliced: one image's decode plus the three decoded
    // 3 × 1024² images kept for the `torch.cat` (9,437,184).
    assert_eq!(decode_peak(&v, 4, 128, 128, PLAIN), 4 * 805_437_440);
    let sliced = DecodeMode {
        slicing: true,
        ..PLAIN
    };
    assert_eq!(
        decode_peak(&v, 4, 128, 128, sliced),
        805_437_440 + 9_437_184
    );
}

/// 2048² tiled: latent tiles of 128 every int(128 × 0.75) = 96 latents → rows and columns at
/// 0, 96, 192 of sizes 128, 128, 64. The worst moment is the fifth tile (a full 128² one) with
/// four decoded tiles kept: 1024² + 1024² + 1024×512 + 1024² pixels × 3 channels = 11,010,048;
/// 805,437,440 + 11,010,048 = 816,447,488 — against 768 × 2048² + 2 × 4 × 256² = 3,221,749,760
/// untiled.
#[test]
fn sdxl_vae_tiled_at_2048() {
    let v = sdxl_vae();
    let tiled = DecodeMode {
        tiling: true,
        ..PLAIN
    };
    assert_eq!(decode_peak(&v, 1, 256, 256, tiled), 816_447_488);
    assert_eq!(decode_peak(&v, 1, 256, 256, PLAIN), 3_221_749_760);
}

fn flux_small() -> Flux {
    Flux {
        patch_size: 1,
        in_channels: 64,
        out_channels: 64,
        layers: 1,
        single_layers: 1,
        head_dim: 32,
        heads: 4,
        joint_attention_dim: 96,
        pooled_projection_dim: 32,
        guidance_embeds: true,
    }
}

fn pipeline(vae: Vae) -> Pipeline {
    let clip = ClipText {
        vocab: 1000,
        hidden: 64,
        intermediate: 256,
        layers: 2,
        max_positions: 77,
        projection: None,
    };
    Pipeline::from_archs(
        "FluxPipeline",
        [
            ("transformer", Arch::Flux(flux_small())),
            ("vae", Arch::Vae(vae)),
            ("text_encoder", Arch::ClipText(clip)),
        ],
    )
}

/// Flux, d = 128, fp32, 512² (a 64² latent packed 2×2: N = 1024 tokens), T = 64 text tokens,
/// S = 1088. Double block: attention 4 B × (5S + 3T) + 16 B × S (rotary temporaries) per
/// channel = 4 × 5,632 + 17,408 = 39,936 → × 128 = 5,111,808 B; feed-forward 4 × (13N + 3T)
/// × 128 = 6,914,048 B. Single block: attention (4 × 10S + 16S) × 128 = 7,798,784 B; the
/// `gate * proj_out(cat)` close 4 × 15S × 128 = 8,355,840 B, the block peak. Inputs: packed
/// latents 1024 × 64 and prompt embeddings 64 × 96, × 4 B = 286,720 B; rotary cos and sin
/// 2 × 4 B × 1088 × 32 = 278,528 B; position ids and their concatenation 2 × 1088 × 3 × 4 B =
/// 26,112 B. Total 8,947,200 B (measured on the CPU with diffusers 0.42.1: the single block
/// alone peaks at 8,952,320 B, `validation/cpu-measured-diffusion.json`).
#[test]
fn flux_denoise_by_hand() {
    let p = pipeline(Vae {
        latent_channels: 16,
        block_out_channels: vec![32, 64, 64, 64],
        use_quant_conv: false,
        use_post_quant_conv: false,
        sample_size: 256,
        ..sdxl_vae()
    });
    let job = DiffusionJob {
        width: Some(512.0),
        height: Some(512.0),
        precision: Some("fp32".into()),
        max_sequence_length: Some(64.0),
        ..DiffusionJob::default()
    };
    let r = job.resolve(&p).unwrap();
    assert!(!r.cfg, "Flux is guidance-distilled: no CFG by default");
    assert_eq!(
        estimate::denoise_activations(&p, &r),
        Some(8_947_200),
        "fp32 Flux forward"
    );
}

/// The job's checks name the field: sides must be multiples of 16 for Flux (VAE 8 × 2×2
/// packing), dtypes are bf16/fp16/fp32, offload none/model/sequential, T5 dropping is SD3's,
/// the task infer or train.
#[test]
fn job_errors_name_the_field() {
    let p = pipeline(sdxl_vae());
    let bad = |j: DiffusionJob| j.resolve(&p).unwrap_err();
    // A pipeline runs as `infer` or `train` (LoRA on the denoiser, docs/diffusion.md): `rl`
    // is not a pipeline task.
    // (what the case writes into a default job, how its error starts)
    type Case = (fn(&mut DiffusionJob), &'static str);
    let cases: [Case; 6] = [
        (
            |j| j.width = Some(1000.0),
            "width: 1000 is not a multiple of 16",
        ),
        (|j| j.precision = Some("int4".into()), "precision:"),
        (|j| j.offload = Some("disk".into()), "offload:"),
        (|j| j.drop_t5 = Some(true), "drop_t5:"),
        (|j| j.batch = Some(0.5), "batch:"),
        (|j| j.task = Some("rl".into()), "task:"),
    ];
    for (set, start) in cases {
        let mut job = DiffusionJob::default();
        set(&mut job);
        let err = bad(job);
        assert!(err.starts_with(start), "{start:?}: {err}");
    }
}

/// Offload modes: without offload every weight stays through the decode; with model offload
/// only the VAE's (83,653,863 parameters for this VAE by diffusers' count, the SDXL VAE) × 2 B.
#[test]
fn decode_phase_weights_by_offload() {
    let p = pipeline(sdxl_vae());
    let mk = |o: &str| {
        DiffusionJob {
            offload: Some(o.into()),
            ..Default::default()
        }
        .resolve(&p)
        .unwrap()
    };
    let none = estimate::phases(&p, &mk("none"), None).unwrap();
    let model = estimate::phases(&p, &mk("model"), None).unwrap();
    let decode = |ph: &[estimate::Phase]| {
        ph.iter()
            .find(|x| x.phase == "vae_decode")
            .cloned()
            .unwrap()
    };
    assert_eq!(decode(&model).parameters, 2 * 83_653_863);
    assert_eq!(
        decode(&none).parameters,
        2 * p.params_total().unwrap(),
        "all resident"
    );
    assert_eq!(mk("sequential").offload, Offload::Sequential);
    assert!(p.components.iter().any(|c| c.arch.role() == Role::Vae));
}

/// `fit` answers both limits and they are consistent with `estimate`: the largest batch fits
/// and one more does not.
#[test]
fn fit_is_the_edge_of_estimate() {
    let p = pipeline(sdxl_vae());
    let j = DiffusionJob {
        gpu: Some("t4-16gb".into()),
        ..Default::default()
    }
    .resolve(&p)
    .unwrap();
    let f = fit::fit(&p, "p", &j).unwrap();
    let b = f.max_batch.unwrap();
    let at = |b: u64| {
        let mut k = j.clone();
        k.batch = b;
        estimate::estimate(&p, "p", &k).unwrap().fit.unwrap().fits
    };
    assert!(at(b) && !at(b + 1), "max_batch {b}");
    let s = f.max_resolution.unwrap();
    assert_eq!(s % 16, 0);
    let sq = |s: u64| {
        let mut k = j.clone();
        k.width = s;
        k.height = s;
        estimate::estimate(&p, "p", &k).unwrap().fit.unwrap().fits
    };
    assert!(sq(s) && !sq(s + 16), "max side {s}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn num() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            any::<f64>().prop_map(Some),
            (0u32..20_000).prop_map(|x| Some(f64::from(x))),
            (0u32..1100).prop_map(|x| Some(f64::from(x * 16))),
        ]
    }

    fn word() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            Just(Some("model".to_string())),
            Just(Some("sequential".to_string())),
            Just(Some("fp16".to_string())),
            Just(Some("eager".to_string())),
            "\\PC{0,12}".prop_map(Some),
        ]
    }

    proptest! {
        /// Any values: the job resolves or says which field is wrong in one line; a resolved job
        /// estimates without a panic (or says it overflows), and its phases add up.
        #[test]
        fn any_job_resolves_or_names_the_field(
            width in num(), height in num(), batch in num(), msl in num(), reserve in num(),
            precision in word(), offload in word(), attention in word(),
            cfg in any::<Option<bool>>(), tiling in any::<Option<bool>>(),
            slicing in any::<Option<bool>>(),
        ) {
            let p = pipeline(sdxl_vae());
            let j = DiffusionJob {
                width, height, batch, max_sequence_length: msl, reserve,
                precision, offload, attention, cfg,
                vae_tiling: tiling, vae_slicing: slicing,
                ..DiffusionJob::default()
            };
            match j.resolve(&p) {
                Err(e) => {
                    prop_assert!(!e.contains('\n'));
                    let field = e.split(':').next().unwrap_or("");
                    prop_assert!([
                        "width", "height", "batch", "max_sequence_length", "reserve",
                        "precision", "offload", "attention", "drop_t5", "task",
                    ].contains(&field), "{}", e);
                }
                Ok(r) => {
                    if let Ok(rep) = estimate::estimate(&p, "p", &r) {
                        for ph in &rep.phases {
                            prop_assert_eq!(ph.allocated, ph.parameters + ph.activations + ph.temporaries);
                        }
                    }
                }
            }
        }
    }
}
