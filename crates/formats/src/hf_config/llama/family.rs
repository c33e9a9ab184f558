//! The row type of the Llama-shaped table ([`Family`], its [`Defaults`] and per-feature rules)
//! and the rows others start from (Llama's, DeepSeek-V3's): the leaf every family file imports.

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
