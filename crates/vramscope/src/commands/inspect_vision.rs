//! `inspect` of a vision-language model: its components (vision tower, projector, language
//! model) with their parameters, and one line on the tower and the image-token rule.

use crate::app::inspect::InspectReport;
use crate::output::{paint, HEADER};
use crate::units::{bytes, percent, thousands};
use comfy_table::CellAlignment;
use vramscope_core::model::NormKind;
use vramscope_core::vision::{ImageTokens, Part, Projector, Vision};

/// The components table, empty for a text-only model.
pub fn components(r: &InspectReport) -> String {
    let Some(parts) = &r.model.components else {
        return String::new();
    };
    let mut t = crate::output::table(["model component", "params", "share", "bytes", "tensors"]);
    for p in Part::ALL {
        if let Some(x) = parts.get(&p) {
            t.add_row([
                label(p).to_string(),
                thousands(x.params),
                percent(x.params, r.model.params_total),
                bytes(x.bytes),
                thousands(x.tensors),
            ]);
        }
    }
    for i in 1..5 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("\n{}\n{t}\n", paint(HEADER, "Model components"))
}

fn label(p: Part) -> &'static str {
    match p {
        Part::Language => "language model",
        Part::Vision => "vision tower",
        Part::Projector => "projector",
        Part::Audio => "audio tower (loaded, not run)",
    }
}

/// One line on the tower, the projector and the image-token rule.
pub fn describe(v: &Vision) -> String {
    let t = &v.tower;
    let norm = match t.norm {
        NormKind::RmsNorm => "RMSNorm",
        NormKind::LayerNorm { .. } => "LayerNorm",
    };
    let proj = describe_projector(&v.projector);
    let tokens = describe_tokens(&v.tokens);
    let layers = match t.kind {
        vramscope_core::vision::TowerKind::Mllama { global_layers, .. } => {
            format!("{} + {global_layers} gated global", t.layers)
        }
        _ => t.layers.to_string(),
    };
    format!(
        "  vision: {layers} layers × {} ({} heads, {norm}), {} px patches; projector {proj}; image \
         tokens: {tokens}\n",
        t.hidden, t.heads, t.patch
    )
}

/// The projector in a few words (`Projector`'s variants, as `inspect` shows them).
fn describe_projector(p: &Projector) -> String {
    match p {
        Projector::QwenMerger { merge, out, .. } => format!("{merge}×{merge} merger → {out}"),
        Projector::LlavaMlp { out, .. } => format!("2-layer MLP → {out}"),
        Projector::Gemma3 { out } => format!("pooled, RMSNorm, linear → {out}"),
        Projector::Mistral3 { merge, out, .. } => {
            format!("RMSNorm, {merge}×{merge} patch merger, 2-layer MLP → {out}")
        }
        Projector::PixelShuffle { scale, out } => {
            format!("{scale}×{scale} pixel shuffle, linear → {out}")
        }
        Projector::Qwen3Merger {
            merge,
            out,
            deepstack,
        } => format!("{merge}×{merge} merger → {out}, {deepstack} DeepStack mergers"),
        Projector::InternVl { scale, out } => {
            format!("{scale}×{scale} pixel shuffle, LayerNorm, 2-layer MLP → {out}")
        }
        Projector::Mllama { input, out } | Projector::Llama4 { input, out } => {
            format!("linear {input} → {out}")
        }
        Projector::PaliGemma { out } => format!("linear → {out}"),
        Projector::Gemma4 { out } => format!("pooled, RMSNorm (no scale), linear → {out}"),
        Projector::Lfm2Vl {
            scale,
            inner,
            out,
            norm,
            ..
        } => format!(
            "{scale}×{scale} pixel unshuffle, {}MLP {inner} → {out}",
            if *norm { "LayerNorm, " } else { "" }
        ),
    }
}

