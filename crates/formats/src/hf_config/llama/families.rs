//! The Llama-shaped families, one row each: the class defaults of `configuration_<family>.py`
//! (transformers 5.x) and how its `modeling_<family>.py` departs from Llama.

use vramscope_core::model::Naming;

/// Class defaults of a Llama-shaped family (`configuration_<family>.py`, transformers 5.x): what
/// an absent key takes.
pub(super) struct Defaults {
    pub arch: &'static str,
    pub vocab: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub max_pos: u64,
    pub tied: bool,
    pub activation: &'static str,
    /// The class default of `sliding_window` (OLMo-3 and EXAONE-4: 4096), taken when the key is
    /// absent; `null` in the config turns the window off.
    pub window: Option<u64>,
    /// The key of the dense MLP's width: `intermediate_size`, or Llama 4's
    /// `intermediate_size_mlp` (its `intermediate_size` is the experts').
    pub ffn_key: &'static str,
}

/// Where a family's projection and MLP biases come from.
#[derive(Clone, Copy)]
pub(super) enum Biases {
    /// `attention_bias` on q/k/v/o and `mlp_bias` on the MLP, both off by default (LlamaConfig).
    Keys,
    /// Qwen2 hard-codes bias=True on q/k/v (modeling_qwen2.py `Qwen2Attention`); `qkv_bias`
    /// may turn it off; o and the MLP have none.
    QwenQkv,
    /// StarCoder2's `use_bias` (default true) on every projection and the MLP.
    UseBias,
    /// `attention_bias` on q/k/v/o, on by default (GptOssConfig `attention_bias = True`); the
    /// experts' biases are the family's own (`Experts::GptOss`).
    KeysOn,
    /// `attention_bias` on q/k/v only, o_proj without (modeling_glm4_moe.py `Glm4MoeAttention`).
    QkvKeys,
    /// `attention_bias` on q/k/v/o; the MLP hard-codes `bias=False` and ignores `mlp_bias`
    /// (modeling_olmo2.py `Olmo2MLP`, modeling_olmo3.py `Olmo3MLP`).
    AttentionKey,
    /// No bias anywhere, whatever the config says (modeling_exaone4.py `Exaone4Attention` and
    /// `Exaone4MLP` hard-code `bias=False`).
    Never,
}

/// Where a block's norms sit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum NormPlace {
    /// Before attention and before the MLP (Llama `input_layernorm`, `post_attention_layernorm`).
    Pre,
    /// Before and after both (Gemma-2/3: four norms).
    Sandwich,
    /// After attention and after the MLP only, on the sublayer's output before the residual add
    /// (OLMo-2/3 and EXAONE-4's `post_attention_layernorm`, `post_feedforward_layernorm`).
    Post,
}

/// Which layers use rotary positions, beyond the family's sliding rule.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Positions {
    /// Every layer (RoPE everywhere).
    Rope,
    /// SmolLM3 (`configuration_smollm3.py` `__post_init__`): `no_rope_layers[i]` 0 means NoPE
    /// (default: every `no_rope_layer_interval`-th layer, 4); NoPE layers slide their window
    /// when `use_sliding_window` and `sliding_window` are set.
    SmolLm3,
    /// EXAONE-4 (`modeling_exaone4.py` `Exaone4Attention.forward`): when `sliding_window` is set,
    /// the global (full-attention) layers skip RoPE.
    GlobalNope,
}

/// Which layers slide their attention window when the config sets `sliding_window` (and no
/// explicit `layer_types`).
#[derive(Clone, Copy)]
pub(super) enum Sliding {
    Never,
    /// Every layer (Mistral, Mixtral, Phi-3, StarCoder2).
    All,
    /// Even layers local, odd global (Gemma-2).
    EvenLayers,
    /// Every `period`-th layer global, the rest local: Gemma-3 reads the period from
    /// `sliding_window_pattern` (default 6), EXAONE-4 likewise (default 4, or a string such as
    /// `"LLLG"`), OLMo-3 has a fixed 4 (`configuration_olmo3.py` `__post_init__`).
    Pattern {
        key: Option<&'static str>,
        period: u64,
    },
    /// With `use_sliding_window`, the layers from `max_window_layers` on (Qwen2/3:
    /// `configuration_qwen2.py` `__post_init__`, `max_window_layers` default 28).
    FromMaxWindowLayers,
    /// With `use_sliding_window`, every layer (`configuration_qwen3_moe.py` keeps
    /// `sliding_window` only under the flag; `Qwen3MoeAttention` applies it on every layer).
    AllWithFlag,
    /// With `use_sliding_window`, the even layers below `max_window_layers` (default 28):
    /// `configuration_qwen2_moe.py` `__post_init__`, `bool((i + 1) % 2) and i <
    /// max_window_layers`.
    EvenBelowMaxWithFlag,
}

