//! Layer index and component of a tensor from its Hugging Face checkpoint name.
//!
//! The rules mirror the names that `vramscope_core::inventory::build_inventory` emits for each
//! `Naming` (and the component it gives them), so that a model built from config.json and the
//! same model read from safetensors headers agree tensor by tensor. Names outside those families
//! get a best guess; nothing here fails.

use std::collections::BTreeMap;
use vramscope_core::{Component, Tensor};

/// Segments that start a layer stack when followed by a decimal index: `model.layers.N`
/// (Llama, NeoX, OPT), `transformer.h.N` (GPT-2, Falcon), `encoder.layer.N` (BERT),
/// `encoder.block.N` (T5), `blocks.N` (ViT-style towers).
const STACK_SEGMENTS: [&str; 5] = ["layers", "h", "layer", "block", "blocks"];

/// Output heads: causal LM (`lm_head`, NeoX `embed_out`), BERT MLM (`cls.predictions`), pooler,
/// task heads (`score`, `classifier`, `qa_outputs`) and DeepSeek-V3's MTP `shared_head`.
const HEAD_SEGMENTS: [&str; 8] = [
    "lm_head",
    "embed_out",
    "cls",
    "pooler",
    "score",
    "classifier",
    "qa_outputs",
    "shared_head",
];

/// Token/position/token-type embeddings and their norm/projections (`shared` is T5's table,
/// `project_in`/`project_out` OPT-350m's projections, `embeddings.LayerNorm` BERT's norm).
const EMBEDDING_SEGMENTS: [&str; 14] = [
    "embed_tokens",
    "wte",
    "wpe",
    "embed_in",
    "word_embeddings",
    "position_embeddings",
    "token_type_embeddings",
    "shared",
    "embed_positions",
    "project_in",
    "project_out",
    "embeddings",
    "layernorm_embedding",
    "embedding",
];

/// MoE routers: `mlp.gate` (Qwen-MoE, DeepSeek), `block_sparse_moe.gate` (Mixtral),
/// `mlp.router` (GPT-OSS), Qwen's `shared_expert_gate`.
const ROUTER_SEGMENTS: [&str; 3] = ["gate", "router", "shared_expert_gate"];

/// The stack a tensor's layer belongs to and its index there: for `encoder.block.3.layer.1.x`
/// this is `("encoder.block", 3)` (the leftmost `KEYWORD.N` pair wins, so T5's inner
/// `layer.1` is not taken for a layer).
pub fn stack_slot(name: &str) -> Option<(&str, u32)> {
    let mut pos = 0usize;
    let segs: Vec<&str> = name.split('.').collect();
    for w in 0..segs.len().saturating_sub(1) {
        let seg = segs[w];
        let next = segs[w + 1];
        pos += seg.len() + 1;
        if STACK_SEGMENTS.contains(&seg) && is_index(next) {
            if let Ok(i) = next.parse::<u32>() {
                return Some((&name[..pos - 1], i));
            }
        }
    }
    None
}

fn is_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Layer index within its stack (see [`stack_slot`]) and component of a tensor name.
///
/// For an encoder-decoder checkpoint the index is local to each stack; [`assign_layers`] turns it
/// into the global index the inventory builder uses (encoder layers first).
pub fn classify(name: &str) -> (Option<u32>, Component) {
    (stack_slot(name).map(|(_, i)| i), component(name))
}

