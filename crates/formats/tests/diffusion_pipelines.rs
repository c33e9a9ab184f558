//! Real diffusers pipelines (`fixtures/diffusers/`, sources in its README): each component's
//! parameter count equals the framework's — `sum(p.numel() for p in model.parameters())` of
//! the class built on the meta device from the same config.json (diffusers 0.42.1,
//! transformers 5.24; the script is in the fixtures' README) — and, where a model card
//! publishes one, its figure.

use std::path::PathBuf;
use vramscope_core::diffusion::Role;
use vramscope_formats::diffusers::{is_pipeline_dir, read_pipeline_dir};

fn counts(pipe: &str) -> Vec<(String, String, u64)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/diffusers")
        .join(pipe);
    assert!(is_pipeline_dir(&dir));
    let p = read_pipeline_dir(&dir).unwrap();
    p.components
        .iter()
        .map(|c| (c.name.clone(), c.class.clone(), c.arch.params().unwrap()))
        .collect()
}

fn expect(pipe: &str, want: &[(&str, &str, u64)]) {
    let got = counts(pipe);
    let want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(n, c, p)| (n.to_string(), c.to_string(), *p))
        .collect();
    assert_eq!(got, want, "{pipe}");
}

// CLIP ViT-L/14 text tower 123,060,480 (123,650,304 with its 768×768 projection), OpenCLIP
// bigG text tower with projection 694,659,840, T5-XXL encoder 4,762,310,656 (the "4.7B" of
// T5-v1.1-XXL's encoder), the 16-channel VAE 83,819,683 — all by the meta-device count.
const CLIP_L: u64 = 123_060_480;
const CLIP_L_PROJ: u64 = 123_650_304;
const CLIP_G_PROJ: u64 = 694_659_840;
const T5_XXL: u64 = 4_762_310_656;
const VAE_16CH: u64 = 83_819_683;

/// FLUX.1-dev: the transformer 11,901,408,320 (the card's "12 billion parameter"); schnell
/// has no guidance embedder: 10,229,760 fewer (a TimestepEmbedding(256, 3072): 256·3072 + 3072
/// + 3072·3072 + 3072 = 10,229,760).
#[test]
fn flux_dev_and_schnell() {
    let dev = [
        ("text_encoder", "CLIPTextModel", CLIP_L),
        ("text_encoder_2", "T5EncoderModel", T5_XXL),
        ("transformer", "FluxTransformer2DModel", 11_901_408_320),
        ("vae", "AutoencoderKL", VAE_16CH),
    ];
    expect("flux.1-dev", &dev);
    assert_eq!(
        11_901_408_320u64 - 11_891_178_560,
        256 * 3072 + 3072 + 3072 * 3072 + 3072
    );
    let mut schnell = dev;
    schnell[2].2 = 11_891_178_560;
    expect("flux.1-schnell", &schnell);
}

/// SD3.5 Large 8,056,627,520 (the card's "8.1 billion"), Medium 2,243,171,520 (the card's
/// "2.5 billion" counts the text-side MMDiT-X extras differently; this is diffusers' count).
#[test]
fn sd35_large_and_medium() {
    for (pipe, transformer) in [
        ("sd3.5-large", 8_056_627_520),
        ("sd3.5-medium", 2_243_171_520),
    ] {
        expect(
            pipe,
            &[
                ("text_encoder", "CLIPTextModelWithProjection", CLIP_L_PROJ),
                ("text_encoder_2", "CLIPTextModelWithProjection", CLIP_G_PROJ),
                ("text_encoder_3", "T5EncoderModel", T5_XXL),
                ("transformer", "SD3Transformer2DModel", transformer),
                ("vae", "AutoencoderKL", VAE_16CH),
            ],
        );
    }
}

/// SDXL base 1.0: UNet 2,567,463,684 (the "2.6B parameter UNet" of the SDXL report), the
/// 4-channel VAE with its quant convs 83,653,863.
#[test]
fn sdxl_base() {
    expect(
        "sdxl-base-1.0",
        &[
            ("text_encoder", "CLIPTextModel", CLIP_L),
            ("text_encoder_2", "CLIPTextModelWithProjection", CLIP_G_PROJ),
            ("unet", "UNet2DConditionModel", 2_567_463_684),
            ("vae", "AutoencoderKL", 83_653_863),
        ],
    );
}

/// Roles and geometry read off the real configs: 1024×1024 is 4096 tokens for Flux and SD3.5
/// (8 pixels a latent, 2×2 latents a token), a 128×128 latent grid for SDXL; CFG doubles the
/// denoiser's batch for SDXL and SD3 but not for the guidance-distilled Flux.
#[test]
fn roles_geometry_and_cfg() {
    let dir = |p: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/diffusers")
            .join(p)
    };
    let flux = read_pipeline_dir(&dir("flux.1-dev")).unwrap();
    assert_eq!(flux.class, "FluxPipeline");
    assert_eq!(flux.denoiser().unwrap().arch.role(), Role::Denoiser);
    assert_eq!(flux.latent_tokens(1024, 1024), Some(4096));
    assert!(!flux.cfg_doubles_batch());
    let sd3 = read_pipeline_dir(&dir("sd3.5-large")).unwrap();
    assert_eq!(sd3.latent_tokens(1024, 1024), Some(4096));
    assert!(sd3.cfg_doubles_batch());
    let sdxl = read_pipeline_dir(&dir("sdxl-base-1.0")).unwrap();
    assert_eq!(sdxl.latent_tokens(1024, 1024), Some(128 * 128));
    assert!(sdxl.cfg_doubles_batch());
    // All of FLUX.1-dev: 123,060,480 + 4,762,310,656 + 11,901,408,320 + 83,819,683.
    assert_eq!(flux.params_total(), Some(16_870_599_139));
}