/// A family's experts and their class defaults.
#[derive(Clone, Copy)]
pub(super) enum Experts {
    Dense,
    /// Every layer MoE, no shared expert, experts `intermediate_size` wide (modeling_mixtral.py;
    /// also OLMoE's `OlmoeSparseMoeBlock` and Phi-3.5-MoE's `PhimoeSparseMoeBlock`), with the
    /// family's defaults of `num_local_experts`/`num_experts` and `num_experts_per_tok`.
    /// `jitter`: the key of the training-time input noise and how many times the block applies
    /// it (Mixtral `router_jitter_noise` once, Phi-3.5-MoE `input_jitter_noise` twice).
    Mixtral {
        experts: u64,
        top_k: u64,
        jitter: Option<(&'static str, u64)>,
    },
    /// Every `decoder_sparse_step`-th layer MoE except `mlp_only_layers`; `shared_ffn` is the
    /// default of `shared_expert_intermediate_size` where the family has a gated shared expert
    /// (Qwen2-MoE), `None` where it has none (Qwen3-MoE).
    Qwen {
        experts: u64,
        top_k: u64,
        expert_ffn: u64,
        shared_ffn: Option<u64>,
    },
    /// MoE from `first_k_dense_replace` on (default `first_dense`), every `moe_layer_freq`-th
    /// layer; `n_shared_experts` defaults to `shared` (modeling_deepseek_v3.py; GLM-4.5's
    /// modeling_glm4_moe.py). `experts`: the default of `n_routed_experts`, `None` where an
    /// absent key means a dense model.
    DeepSeek {
        expert_ffn: u64,
        shared: u64,
        experts: Option<u64>,
        first_dense: u64,
    },
    /// Every layer MoE (GptOssConfig: 128 experts, 4 per token, `intermediate_size` 2880), a
    /// router with a bias and experts with biases on both projections (`modeling_gpt_oss.py`
    /// `GptOssTopKRouter`, `GptOssExperts`).
    GptOss,
    /// Llama 4 (`Llama4TextMoe`): the layers of `moe_layers` (default every
    /// `interleave_moe_layer_step`-th) hold `num_local_experts` experts of `intermediate_size`
    /// and a shared expert of the same width; the rest a dense MLP of `intermediate_size_mlp`.
    Llama4,
}

/// One Llama-shaped family.
pub(super) struct Family {
    pub model_type: &'static str,
    pub defaults: Defaults,
    pub naming: Naming,
    pub biases: Biases,
    /// LayerNorm with bias instead of RMSNorm (StarCoder2, Phi-3.5-MoE).
    pub layer_norm: bool,
    /// A plain (ungated) MLP instead of a gated one (StarCoder2).
    pub plain_mlp: bool,
    /// RMSNorm on q and k over head_dim (Qwen3, Gemma-3).
    pub qk_norm: bool,
    /// The key that turns the q/k norms on (GLM-4.5 `use_qk_norm`, default off).
    pub qk_norm_key: Option<&'static str>,
    /// The q/k norms span the whole projection (OLMoE).
    pub qk_norm_whole: bool,
    /// The head's bias comes from `lm_head_bias` (Phi-3.5-MoE `PhimoeForCausalLM`).
    pub lm_head_bias: bool,
    /// Where the block's norms sit.
    pub norms: NormPlace,
    /// Which layers use rotary positions.
    pub positions: Positions,
    pub sliding: Sliding,
    /// Multi-head latent attention (DeepSeek-V2/V3).
    pub latent: bool,
    pub experts: Experts,
    /// The keys of the embedding and residual dropouts, where the family has them (attention
    /// dropout is every family's `attention_dropout`).
    pub embedding_dropout: Option<&'static str>,
    pub residual_dropout: Option<&'static str>,
    /// Attention and final-logit soft-capping on by default (Gemma2Config: 50.0 and 30.0).
    pub softcaps: bool,
    /// Learned per-head attention sinks (gpt-oss `self_attn.sinks`).
    pub sinks: bool,
}

/// LlamaConfig's defaults: every other row starts from them.
pub(super) const LLAMA_DEFAULTS: Defaults = Defaults {
    arch: "LlamaForCausalLM",
    vocab: 32000,
    hidden: 4096,
    ffn: 11008,
    layers: 32,
    heads: 32,
    kv_heads: None,
    head_dim: None,
    max_pos: 2048,
    tied: false,
    activation: "silu",
    window: None,
    ffn_key: "intermediate_size",
};

/// Llama itself; also the reading of a generic Llama-style decoder.
pub(super) const LLAMA: Family = Family {
    model_type: "llama",
    defaults: LLAMA_DEFAULTS,
    naming: Naming::Llama,
    biases: Biases::Keys,
    layer_norm: false,
    plain_mlp: false,
    qk_norm: false,
    qk_norm_key: None,
    qk_norm_whole: false,
    lm_head_bias: false,
    norms: NormPlace::Pre,
    positions: Positions::Rope,
    sliding: Sliding::Never,
    latent: false,
    experts: Experts::Dense,
    embedding_dropout: None,
    residual_dropout: None,
    softcaps: false,
    sinks: false,
};

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
/// DeepSeek-V3 (`DeepseekV3Config` defaults, multi-head latent attention, 1 shared expert);
/// Kimi-K2 reads as this row under its own `model_type` (`new_families.rs`).
pub(super) const DEEPSEEK_V3: Family = Family {
    model_type: "deepseek_v3",
    defaults: Defaults {
        arch: "DeepseekV3ForCausalLM",
        vocab: 129280,
        hidden: 7168,
        ffn: 18432,
        layers: 61,
        heads: 128,
        kv_heads: Some(128),
        max_pos: 4096,
        ..LLAMA_DEFAULTS
    },
    naming: Naming::DeepSeek,
    latent: true,
    // DeepseekV3Config: `n_routed_experts` 256, `n_shared_experts` 1, `first_k_dense_replace` 3.
    experts: Experts::DeepSeek {
        expert_ffn: 2048,
        shared: 1,
        experts: Some(256),
        first_dense: 3,
    },
    ..LLAMA
};

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