/// The component of a tensor name. The order of the checks matters: head and embedding norms
/// (`cls.predictions.transform.LayerNorm`, `embeddings.LayerNorm`) belong to their part, not to
/// Norm; norms inside attention (`q_norm`, `attention.output.LayerNorm`) are Norm, as the
/// builder counts them.
pub fn component(name: &str) -> Component {
    let segs: Vec<&str> = name.split('.').collect();
    let has = |list: &[&str]| segs.iter().any(|s| list.contains(s));
    if has(&HEAD_SEGMENTS) {
        return Component::Head;
    }
    if has(&EMBEDDING_SEGMENTS) {
        return Component::Embedding;
    }
    if has(&["experts"]) {
        return Component::Experts;
    }
    // DeepSeek-V3 stores `mlp.gate.e_score_correction_bias` next to the gate weight.
    if has(&ROUTER_SEGMENTS) || segs.last() == Some(&"e_score_correction_bias") {
        return Component::Router;
    }
    // The module owning the parameter: `...input_layernorm.weight` → `input_layernorm`.
    let module = if segs.len() >= 2 {
        segs[segs.len() - 2]
    } else {
        segs[0]
    };
    if is_norm(module) {
        return Component::Norm;
    }
    let lower: Vec<String> = segs.iter().map(|s| s.to_ascii_lowercase()).collect();
    // `self_attn`, `attn`, `attention`, `self_attention`, T5's `SelfAttention` and
    // `EncDecAttention`, BART's `encoder_attn`, `cross_attn`.
    if lower
        .iter()
        .any(|s| s.contains("attn") || s.contains("attention"))
    {
        return Component::Attention;
    }
    if stack_slot(name).is_some() {
        // `mlp`, `intermediate.dense`, BERT's `output.dense`, `fc1`/`fc2`, `DenseReluDense`,
        // `shared_expert(s)`, and whatever else sits in a block.
        return Component::Mlp;
    }
    // Outside the stacks and unknown: guess from the words in the name.
    let joined = lower.join(".");
    if joined.contains("norm") {
        Component::Norm
    } else if joined.contains("embed") {
        Component::Embedding
    } else if joined.contains("head") {
        Component::Head
    } else if joined.contains("expert") {
        Component::Experts
    } else {
        Component::Mlp
    }
}

/// Whether a module name is a normalisation layer: `input_layernorm`, `ln_1`, `ln_f`, `norm`,
/// `final_layer_norm`, `LayerNorm`, `q_norm`, `kv_a_layernorm`, DeepSeek MTP's `enorm`, ...
fn is_norm(module: &str) -> bool {
    let m = module.to_ascii_lowercase();
    m.contains("norm") || m == "ln" || m.starts_with("ln_")
}

/// Sets every tensor's `layer` from its name as the inventory builder numbers layers: one stack
/// keeps its indices; with several stacks (T5's `encoder.block` and `decoder.block`, BART's
/// `model.encoder.layers` and `model.decoder.layers`) encoder stacks come first and each later
/// stack is shifted by the layers before it. A stack's size is its highest index + 1, which is
/// the number of blocks present when they are numbered 0..E-1 (and never makes two stacks
/// share an index when some are missing). Component is left as it is.
pub fn assign_layers(tensors: &mut [Tensor]) {
    let mut sizes: BTreeMap<(bool, String), u32> = BTreeMap::new();
    for t in tensors.iter() {
        if let Some((stack, i)) = stack_slot(&t.name) {
            let key = (!is_encoder_stack(stack), stack.to_string());
            let n = sizes.entry(key).or_insert(0);
            *n = (*n).max(i.saturating_add(1));
        }
    }
    let mut offsets: BTreeMap<String, u32> = BTreeMap::new();
    let mut next = 0u32;
    for ((_, stack), n) in &sizes {
        offsets.insert(stack.clone(), next);
        next = next.saturating_add(*n);
    }
    for t in tensors.iter_mut() {
        t.layer = stack_slot(&t.name).map(|(stack, i)| {
            let off = offsets.get(stack).copied().unwrap_or(0);
            off.saturating_add(i)
        });
    }
}

