//! The Llama-shaped families, one row each: the class defaults of `configuration_<family>.py`
//! (transformers 5.x) and how its `modeling_<family>.py` departs from Llama.

pub(super) use super::family::{
    Biases, Defaults, Experts, Family, NormPlace, Sliding, DEEPSEEK_V3, LLAMA, LLAMA_DEFAULTS,
};
use vramscope_core::model::Naming;

/// Gemma's defaults shared by its generations (GemmaConfig and its successors): tied head,
/// head_dim 256, tanh-approximated GELU.
const GEMMA_DEFAULTS: Defaults = Defaults {
    arch: "GemmaForCausalLM",
    vocab: 256000,
    hidden: 3072,
    ffn: 24576,
    layers: 28,
    heads: 16,
    kv_heads: Some(16),
    head_dim: Some(256),
    max_pos: 8192,
    tied: true,
    activation: "gelu_pytorch_tanh",
    window: None,
    ffn_key: "intermediate_size",
};

/// The families, by `model_type`.
pub(super) const FAMILIES: &[Family] = &[
    LLAMA,
    Family {
        model_type: "mistral",
        defaults: Defaults {
            arch: "MistralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            // configuration_mistral.py: `sliding_window: int | None = 4096`.
            window: Some(4096),
            ..LLAMA_DEFAULTS
        },
        sliding: Sliding::All,
        ..LLAMA
    },
    Family {
        model_type: "mixtral",
        defaults: Defaults {
            arch: "MixtralForCausalLM",
            ffn: 14336,
            kv_heads: Some(8),
            max_pos: 4096 * 32,
            ..LLAMA_DEFAULTS
        },
        naming: Naming::Mixtral,
        sliding: Sliding::All,
        experts: Experts::Mixtral {
            experts: 8,
            top_k: 2,
            jitter: Some(("router_jitter_noise", 1)),
        },
        ..LLAMA
    },
    Family {
        model_type: "qwen2",
        defaults: Defaults {
            arch: "Qwen2ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            max_pos: 32768,
            window: Some(4096),
            ..LLAMA_DEFAULTS
        },
        biases: Biases::QwenQkv,
        sliding: Sliding::FromMaxWindowLayers,
        ..LLAMA
    },
    Family {
        model_type: "qwen2_moe",
        defaults: Defaults {
            arch: "Qwen2MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 5632,
            layers: 24,
            heads: 16,
            kv_heads: Some(16),
            max_pos: 32768,
            window: Some(4096),
            ..LLAMA_DEFAULTS
        },
        naming: Naming::QwenMoe,
        biases: Biases::QwenQkv,
        sliding: Sliding::EvenBelowMaxWithFlag,
        experts: Experts::Qwen {
            experts: 60,
            top_k: 4,
            expert_ffn: 1408,
            shared_ffn: Some(5632),
        },
        ..LLAMA
    },
    Family {
        model_type: "qwen3",
        defaults: Defaults {
            arch: "Qwen3ForCausalLM",
            vocab: 151936,
            ffn: 22016,
            head_dim: Some(128),
            max_pos: 32768,
            window: Some(4096),
            ..LLAMA_DEFAULTS
        },
        qk_norm: true,
        sliding: Sliding::FromMaxWindowLayers,
        ..LLAMA
    },
    Family {
        model_type: "qwen3_moe",
        defaults: Defaults {
            arch: "Qwen3MoeForCausalLM",
            vocab: 151936,
            hidden: 2048,
            ffn: 6144,
            layers: 24,
            heads: 32,
            kv_heads: Some(4),
            // Qwen3MoeConfig declares no `head_dim`: `Qwen3MoeAttention` takes hidden / heads.
            max_pos: 32768,
            window: Some(4096),
            ..LLAMA_DEFAULTS
        },
        naming: Naming::QwenMoe,
        qk_norm: true,
        sliding: Sliding::AllWithFlag,
        experts: Experts::Qwen {
            experts: 128,
            top_k: 8,
            expert_ffn: 768,
            shared_ffn: None,
        },
        ..LLAMA
    },
    Family {
        model_type: "gemma",
        defaults: GEMMA_DEFAULTS,
        ..LLAMA
    },
    Family {
        model_type: "gemma2",
        defaults: Defaults {
            arch: "Gemma2ForCausalLM",
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            window: Some(4096),
            ..GEMMA_DEFAULTS
        },
        norms: NormPlace::Sandwich,
        sliding: Sliding::EvenLayers,
        softcaps: true,
        ..LLAMA
    },
    Family {
        model_type: "gemma3_text",
        defaults: Defaults {
            arch: "Gemma3ForCausalLM",
            vocab: 262208,
            hidden: 2304,
            ffn: 9216,
            layers: 26,
            heads: 8,
            kv_heads: Some(4),
            max_pos: 131072,
            window: Some(4096),
            ..GEMMA_DEFAULTS
        },
        qk_norm: true,
        norms: NormPlace::Sandwich,
        sliding: Sliding::Pattern {
            key: Some("sliding_window_pattern"),
            period: 6,
        },
        ..LLAMA
    },
    Family {
        model_type: "phi3",
        defaults: Defaults {
            arch: "Phi3ForCausalLM",
            vocab: 32064,
            hidden: 3072,
            ffn: 8192,
            max_pos: 4096,
            ..LLAMA_DEFAULTS
        },
        naming: Naming::Phi3,
        sliding: Sliding::All,
        // modeling_phi3.py `resid_attn_dropout` / `resid_mlp_dropout`.
        residual_dropout: Some("resid_pdrop"),
        ..LLAMA
    },
    Family {
        model_type: "starcoder2",
        defaults: Defaults {
            arch: "Starcoder2ForCausalLM",
            vocab: 49152,
            hidden: 3072,
            ffn: 12288,
            layers: 30,
            heads: 24,
            kv_heads: Some(2),
            max_pos: 4096,
            tied: true,
            activation: "gelu_pytorch_tanh",
            ..LLAMA_DEFAULTS
        },
        biases: Biases::UseBias,
        layer_norm: true,
        plain_mlp: true,
        sliding: Sliding::All,
        // modeling_starcoder2.py: the embeddings and each block's attention and MLP outputs.
        embedding_dropout: Some("embedding_dropout"),
        residual_dropout: Some("residual_dropout"),
        ..LLAMA
    },
    Family {
        model_type: "deepseek_v2",
        defaults: Defaults {
            arch: "DeepseekV2ForCausalLM",
            vocab: 102400,
            // DeepseekV2Config: `num_hidden_layers` 32.
            layers: 32,
            kv_heads: Some(32),
            ..LLAMA_DEFAULTS
        },
        naming: Naming::DeepSeek,
        latent: true,
        // DeepseekV2Config: `n_routed_experts` 64, `n_shared_experts` 2,
        // `first_k_dense_replace` 0.
        experts: Experts::DeepSeek {
            expert_ffn: 1407,
            shared: 2,
            experts: Some(64),
            first_dense: 0,
        },
        ..LLAMA
    },
    DEEPSEEK_V3,
    Family {
        model_type: "gpt_oss",
        // configuration_gpt_oss.py (transformers 5.x) class defaults.
        defaults: Defaults {
            arch: "GptOssForCausalLM",
            vocab: 201088,
            hidden: 2880,
            ffn: 2880,
            layers: 36,
            heads: 64,
            kv_heads: Some(8),
            head_dim: Some(64),
            max_pos: 131072,
            window: Some(128),
            ..LLAMA_DEFAULTS
        },
        naming: Naming::GptOss,
        biases: Biases::KeysOn,
        // layer_types default: even layers "sliding_attention", odd "full_attention".
        sliding: Sliding::EvenLayers,
        experts: Experts::GptOss,
        sinks: true,
        ..LLAMA
    },
    super::new_families::OLMOE,
    super::new_families::PHIMOE,
    super::new_families::GLM4_MOE,
    super::new_families::LLAMA4_TEXT,
    super::new_families::KIMI_K2,
    super::season::SMOLLM3,
    super::season::OLMO2,
    super::season::OLMO3,
    super::season::EXAONE4,
    super::dsa::DEEPSEEK_V32,
    super::dsa::GLM_MOE_DSA,
];

/// The family row for a `model_type`; Llama's for any other (a generic Llama-style decoder).
pub(super) fn family(model_type: &str) -> &'static Family {
    FAMILIES
        .iter()
        .find(|f| f.model_type == model_type)
        .unwrap_or(&LLAMA)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf_config::SUPPORTED_TYPES;

    /// One row per family, each a supported type, Llama's row first; the row a model_type
    /// finds is its own.
    #[test]
    fn one_row_per_supported_family() {
        assert_eq!(FAMILIES[0].model_type, "llama");
        for (i, f) in FAMILIES.iter().enumerate() {
            assert!(SUPPORTED_TYPES.contains(&f.model_type), "{}", f.model_type);
            assert!(
                FAMILIES[..i].iter().all(|g| g.model_type != f.model_type),
                "{} twice",
                f.model_type
            );
            assert_eq!(family(f.model_type).model_type, f.model_type);
        }
        // An unknown type reads as Llama (the generic decoder).
        assert_eq!(family("generic").defaults.arch, "LlamaForCausalLM");
        assert_eq!(FAMILIES.len(), 26);
    }
}
