//! The role a weight plays in the model as llama-quantize's per-tensor rules see it, read from a
//! GGUF name (as llama.cpp matches it) or a Hugging Face module name.

use crate::inventory::{Component, Tensor};

/// The role of a weight tensor in llama-quantize's rules (`tensor_category` in
/// llama-quant.cpp): which projection or table it is. Not the report's memory category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightRole {
    TokenEmbd,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl WeightRole {
    /// llama.cpp `category_is_attn_v`: V, fused QKV and MLA's `kv_b`.
    pub fn is_attn_v(self) -> bool {
        matches!(
            self,
            WeightRole::AttnV | WeightRole::AttnQkv | WeightRole::AttnKvB
        )
    }
}

fn is_gguf_name(name: &str) -> bool {
    name.starts_with("blk.") || name == "token_embd.weight" || name == "output.weight"
}

/// Maps a tensor to its llama.cpp role from a GGUF name (as llama.cpp matches it) or a
/// Hugging Face name (the module name inside its component).
pub fn role(t: &Tensor) -> WeightRole {
    let name = t.name.as_str();
    if is_gguf_name(name) || name.ends_with("token_embd.weight") {
        gguf_name_role(name)
    } else {
        hf_name_role(t)
    }
}

/// The role of a GGUF-named tensor, matched on substrings as llama.cpp does.
fn gguf_name_role(name: &str) -> WeightRole {
    use WeightRole::*;
    match name {
        "output.weight" => Output,
        n if n.ends_with("token_embd.weight") => TokenEmbd,
        n if n.contains("attn_qkv.weight") => AttnQkv,
        n if n.contains("attn_kv_b.weight") => AttnKvB,
        n if n.contains("attn_v.weight") => AttnV,
        n if n.contains("attn_k.weight") => AttnK,
        n if n.contains("attn_q.weight") => AttnQ,
        n if n.contains("attn_output.weight") => AttnOutput,
        n if n.contains("ffn_up") => FfnUp,
        n if n.contains("ffn_gate") => FfnGate,
        n if n.contains("ffn_down") => FfnDown,
        _ => Other,
    }
}

/// The role of a Hugging Face-named tensor: the module name inside its component.
fn hf_name_role(t: &Tensor) -> WeightRole {
    use WeightRole::*;
    let name = t.name.as_str();
    let base = name.strip_suffix(".weight").unwrap_or(name);
    let last = base.rsplit('.').next().unwrap_or(base);
    match t.component {
        Component::Embedding => match last {
            "embed_tokens" | "wte" | "word_embeddings" | "embed_in" | "shared" => TokenEmbd,
            _ => Other,
        },
        Component::Head => {
            if matches!(last, "lm_head" | "embed_out" | "output")
                || base.ends_with("predictions.decoder")
            {
                Output
            } else {
                Other
            }
        }
        Component::Attention => match last {
            "q_proj" | "query" | "q" => AttnQ,
            "k_proj" | "key" | "k" => AttnK,
            "v_proj" | "value" | "v" => AttnV,
            "qkv_proj" | "query_key_value" | "c_attn" | "Wqkv" | "qkv" => AttnQkv,
            "kv_b_proj" => AttnKvB,
            "o_proj" | "out_proj" | "dense" | "c_proj" | "o" => AttnOutput,
            _ => Other,
        },
        Component::Mlp | Component::Experts => match last {
            "gate_proj" | "w1" | "wi_0" => FfnGate,
            "up_proj" | "w3" | "wi_1" | "wi" | "c_fc" | "fc1" | "dense_h_to_4h"
            | "gate_up_proj" => FfnUp,
            "down_proj" | "w2" | "wo" | "c_proj" | "fc2" | "dense_4h_to_h" => FfnDown,
            "dense" if base.ends_with("intermediate.dense") => FfnUp,
            "dense" if base.ends_with("output.dense") => FfnDown,
            _ => Other,
        },
        _ => Other,
    }
}
