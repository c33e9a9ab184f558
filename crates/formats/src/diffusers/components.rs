//! Each component class's `config.json` → its typed shapes. Absent keys take the class
//! default of its `__init__` (diffusers `register_to_config`, transformers `*Config`).

use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use vramscope_core::diffusion::{Arch, ClipText, Flux, Sd3, T5Encoder, Unet, Vae};

/// Most of any one dimension or count (far above real pipelines; keeps products in u64).
const MAX_DIM: u64 = 1 << 20;

struct Cfg<'a> {
    obj: &'a Map<String, Value>,
    path: &'a str,
}

impl Cfg<'_> {
    fn err(&self, field: &str, reason: &str) -> FormatError {
        FormatError::Field {
            path: self.path.to_string(),
            field: field.to_string(),
            reason: reason.to_string(),
        }
    }

    /// A whole number in 0..=MAX_DIM, `default` when absent or null.
    fn uint(&self, k: &str, default: u64) -> Result<u64> {
        match self.obj.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|n| *n <= MAX_DIM)
                .ok_or_else(|| self.err(k, "is not a whole number up to 1048576")),
        }
    }

    /// Like `uint` but at least 1.
    fn pos(&self, k: &str, default: u64) -> Result<u64> {
        let n = self.uint(k, default)?;
        if n == 0 {
            return Err(self.err(k, "is 0"));
        }
        Ok(n)
    }

    fn flag(&self, k: &str, default: bool) -> Result<bool> {
        match self.obj.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(k, "is not true/false")),
        }
    }

    /// A list of whole numbers (or one number repeated `n` times), `default` when absent.
    fn uints(&self, k: &str, n: usize, default: &[u64]) -> Result<Vec<u64>> {
        match self.obj.get(k) {
            None | Some(Value::Null) => Ok(default.to_vec()),
            Some(Value::Array(a)) if a.len() <= 64 => a
                .iter()
                .map(|v| v.as_u64().filter(|x| *x <= MAX_DIM))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.err(k, "holds something other than whole numbers")),
            Some(v) => match v.as_u64().filter(|x| *x <= MAX_DIM) {
                Some(x) => Ok(vec![x; n]),
                None => Err(self.err(k, "is not a list of whole numbers")),
            },
        }
    }

    fn strings(&self, k: &str) -> Result<Vec<String>> {
        match self.obj.get(k) {
            Some(Value::Array(a)) if a.len() <= 64 => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.err(k, "holds something other than strings")),
            _ => Err(self.err(k, "is missing or not a list of block names")),
        }
    }
}

/// The typed shapes of a `class` component from its config.
pub(super) fn arch_of(class: &str, obj: &Map<String, Value>, path: &str) -> Result<Arch> {
    let c = Cfg { obj, path };
    Ok(match class {
        "FluxTransformer2DModel" => Arch::Flux(flux(&c)?),
        "SD3Transformer2DModel" => Arch::Sd3(sd3(&c)?),
        "UNet2DConditionModel" => Arch::Unet(unet(&c)?),
        "AutoencoderKL" => Arch::Vae(vae(&c)?),
        "CLIPTextModel" => Arch::ClipText(clip(&c, false)?),
        "CLIPTextModelWithProjection" => Arch::ClipText(clip(&c, true)?),
        "T5EncoderModel" => Arch::T5Encoder(t5(&c)?),
        other => {
            return Err(FormatError::Unsupported {
                path: path.to_string(),
                reason: format!(
                "pipeline component class '{other}' is not read (known: FluxTransformer2DModel, \
                     SD3Transformer2DModel, UNet2DConditionModel, AutoencoderKL, CLIPTextModel, \
                     CLIPTextModelWithProjection, T5EncoderModel)"
            ),
            })
        }
    })
}

/// `FluxTransformer2DModel.__init__` defaults (`transformer_flux.py`).
fn flux(c: &Cfg) -> Result<Flux> {
    let in_channels = c.pos("in_channels", 64)?;
    Ok(Flux {
        patch_size: c.pos("patch_size", 1)?,
        in_channels,
        out_channels: c.pos("out_channels", in_channels)?,
        layers: c.uint("num_layers", 19)?,
        single_layers: c.uint("num_single_layers", 38)?,
        head_dim: c.pos("attention_head_dim", 128)?,
        heads: c.pos("num_attention_heads", 24)?,
        joint_attention_dim: c.pos("joint_attention_dim", 4096)?,
        pooled_projection_dim: c.pos("pooled_projection_dim", 768)?,
        guidance_embeds: c.flag("guidance_embeds", false)?,
    })
}

/// `SD3Transformer2DModel.__init__` defaults (`transformer_sd3.py`).
fn sd3(c: &Cfg) -> Result<Sd3> {
    let qk_norm = match c.obj.get("qk_norm") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "rms_norm" => true,
        Some(_) => return Err(c.err("qk_norm", "is not rms_norm or null")),
    };
    Ok(Sd3 {
        patch_size: c.pos("patch_size", 2)?,
        in_channels: c.pos("in_channels", 16)?,
        out_channels: c.pos("out_channels", 16)?,
        layers: c.uint("num_layers", 18)?,
        head_dim: c.pos("attention_head_dim", 64)?,
        heads: c.pos("num_attention_heads", 18)?,
        joint_attention_dim: c.pos("joint_attention_dim", 4096)?,
        caption_projection_dim: c.pos("caption_projection_dim", 1152)?,
        pooled_projection_dim: c.pos("pooled_projection_dim", 2048)?,
        dual_attention_layers: c.uints("dual_attention_layers", 0, &[])?,
        qk_norm,
    })
}