fn is_encoder_stack(stack: &str) -> bool {
    stack.split('.').any(|s| s.contains("encoder"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::{Component::*, DType};

    /// Names as each family's Hugging Face checkpoints spell them (and as the inventory builder
    /// emits them), with the layer and component expected, written out by hand.
    const CASES: &[(&str, Option<u32>, Component)] = &[
        // Llama / Mistral / Qwen3 / Gemma-2/3
        ("model.embed_tokens.weight", None, Embedding),
        ("model.layers.0.input_layernorm.weight", Some(0), Norm),
        ("model.layers.0.self_attn.q_proj.weight", Some(0), Attention),
        ("model.layers.0.self_attn.q_proj.bias", Some(0), Attention),
        ("model.layers.3.self_attn.k_proj.weight", Some(3), Attention),
        ("model.layers.3.self_attn.v_proj.weight", Some(3), Attention),
        ("model.layers.3.self_attn.o_proj.weight", Some(3), Attention),
        ("model.layers.3.self_attn.q_norm.weight", Some(3), Norm),
        ("model.layers.3.self_attn.k_norm.weight", Some(3), Norm),
        (
            "model.layers.12.post_attention_layernorm.weight",
            Some(12),
            Norm,
        ),
        (
            "model.layers.12.pre_feedforward_layernorm.weight",
            Some(12),
            Norm,
        ),
        (
            "model.layers.12.post_feedforward_layernorm.weight",
            Some(12),
            Norm,
        ),
        ("model.layers.1.mlp.gate_proj.weight", Some(1), Mlp),
        ("model.layers.1.mlp.up_proj.weight", Some(1), Mlp),
        ("model.layers.1.mlp.down_proj.weight", Some(1), Mlp),
        ("model.layers.1.mlp.c_fc.weight", Some(1), Mlp),
        ("model.layers.1.mlp.c_proj.bias", Some(1), Mlp),
        ("model.norm.weight", None, Norm),
        ("lm_head.weight", None, Head),
        ("lm_head.bias", None, Head),
        // bare base model (no `model.` prefix)
        ("layers.7.self_attn.o_proj.weight", Some(7), Attention),
        ("norm.weight", None, Norm),
        ("embed_tokens.weight", None, Embedding),
        // Mixtral
        (
            "model.layers.2.block_sparse_moe.gate.weight",
            Some(2),
            Router,
        ),
        (
            "model.layers.2.block_sparse_moe.experts.7.w1.weight",
            Some(2),
            Experts,
        ),
        (
            "model.layers.2.block_sparse_moe.experts.7.w2.weight",
            Some(2),
            Experts,
        ),
        (
            "model.layers.2.block_sparse_moe.experts.7.w3.weight",
            Some(2),
            Experts,
        ),
        // Qwen2-MoE
        ("model.layers.5.mlp.gate.weight", Some(5), Router),
        (
            "model.layers.5.mlp.experts.59.gate_proj.weight",
            Some(5),
            Experts,
        ),
        (
            "model.layers.5.mlp.experts.59.down_proj.weight",
            Some(5),
            Experts,
        ),
        (
            "model.layers.5.mlp.shared_expert.gate_proj.weight",
            Some(5),
            Mlp,
        ),
        (
            "model.layers.5.mlp.shared_expert.up_proj.weight",
            Some(5),
            Mlp,
        ),
        (
            "model.layers.5.mlp.shared_expert_gate.weight",
            Some(5),
            Router,
        ),
        // DeepSeek-V2/V3 (MLA)
        (
            "model.layers.4.self_attn.q_a_proj.weight",
            Some(4),
            Attention,
        ),
        (
            "model.layers.4.self_attn.q_a_layernorm.weight",
            Some(4),
            Norm,
        ),
        (
            "model.layers.4.self_attn.q_b_proj.weight",
            Some(4),
            Attention,
        ),
        (
            "model.layers.4.self_attn.kv_a_proj_with_mqa.weight",
            Some(4),
            Attention,
        ),
        (
            "model.layers.4.self_attn.kv_a_layernorm.weight",
            Some(4),
            Norm,
        ),
        (
            "model.layers.4.self_attn.kv_b_proj.weight",
            Some(4),
            Attention,
        ),
        (
            "model.layers.4.mlp.shared_experts.down_proj.weight",
            Some(4),
            Mlp,
        ),
        (
            "model.layers.4.mlp.gate.e_score_correction_bias",
            Some(4),
            Router,
        ),
        (
            "model.layers.4.mlp.experts.255.up_proj.weight",
            Some(4),
            Experts,
        ),
        // Phi-3
        (
            "model.layers.0.self_attn.qkv_proj.weight",
            Some(0),
            Attention,
        ),
        ("model.layers.0.mlp.gate_up_proj.weight", Some(0), Mlp),
        // GPT-2 / GPTBigCode
        ("transformer.wte.weight", None, Embedding),
        ("transformer.wpe.weight", None, Embedding),
        ("transformer.h.0.ln_1.weight", Some(0), Norm),
        ("transformer.h.0.ln_1.bias", Some(0), Norm),
        ("transformer.h.0.attn.c_attn.weight", Some(0), Attention),
        ("transformer.h.0.attn.c_proj.bias", Some(0), Attention),
        ("transformer.h.11.ln_2.weight", Some(11), Norm),
        ("transformer.h.11.mlp.c_fc.weight", Some(11), Mlp),
        ("transformer.h.11.mlp.c_proj.weight", Some(11), Mlp),
        ("transformer.ln_f.bias", None, Norm),
        // GPT-NeoX / Pythia
        ("gpt_neox.embed_in.weight", None, Embedding),
        (
            "gpt_neox.layers.0.attention.query_key_value.weight",
            Some(0),
            Attention,
        ),
        ("gpt_neox.layers.0.attention.dense.bias", Some(0), Attention),
        ("gpt_neox.layers.0.mlp.dense_h_to_4h.weight", Some(0), Mlp),
        ("gpt_neox.layers.0.mlp.dense_4h_to_h.bias", Some(0), Mlp),
        ("gpt_neox.final_layer_norm.weight", None, Norm),
        ("embed_out.weight", None, Head),
        // OPT
        ("model.decoder.embed_tokens.weight", None, Embedding),
        ("model.decoder.embed_positions.weight", None, Embedding),
        ("model.decoder.project_out.weight", None, Embedding),
        ("model.decoder.project_in.weight", None, Embedding),
        (
            "model.decoder.layers.3.self_attn.out_proj.bias",
            Some(3),
            Attention,
        ),
        (
            "model.decoder.layers.3.self_attn_layer_norm.weight",
            Some(3),
            Norm,
        ),
        ("model.decoder.layers.3.fc1.weight", Some(3), Mlp),
        ("model.decoder.layers.3.fc2.bias", Some(3), Mlp),
        (
            "model.decoder.layers.3.final_layer_norm.weight",
            Some(3),
            Norm,
        ),
        ("model.decoder.final_layer_norm.weight", None, Norm),
        // Falcon
        ("transformer.word_embeddings.weight", None, Embedding),
        ("transformer.h.2.ln_attn.weight", Some(2), Norm),
        ("transformer.h.2.ln_mlp.bias", Some(2), Norm),
        (
            "transformer.h.2.self_attention.query_key_value.weight",
            Some(2),
            Attention,
        ),
        (
            "transformer.h.2.self_attention.dense.weight",
            Some(2),
            Attention,
        ),
        ("transformer.h.2.mlp.dense_h_to_4h.weight", Some(2), Mlp),
        // BERT / RoBERTa
        ("bert.embeddings.word_embeddings.weight", None, Embedding),
        (
            "bert.embeddings.position_embeddings.weight",
            None,
            Embedding,
        ),
        (
            "bert.embeddings.token_type_embeddings.weight",
            None,
            Embedding,
        ),
        ("bert.embeddings.LayerNorm.weight", None, Embedding),
        ("bert.embeddings.LayerNorm.bias", None, Embedding),
        (
            "bert.encoder.layer.0.attention.self.query.weight",
            Some(0),
            Attention,
        ),
        (
            "bert.encoder.layer.0.attention.self.key.bias",
            Some(0),
            Attention,
        ),
        (
            "bert.encoder.layer.0.attention.self.value.weight",
            Some(0),
            Attention,
        ),
        (
            "bert.encoder.layer.0.attention.output.dense.weight",
            Some(0),
            Attention,
        ),
        (
            "bert.encoder.layer.0.attention.output.LayerNorm.weight",
            Some(0),
            Norm,
        ),
        (
            "bert.encoder.layer.0.intermediate.dense.weight",
            Some(0),
            Mlp,
        ),
        ("bert.encoder.layer.0.output.dense.weight", Some(0), Mlp),
        ("bert.encoder.layer.0.output.dense.bias", Some(0), Mlp),
        ("bert.encoder.layer.0.output.LayerNorm.bias", Some(0), Norm),
        ("bert.pooler.dense.weight", None, Head),
        ("pooler.dense.bias", None, Head),
        ("cls.predictions.transform.dense.weight", None, Head),
        ("cls.predictions.transform.LayerNorm.weight", None, Head),
        ("cls.predictions.decoder.weight", None, Head),
        ("cls.predictions.bias", None, Head),
        ("roberta.embeddings.LayerNorm.bias", None, Embedding),
        (
            "roberta.encoder.layer.11.output.dense.weight",
            Some(11),
            Mlp,
        ),
        ("lm_head.dense.weight", None, Head),
        ("lm_head.layer_norm.weight", None, Head),
        ("lm_head.decoder.weight", None, Head),
        // T5 (local indices; assign_layers shifts the decoder)
        ("shared.weight", None, Embedding),
        (
            "encoder.block.0.layer.0.SelfAttention.q.weight",
            Some(0),
            Attention,
        ),
        (
            "encoder.block.0.layer.0.SelfAttention.o.weight",
            Some(0),
            Attention,
        ),
        (
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            Some(0),
            Attention,
        ),
        ("encoder.block.0.layer.0.layer_norm.weight", Some(0), Norm),
        (
            "encoder.block.5.layer.1.DenseReluDense.wi.weight",
            Some(5),
            Mlp,
        ),
        (
            "encoder.block.5.layer.1.DenseReluDense.wi_0.weight",
            Some(5),
            Mlp,
        ),
        (
            "encoder.block.5.layer.1.DenseReluDense.wo.weight",
            Some(5),
            Mlp,
        ),
        ("encoder.block.5.layer.1.layer_norm.weight", Some(5), Norm),
        ("encoder.final_layer_norm.weight", None, Norm),
        (
            "decoder.block.1.layer.1.EncDecAttention.k.weight",
            Some(1),
            Attention,
        ),
        ("decoder.block.1.layer.1.layer_norm.weight", Some(1), Norm),
        (
            "decoder.block.1.layer.2.DenseReluDense.wi_1.weight",
            Some(1),
            Mlp,
        ),
        ("decoder.block.1.layer.2.layer_norm.weight", Some(1), Norm),
        ("decoder.final_layer_norm.weight", None, Norm),
    ];

    #[test]
    fn builder_names() {
        for &(name, layer, comp) in CASES {
            assert_eq!(classify(name), (layer, comp), "{name}");
        }
    }

    #[test]
    fn odd_names_do_not_panic() {
        for name in [
            "",
            ".",
            "..",
            "layers.",
            "layers.99999999999999999999.x",
            "h.0",
            "weight",
            "model.layers.-1.mlp.weight",
            "model.rotary_emb.inv_freq",
            "ünïcödé.layers.3.ß",
        ] {
            let _ = classify(name);
        }
        assert_eq!(classify("layers.99999999999999999999.mlp.w").0, None);
        assert_eq!(classify("model.layers.-1.mlp.weight").0, None);
        // Buffers some checkpoints carry (GPT-2's causal mask, old rotary tables): attention.
        assert_eq!(classify("h.0.attn.bias"), (Some(0), Attention));
        assert_eq!(
            classify("model.layers.0.self_attn.rotary_emb.inv_freq"),
            (Some(0), Attention)
        );
    }

    fn t(name: &str) -> Tensor {
        Tensor::new(name.into(), vec![2], DType::F32, None, Mlp).unwrap()
    }

    #[test]
    fn encoder_decoder_layers() {
        // Three encoder blocks (0..2), two decoder blocks: decoder block N is layer 3 + N. Names
        // are in header (alphabetical) order, decoder first, to check the order does not matter.
        let mut ts: Vec<Tensor> = [
            "decoder.block.0.layer.0.SelfAttention.q.weight",
            "decoder.block.1.layer.2.DenseReluDense.wo.weight",
            "decoder.final_layer_norm.weight",
            "encoder.block.0.layer.0.SelfAttention.q.weight",
            "encoder.block.1.layer.1.layer_norm.weight",
            "encoder.block.2.layer.1.DenseReluDense.wo.weight",
            "shared.weight",
        ]
        .iter()
        .map(|n| t(n))
        .collect();
        assign_layers(&mut ts);
        let layers: Vec<Option<u32>> = ts.iter().map(|t| t.layer).collect();
        assert_eq!(
            layers,
            [Some(3), Some(4), None, Some(0), Some(1), Some(2), None]
        );
    }

    #[test]
    fn stacks_are_ordered_encoder_first() {
        let mut ts = vec![
            t("model.decoder.layers.1.fc1.weight"),
            t("model.decoder.layers.0.fc1.weight"),
            t("bert.encoder.layer.4.output.dense.weight"),
        ];
        // Two different stacks: the encoder stack goes first (5 layers), the decoder after it.
        assign_layers(&mut ts);
        assert_eq!(ts[2].layer, Some(4));
        assert_eq!(ts[0].layer, Some(6));
        let mut one = vec![
            t("model.layers.1.mlp.up_proj.weight"),
            t("model.norm.weight"),
        ];
        assign_layers(&mut one);
        assert_eq!(one[0].layer, Some(1));
        assert_eq!(one[1].layer, None);
    }
}

/// Whether a checkpoint tensor is a persistent buffer rather than a parameter. transformers
/// saves some buffers with the weights; they occupy memory but are not parameters, so the
/// contract's `params_total` leaves them out: GPT-2's causal mask `attn.bias` and
/// `attn.masked_bias` (`modeling_gpt2.py`, `register_buffer`), rotary `inv_freq` in older Llama
/// checkpoints, BERT's `embeddings.position_ids`, and DeepSeek-V3's router
/// `e_score_correction_bias` (`modeling_deepseek_v3.py`, `DeepseekV3TopkRouter`).
pub fn is_buffer(name: &str) -> bool {
    name.ends_with(".attn.bias")
        || name == "attn.bias"
        || name.ends_with("attn.masked_bias")
        || name.ends_with("rotary_emb.inv_freq")
        || name.ends_with("embeddings.position_ids")
        || name.ends_with("e_score_correction_bias")
}

#[cfg(test)]
mod buffer_tests {
    use super::is_buffer;

    #[test]
    fn buffers_are_told_from_parameters() {
        for b in [
            "transformer.h.0.attn.bias",
            "h.11.attn.masked_bias",
            "model.layers.3.self_attn.rotary_emb.inv_freq",
            "bert.embeddings.position_ids",
            "model.layers.5.mlp.gate.e_score_correction_bias",
        ] {
            assert!(is_buffer(b), "{b}");
        }
        for p in [
            "transformer.h.0.attn.c_attn.bias",
            "transformer.h.0.attn.c_proj.bias",
            "model.layers.0.self_attn.q_proj.bias",
            "bert.embeddings.position_embeddings.weight",
            "model.layers.5.mlp.gate.weight",
        ] {
            assert!(!is_buffer(p), "{p}");
        }
    }
}
