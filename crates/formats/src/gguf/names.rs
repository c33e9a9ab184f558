//! llama.cpp's names: `general.file_type` values, and which block and model part a tensor name
//! belongs to.

use vramscope_core::Component;

/// The name of a `general.file_type` value, from `enum llama_ftype` in llama.cpp
/// `include/llama.h` (same values as gguf-py `LlamaFileType`). Ids 4–6 and 33–35 are
/// commented out there (removed) but old files still carry them. Bit 1024
/// (`LLAMA_FTYPE_GUESSED`) adds " (guessed)".
pub fn ftype_name(ftype: u32) -> Option<String> {
    const GUESSED: u32 = 1024;
    if ftype & GUESSED != 0 && ftype != GUESSED {
        return ftype_name(ftype & !GUESSED).map(|n| format!("{n} (guessed)"));
    }
    let name = match ftype {
        0 => "ALL_F32",
        1 => "MOSTLY_F16",
        2 => "MOSTLY_Q4_0",
        3 => "MOSTLY_Q4_1",
        4 => "MOSTLY_Q4_1_SOME_F16",
        5 => "MOSTLY_Q4_2",
        6 => "MOSTLY_Q4_3",
        7 => "MOSTLY_Q8_0",
        8 => "MOSTLY_Q5_0",
        9 => "MOSTLY_Q5_1",
        10 => "MOSTLY_Q2_K",
        11 => "MOSTLY_Q3_K_S",
        12 => "MOSTLY_Q3_K_M",
        13 => "MOSTLY_Q3_K_L",
        14 => "MOSTLY_Q4_K_S",
        15 => "MOSTLY_Q4_K_M",
        16 => "MOSTLY_Q5_K_S",
        17 => "MOSTLY_Q5_K_M",
        18 => "MOSTLY_Q6_K",
        19 => "MOSTLY_IQ2_XXS",
        20 => "MOSTLY_IQ2_XS",
        21 => "MOSTLY_Q2_K_S",
        22 => "MOSTLY_IQ3_XS",
        23 => "MOSTLY_IQ3_XXS",
        24 => "MOSTLY_IQ1_S",
        25 => "MOSTLY_IQ4_NL",
        26 => "MOSTLY_IQ3_S",
        27 => "MOSTLY_IQ3_M",
        28 => "MOSTLY_IQ2_S",
        29 => "MOSTLY_IQ2_M",
        30 => "MOSTLY_IQ4_XS",
        31 => "MOSTLY_IQ1_M",
        32 => "MOSTLY_BF16",
        33 => "MOSTLY_Q4_0_4_4",
        34 => "MOSTLY_Q4_0_4_8",
        35 => "MOSTLY_Q4_0_8_8",
        36 => "MOSTLY_TQ1_0",
        37 => "MOSTLY_TQ2_0",
        38 => "MOSTLY_MXFP4_MOE",
        39 => "MOSTLY_NVFP4",
        40 => "MOSTLY_Q1_0",
        GUESSED => "GUESSED",
        _ => return None,
    };
    Some(name.to_owned())
}

/// The layer stack a `blk.N.` tensor name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stack {
    /// `blk.N.` (decoder-only models, and T5-encoder-only files)
    Main,
    /// `enc.blk.N.` (T5 encoder)
    Encoder,
    /// `dec.blk.N.` (T5 decoder)
    Decoder,
    /// `v.blk.N.`, `a.blk.N.` (vision/audio towers of mmproj files)
    Tower,
}

/// Splits `[enc.|dec.|v.|a.]blk.N.rest` into its stack, N and `rest`.
pub(super) fn split_block(name: &str) -> Option<(Stack, u32, &str)> {
    let (stack, tail) = if let Some(t) = name.strip_prefix("blk.") {
        (Stack::Main, t)
    } else if let Some(t) = name.strip_prefix("enc.blk.") {
        (Stack::Encoder, t)
    } else if let Some(t) = name.strip_prefix("dec.blk.") {
        (Stack::Decoder, t)
    } else if let Some(t) = name
        .strip_prefix("v.blk.")
        .or_else(|| name.strip_prefix("a.blk."))
    {
        (Stack::Tower, t)
    } else {
        return None;
    };
    let (num, rest) = tail.split_once('.')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stack, num.parse().ok()?, rest))
}

/// The `blk.N` index of a tensor name (also `enc.blk.N`, `dec.blk.N`, `v.blk.N`, `a.blk.N`).
pub fn tensor_block(name: &str) -> Option<u32> {
    split_block(name).map(|(_, n, _)| n)
}

/// Which part of the model a llama.cpp tensor name belongs to (names from `TENSOR_NAMES` in
/// gguf-py `constants.py`, which mirrors llama.cpp's `src/llama-arch.cpp`). Rules, in order:
/// routed experts (`*_exps`, `*_chexps`) → experts; `ffn_gate_inp*`, `exp_probs_b` and
/// `altup_router` → router; token/position/type embeddings (and `token_embd_norm`, which
/// vramscope-core counts with the embedding) → embedding; `output`, `cls*`, `dense_2/3` → head;
/// any norm → norm; sequence mixers (`attn_*`, `cross_attn_*`, `ssm_*`, `time_mix_*`,
/// `shortconv`, MLA's `attn_q_a`/`attn_kv_a_mqa`/`attn_kv_b`, rope tables) → attention;
/// everything else (`ffn_*` incl. `*_shexp` shared experts, `channel_mix_*`, ...) → mlp.
pub fn tensor_component(name: &str) -> Component {
    let (in_block, base) = match split_block(name) {
        Some((_, _, rest)) => (true, rest),
        None => (false, name),
    };
    // Drop a trailing `.weight` / `.bias` / `.scale` (and the like) to get the tensor's stem.
    let stem = match base.rsplit_once('.') {
        Some((s, "weight" | "bias" | "scale" | "scales")) => s,
        _ => base,
    };
    let first = stem.split('.').next().unwrap_or(stem);
    if stem.contains("_exps") || stem.contains("_chexps") {
        return Component::Experts;
    }
    if first.starts_with("ffn_gate_inp") || first == "exp_probs_b" || first == "altup_router" {
        return Component::Router;
    }
    if !in_block {
        let top = stem.strip_prefix("v.").unwrap_or(stem);
        if (top.contains("embd") && !top.starts_with("output")) || stem == "token_types" {
            return Component::Embedding;
        }
        if stem == "output" || stem.starts_with("cls") || stem.starts_with("dense_") {
            return Component::Head;
        }
    }
    let is_norm = stem.contains("norm")
        || stem
            .split(['.', '_'])
            .any(|p| matches!(p, "ln" | "ln1" | "ln2" | "layernorm"));
    if is_norm {
        return Component::Norm;
    }
    let mixer = ["attn", "cross_attn", "vis_attn", "ssm", "time_mix", "rope"];
    if mixer.iter().any(|p| first.starts_with(p))
        || first == "shortconv"
        || first == "indexer"
        || stem.starts_with("attn.")
    {
        return Component::Attention;
    }
    Component::Mlp
}