/// `UNet2DConditionModel.__init__` defaults (`unet_2d_condition.py`); the SD 1.x/2.x and SDXL
/// layouts (plain and `CrossAttn` down/up blocks, the cross-attention mid block, optional
/// `text_time` added embedding). Other block kinds are refused.
fn unet(c: &Cfg) -> Result<Unet> {
    let channels = c.uints("block_out_channels", 0, &[320, 640, 1280, 1280])?;
    let n = channels.len();
    if n == 0 || channels.contains(&0) {
        return Err(c.err("block_out_channels", "is empty or holds 0"));
    }
    let down = c.strings("down_block_types")?;
    let up = c.strings("up_block_types")?;
    let down_cross = down
        .iter()
        .map(|b| match b.as_str() {
            "CrossAttnDownBlock2D" => Ok(true),
            "DownBlock2D" => Ok(false),
            _ => Err(c.err("down_block_types", &format!("block '{b}' is not read"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let mirrored: Vec<bool> = up.iter().rev().map(|b| b == "CrossAttnUpBlock2D").collect();
    let up_known = up
        .iter()
        .all(|b| b == "CrossAttnUpBlock2D" || b == "UpBlock2D");
    if down_cross.len() != n || !up_known || mirrored != down_cross {
        return Err(c.err(
            "up_block_types",
            "does not mirror down_block_types (one block per block_out_channels entry)",
        ));
    }
    let mid = c.obj.get("mid_block_type").and_then(Value::as_str);
    if !matches!(mid, None | Some("UNetMidBlock2DCrossAttn")) {
        return Err(c.err("mid_block_type", "is not UNetMidBlock2DCrossAttn"));
    }
    let layers = c.uints("transformer_layers_per_block", n, &vec![1; n])?;
    if layers.len() != n {
        return Err(c.err(
            "transformer_layers_per_block",
            "has not one entry per block",
        ));
    }
    let addition = match c.obj.get("addition_embed_type").and_then(Value::as_str) {
        None => None,
        Some("text_time") => Some(c.pos("projection_class_embeddings_input_dim", 0)?),
        Some(other) => return Err(c.err("addition_embed_type", &format!("'{other}' is not read"))),
    };
    for k in [
        "class_embed_type",
        "encoder_hid_dim",
        "time_cond_proj_dim",
        "num_class_embeds",
    ] {
        if c.obj.get(k).is_some_and(|v| !v.is_null()) {
            return Err(c.err(k, "is set: that UNet variant is not read"));
        }
    }
    Ok(Unet {
        in_channels: c.pos("in_channels", 4)?,
        out_channels: c.pos("out_channels", 4)?,
        block_out_channels: channels,
        down_cross,
        layers_per_block: c.pos("layers_per_block", 2)?,
        transformer_layers_per_block: layers,
        cross_attention_dim: c.pos("cross_attention_dim", 1280)?,
        use_linear_projection: c.flag("use_linear_projection", false)?,
        addition_embed_input_dim: addition,
    })
}

/// `AutoencoderKL.__init__` defaults (`autoencoder_kl.py`: `Vae::default`).
fn vae(c: &Cfg) -> Result<Vae> {
    let d = Vae::default();
    let channels = c.uints("block_out_channels", 0, &d.block_out_channels)?;
    if channels.is_empty() || channels.contains(&0) {
        return Err(c.err("block_out_channels", "is empty or holds 0"));
    }
    if !c.flag("mid_block_add_attention", true)? {
        return Err(c.err("mid_block_add_attention", "false is not read"));
    }
    Ok(Vae {
        in_channels: c.pos("in_channels", d.in_channels)?,
        out_channels: c.pos("out_channels", d.out_channels)?,
        latent_channels: c.pos("latent_channels", d.latent_channels)?,
        block_out_channels: channels,
        layers_per_block: c.pos("layers_per_block", d.layers_per_block)?,
        use_quant_conv: c.flag("use_quant_conv", d.use_quant_conv)?,
        use_post_quant_conv: c.flag("use_post_quant_conv", d.use_post_quant_conv)?,
        sample_size: c.pos("sample_size", d.sample_size)?,
        force_upcast: c.flag("force_upcast", d.force_upcast)?,
    })
}

/// transformers `CLIPTextConfig` defaults (`configuration_clip.py`).
fn clip(c: &Cfg, projection: bool) -> Result<ClipText> {
    Ok(ClipText {
        vocab: c.pos("vocab_size", 49408)?,
        hidden: c.pos("hidden_size", 512)?,
        intermediate: c.pos("intermediate_size", 2048)?,
        layers: c.uint("num_hidden_layers", 12)?,
        max_positions: c.pos("max_position_embeddings", 77)?,
        projection: if projection {
            Some(c.pos("projection_dim", 512)?)
        } else {
            None
        },
    })
}

/// transformers `T5Config` defaults (`configuration_t5.py`); gated when `feed_forward_proj`
/// starts with `gated-`.
fn t5(c: &Cfg) -> Result<T5Encoder> {
    let proj = c
        .obj
        .get("feed_forward_proj")
        .and_then(Value::as_str)
        .unwrap_or("relu");
    Ok(T5Encoder {
        vocab: c.pos("vocab_size", 32128)?,
        d_model: c.pos("d_model", 512)?,
        d_kv: c.pos("d_kv", 64)?,
        d_ff: c.pos("d_ff", 2048)?,
        heads: c.pos("num_heads", 8)?,
        layers: c.uint("num_layers", 6)?,
        buckets: c.uint("relative_attention_num_buckets", 32)?,
        gated: proj.starts_with("gated-"),
    })
}
