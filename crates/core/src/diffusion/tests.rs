use super::residency::{resident_weight_bytes, Offload};
use super::*;

/// FLUX's VAE: SDXL's four levels with 16 latent channels and no quant convs.
fn vae4() -> Vae {
    let sdxl = Vae {
        block_out_channels: vec![128, 256, 512, 512],
        layers_per_block: 2,
        sample_size: 1024,
        ..Vae::default()
    };
    Vae {
        latent_channels: 16,
        use_quant_conv: false,
        use_post_quant_conv: false,
        ..sdxl
    }
}

fn t5_tiny() -> T5Encoder {
    T5Encoder {
        vocab: 10,
        d_model: 4,
        d_kv: 2,
        d_ff: 8,
        heads: 2,
        layers: 1,
        buckets: 3,
        gated: true,
    }
}

fn flux_tiny() -> Flux {
    Flux {
        patch_size: 1,
        in_channels: 4,
        out_channels: 4,
        layers: 0,
        single_layers: 0,
        head_dim: 2,
        heads: 1,
        joint_attention_dim: 3,
        pooled_projection_dim: 5,
        guidance_embeds: false,
    }
}

fn pipeline(denoiser: Arch) -> Pipeline {
    Pipeline::from_archs(
        "P",
        [
            ("transformer", denoiser),
            ("vae", Arch::Vae(vae4())),
            ("text_encoder", Arch::T5Encoder(t5_tiny())),
        ],
    )
}

/// A T5 encoder small enough to count by hand: embedding 10·4 = 40; a layer: q/k/v/o 4·(4·4)
/// = 64, two norms 8, gated FF 3·4·8 = 96 → 168; relative table 3·2 = 6; final norm 4: 218.
#[test]
fn t5_by_hand() {
    assert_eq!(params::t5_encoder(&t5_tiny()), 218);
}

/// A Flux with no blocks (d = 2): time embedding 256·2+2 + 2·2+2 = 520, pooled 5·2+2 + 2·2+2
/// = 18, context 3·2+2 = 8, x 4·2+2 = 10, norm_out 2·4+4 = 12, proj_out 2·4+4 = 12: 580.
#[test]
fn flux_top_by_hand() {
    assert_eq!(params::flux(&flux_tiny()), 580);
    let g = Flux {
        guidance_embeds: true,
        ..flux_tiny()
    };
    // The guidance embedder is a second time embedding: + 520.
    assert_eq!(params::flux(&g), 1100);
}

/// 1024×1024: the VAE's 4 blocks give 8 pixels a latent; Flux packs 2×2 latents into a token
/// (1024/16)² = 4096 tokens; an SD3 with patch 2 the same; a UNet works on the 128×128 grid.
#[test]
fn latent_tokens_of_a_resolution() {
    let flux = pipeline(Arch::Flux(flux_tiny()));
    assert_eq!(flux.vae().unwrap().scale_factor(), 8);
    assert_eq!(flux.latent_tokens(1024, 1024), Some(4096));
    assert_eq!(flux.latent_tokens(1024, 768), Some(64 * 48));
    assert_eq!(flux.latent_tokens(1000, 1024), None);
    assert!(!flux.cfg_doubles_batch());
    let unet = pipeline(Arch::Unet(Unet {
        in_channels: 4,
        out_channels: 4,
        block_out_channels: vec![320],
        down_cross: vec![false],
        layers_per_block: 1,
        transformer_layers_per_block: vec![1],
        cross_attention_dim: 8,
        use_linear_projection: true,
        addition_embed_input_dim: None,
    }));
    assert_eq!(unet.latent_tokens(1024, 1024), Some(128 * 128));
    assert!(unet.cfg_doubles_batch());
}

/// No offload keeps every model (580 + 218 + the VAE's 83,819,683, the Flux VAE's diffusers
/// count) resident; model offload only the largest one, the VAE.
#[test]
fn offload_residency() {
    let p = pipeline(Arch::Flux(flux_tiny()));
    assert_eq!(params::vae(&vae4()), 83_819_683);
    let all = 580 + 83_819_683 + 218;
    assert_eq!(resident_weight_bytes(&p, Offload::None, 2), Some(2 * all));
    assert_eq!(
        resident_weight_bytes(&p, Offload::Model, 2),
        Some(2 * 83_819_683)
    );
    assert_eq!(Offload::parse(" Model "), Some(Offload::Model));
    assert_eq!(Offload::parse("sequential"), Some(Offload::Sequential));
    assert_eq!(Offload::parse("disk"), None);
}