/// LFM2-VL's rule: a small image resized whole, a larger one tiled with a thumbnail.
fn describe_lfm2_vl(t: &vramscope_core::vision::Lfm2VlTokens) -> String {
    format!(
        "{}–{} tokens per resized image; a larger one cut into {}–{} tiles of {} px ({} each) \
         plus a thumbnail; the tower padded to {} patches per tile",
        t.min_image_tokens,
        t.max_image_tokens,
        t.min_tiles,
        t.max_tiles,
        t.tile,
        (t.tile / t.patch.max(1)).div_ceil(t.factor.max(1)).pow(2),
        t.max_num_patches()
    )
}

/// Mllama's rule: one text token, the tiles through cross-attention.
fn describe_mllama(tile: u64, patch: u64, max_tiles: u64) -> String {
    format!(
        "one <|image|> token per image; the image enters through cross-attention: up to \
         {max_tiles} tiles of {tile} px, padded to {max_tiles}, {} vision tokens per image",
        max_tiles * vramscope_core::vision::mllama::tile_positions(tile, patch)
    )
}

/// The family's image-token rule in a few words (`ImageTokens`' variants).
fn describe_tokens(tokens: &ImageTokens) -> String {
    match tokens {
        ImageTokens::QwenDynamic {
            patch,
            merge,
            min_pixels,
            max_pixels,
        } => format!(
            "dynamic resolution, one token per {p}×{p} px, {min_pixels}–{max_pixels} px per image",
            p = patch * merge
        ),
        ImageTokens::Fixed {
            image_size, tokens, ..
        } => format!("{tokens} per image (resized to {image_size} px)"),
        ImageTokens::AnyRes {
            image_size,
            pinpoints,
            ..
        } => format!(
            "anyres tiles of {image_size} px over {} grids, plus the base image",
            pinpoints.len()
        ),
        ImageTokens::AnyResMax {
            image_size,
            pinpoints,
            max_tiles,
            ..
        } => format!(
            "anyres_max_{max_tiles}: tiles of {image_size} px over {} grids, features shrunk \
             to {max_tiles} tiles' worth, plus the base image (one tile each when several \
             images share a sequence)",
            pinpoints.len()
        ),
        ImageTokens::Pixtral {
            patch,
            merge,
            longest_edge,
        } => format!(
            "native resolution up to {longest_edge} px, one token per {p}×{p} px plus one per row",
            p = patch * merge
        ),
        ImageTokens::Idefics3 {
            tile,
            longest_edge,
            split,
            ..
        } => {
            if *split {
                format!(
                    "longest side {longest_edge} px cut into {tile} px tiles plus a global image"
                )
            } else {
                format!("one {tile} px image")
            }
        }
        ImageTokens::Tiles {
            tile,
            min_tiles,
            max_tiles,
            seq,
            ..
        } => format!(
            "{min_tiles}–{max_tiles} tiles of {tile} px (closest aspect ratio) plus a thumbnail, \
             {seq} per tile"
        ),
        ImageTokens::Mllama {
            tile,
            max_tiles,
            patch,
        } => describe_mllama(*tile, *patch, *max_tiles),
        ImageTokens::Lfm2Vl(t) => describe_lfm2_vl(t),
        ImageTokens::Llama4 {
            tile,
            patch,
            shuffle,
            max_tiles,
        } => format!(
            "up to {max_tiles} tiles of {tile} px plus a global tile, {} per tile after the \
             {shuffle}×{shuffle} pixel shuffle",
            (tile / patch) * (tile / patch) / (shuffle * shuffle).max(1)
        ),
        ImageTokens::Gemma4 {
            patch,
            pooling,
            max_soft_tokens,
        } => format!(
            "resized to at most {max_soft_tokens} soft tokens ({pooling}×{pooling} pooled {patch} px patches; the tower runs all {} padded patches) + <boi>/<eoi>",
            max_soft_tokens * pooling * pooling
        ),
    }
}
