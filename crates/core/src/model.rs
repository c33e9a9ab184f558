//! The model description (IR): what a transformer is made of, independent of the file it came
//! from. Loaders (config.json, presets) build a [`ModelSpec`]; [`crate::inventory`] turns it into
//! the exact list of parameter tensors, and the estimator reads its shapes.

pub mod norm;
pub mod shared_block;

pub use norm::{Norm, NormKind};
pub use shared_block::SharedBlock;

use crate::dtype::DType;
use serde::{Deserialize, Serialize};

/// How a family names its tensors in Hugging Face checkpoints. The inventory uses these names so
/// that a model built from config.json lines up tensor by tensor with its safetensors files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Naming {
    /// `model.layers.N.self_attn.q_proj` (Llama, Mistral, Qwen, Gemma, StarCoder2, ...).
    Llama,
    /// Llama names with Mixtral's `block_sparse_moe.experts.E.w1/w2/w3`.
    Mixtral,
    /// Llama names with Qwen's `mlp.experts.E.gate_proj` and `mlp.shared_expert`.
    QwenMoe,
    /// Llama names with DeepSeek's MLA projections and `mlp.shared_experts`.
    DeepSeek,
    /// Llama names with fused `qkv_proj` and `gate_up_proj` (Phi-3).
    Phi3,
    /// `transformer.h.N.attn.c_attn` with Conv1D (transposed) weights (GPT-2).
    Gpt2,
    /// GPT-2 names with Linear weights (GPTBigCode / StarCoder).
    BigCode,
    /// `gpt_neox.layers.N.attention.query_key_value` (Pythia, GPT-NeoX).
    NeoX,
    /// `model.decoder.layers.N.self_attn.q_proj`, `fc1`/`fc2` (OPT).
    Opt,
    /// `transformer.h.N.self_attention.query_key_value` (Falcon).
    Falcon,
    /// `bert.encoder.layer.N.attention.self.query` (BERT).
    Bert,
    /// BERT names under `roberta.` with RoBERTa's `lm_head` (RoBERTa).
    Roberta,
    /// `encoder.block.N.layer.0.SelfAttention.q` (T5).
    T5,
    /// Llama names with gpt-oss's `self_attn.sinks`, `mlp.router` and fused, transposed expert
    /// tensors `mlp.experts.gate_up_proj` `[E, hidden, 2·ffn]` / `down_proj` `[E, ffn, hidden]`
    /// with their biases (`modeling_gpt_oss.py`).
    GptOss,
    /// `backbone.layers.N.mixer.in_proj`, `backbone.embeddings`, `backbone.norm_f` (Mamba,
    /// Mamba2, FalconMamba: `modeling_mamba.py`, `modeling_mamba2.py`).
    Mamba,
    /// Llama names with Llama 4's `feed_forward` (`feed_forward.router`, fused
    /// `feed_forward.experts.gate_up_proj [E, hidden, 2·ffn]` / `down_proj [E, ffn, hidden]`,
    /// `feed_forward.shared_expert`; dense layers `feed_forward.gate_proj`)
    /// (`modeling_llama4.py`).
    Llama4,
    /// `model.layers.N.mamba.*` / `model.layers.N.self_attn.*`, `feed_forward` with a
    /// `router` and `experts.E.gate_proj`, `pre_ff_layernorm`, `model.final_layernorm` (Jamba:
    /// `modeling_jamba.py`, the names of ai21labs' published checkpoints).
    Jamba,
    /// Llama names with Granite's `block_sparse_moe.router.layer` `[E, hidden]`, fused expert
    /// tensors `block_sparse_moe.input_linear` `[E, 2·ffn, hidden]` / `output_linear` `[E,
    /// hidden, ffn]`, the always-on `shared_mlp.input_linear` / `output_linear`, and Mamba2
    /// mixers under `mamba` (the published Granite-MoE and Granite 4.0-H checkpoints;
    /// transformers 5.x renames the experts on load, `conversion_mapping.py` "granitemoe").
    Granite,
    /// LFM2 / LFM2-MoE (`modeling_lfm2.py`, `modeling_lfm2_moe.py`): `model.layers.N.conv.*`
    /// (the short convolution) or `.self_attn.*` with `out_proj` and `q_layernorm` /
    /// `k_layernorm`; `feed_forward.w1/w2/w3`, or `feed_forward.gate` with fused
    /// `feed_forward.experts.gate_up_proj [E, 2·ffn, hidden]` / `down_proj [E, hidden, ffn]`;
    /// `operator_norm`, `ffn_norm`; the final norm `model.embedding_norm`.
    Lfm2,
    /// Llama names with Qwen3.5's (`modeling_qwen3_5.py`, `modeling_qwen3_5_moe.py`): the
    /// gated DeltaNet's four input projections `linear_attn.in_proj_qkv` / `in_proj_z` /
    /// `in_proj_b` / `in_proj_a` (Qwen3-Next fuses them in two), `mlp.gate`, the fused experts
    /// `mlp.experts.gate_up_proj [E, 2·ffn, hidden]` / `down_proj [E, hidden, ffn]`
    /// (`Qwen3NextExperts`), `mlp.shared_expert` and `mlp.shared_expert_gate`. The forward
    /// follows the projections: no copies out of a fused projection
    /// (`Qwen3_5GatedDeltaNet.forward`).
    Qwen35,
    /// `backbone.layers.N.norm` and one `backbone.layers.N.mixer` per layer, whichever it is:
    /// Mamba2 (`mixer.in_proj`, ...), attention (`mixer.q_proj`, ...), a plain MLP
    /// (`mixer.up_proj`/`down_proj`) or MoE (`mixer.gate`, `mixer.experts.E.up_proj`,
    /// `mixer.shared_experts.*`, `mixer.fc1_latent_proj`); `backbone.embeddings`,
    /// `backbone.norm_f` (Nemotron-H: `modeling_nemotron_h.py` `NemotronHBlock`, the names of
    /// nvidia's published checkpoints).
    NemotronH,
    /// `model.layers.N.mamba.*` and `input_layernorm` on a Mamba layer; on a hybrid layer
    /// `model.layers.N.mamba_decoder.{mamba,input_layernorm}`, the per-layer `linear`, and the
    /// shared block under its first application `model.layers.N.shared_transformer.*`
    /// (`self_attn.{q,k,v,o}_proj`, `feed_forward.gate_up_proj` / `down_proj`, the adapters
    /// `*_adapter_list.V.{0,1}`, `input_layernorm`, `pre_ff_layernorm`);
    /// `model.final_layernorm` (Zamba2: `modeling_zamba2.py`).
    Zamba2,
    /// Llama names with Gemma 4's (`modeling_gemma4.py`, transformers 5.24): `self_attn.q_norm`
    /// and `k_norm` per head, no k/v projections on a kv-sharing layer, `per_layer_input_gate`
    /// / `per_layer_projection` / `post_per_layer_input_norm` per layer, the experts beside the
    /// dense `mlp` as `router.proj` (with `router.scale`, `router.per_expert_scale`) and packed
    /// `experts.gate_up_proj [E, 2·ffn, hidden]` / `down_proj [E, hidden, ffn]`, with their own
    /// `pre_feedforward_layernorm_2`, `post_feedforward_layernorm_1` / `_2`; the packed
    /// per-layer table `embed_tokens_per_layer`, `per_layer_model_projection` and
    /// `per_layer_projection_norm` beside the token embedding.
    Gemma4,
    /// Gemma 4's names (`Naming::Gemma4`, without experts) with Gemma 3n's own
    /// (`modeling_gemma3n.py`, transformers 5.24): per layer `altup.{correct_output_scale,
    /// correction_coefs, prediction_coefs, modality_router, router_norm}` and
    /// `laurel.{linear_left, linear_right, post_laurel_norm}`; beside the embeddings
    /// `altup_projections.J` and `altup_unembed_projections.J`.
    Gemma3n,
}

/// A whole model: embeddings, one or two stacks of layers, and the task head on top.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Display name (preset id, or the config's `_name_or_path`, or the file name).
    pub name: String,
    /// The config's `model_type` (`llama`, `gpt2`, ...).
    pub model_type: String,
    /// The model class counted (`LlamaForCausalLM`, `BertModel`, ...).
    pub architecture: String,
    /// How tensors are named in this family's checkpoints.
    pub naming: Naming,
    /// Storage dtype of the weights as distributed (`torch_dtype` / `dtype`).
    pub dtype: DType,
    pub vocab_size: u64,
    /// Model width (`hidden_size`, `n_embd`, `d_model`).
    pub hidden_size: u64,
    /// Longest sequence the model is configured for (`max_position_embeddings`, `n_positions`).
    pub max_position_embeddings: Option<u64>,
    pub embedding: Embedding,
    /// Encoder stack of an encoder-decoder model (T5); `None` otherwise.
    pub encoder: Option<Stack>,
    /// The main stack: decoder layers, or the encoder of an encoder-only model (BERT).
    pub decoder: Stack,
    pub head: Head,
    /// Dropout probabilities in training (the config's values; 0 where the family has none).
    #[serde(default)]
    pub dropout: Dropout,
    /// The weight format the checkpoint is published in, from config.json's
    /// `quantization_config` (a `weights` value: `nf4-dq`, `gptq:4:g128`, `fp8:b128`, ...).
    #[serde(default)]
    pub quantization: Option<String>,
    /// Gemma-2's `tanh` soft-capping of attention scores and final logits.
    #[serde(default)]
    pub softcapping: Softcapping,
    /// A vision-language model's vision tower, projector and image-token rule; `None` for a
    /// text-only model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<crate::vision::Vision>,
    /// Gemma 3n's decoder additions ([`Gemma3nParts`]); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemma3n: Option<Gemma3nParts>,
    /// Parameters the model loads but no modelled forward runs, as (checkpoint name, shape):
    /// Gemma 3n's vision and audio towers (`Gemma3nModel.forward` without `pixel_values` or
    /// `input_features`; image jobs are refused), Gemma 4 E2B / E4B's audio tower and
    /// `embed_audio` (`Gemma4Model.forward` runs them only on `input_features`, and the job has
    /// no audio input). Each is a resident weight that never gets a gradient, so no optimizer
    /// state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle_tensors: Vec<(String, Vec<u64>)>,
}

/// What Gemma 3n's decoder adds to Gemma 4's (`modeling_gemma3n.py`, transformers 5.24):
/// `altup_num_inputs` copies of the residual stream (`Gemma3nTextModel.forward` stacks the
/// embedding with `altup_projections` of it; every `Gemma3nTextDecoderLayer` predicts all
/// streams from each other (`Gemma3nTextAltUp.predict`), runs attention and the MLP on the
/// active one, corrects every stream with the result (`correct`) and adds the per-layer input
/// branch to the others; the streams are projected back and averaged before the final norm),
/// and the low-rank residual `Gemma3nTextLaurelBlock` beside attention (the Gaussian top-k on
/// the first layers' MLP gate is [`DenseMlp::gaussian_topk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gemma3nParts {
    /// `altup_num_inputs`: the residual streams (4 in the published models).
    pub altup_inputs: u64,
    /// `laurel_rank`: the width of `Gemma3nTextLaurelBlock`'s two projections.
    pub laurel_rank: u64,
    /// `altup_correct_scale`: the active stream is scaled by `correct_output_scale` before
    /// the per-layer input gate.
    pub correct_scale: bool,
    /// The conditional-generation model's (`gemma3n`) two `Gemma3nMultimodalEmbedder`s,
    /// `embed_vision` then `embed_audio`; `None` for the text model (`gemma3n_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedders: Option<[MultimodalEmbedder; 2]>,
}

/// A `Gemma3nMultimodalEmbedder` (`modeling_gemma3n.py`, transformers 5.24): `embedding
/// [vocab, width]`, `hard_embedding_norm` and `soft_embedding_norm [width]`,
/// `embedding_projection [hidden, width]`, a weightless post-projection norm.
/// `Gemma3nModel.forward` runs both embedders on every forward from `input_ids` (the
/// non-multimodal positions replaced by a dummy id) and merges them with `torch.where`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultimodalEmbedder {
    /// The tower config's `hidden_size` (vision 2048, audio 1536).
    pub width: u64,
    /// The tower config's `vocab_size` (128).
    pub vocab: u64,
}

/// `cap · tanh(x / cap)` on the attention scores (`attn_logit_softcapping`) and on the final
/// logits (`final_logit_softcapping`), as Gemma-2 applies them (`modeling_gemma2.py`): each
/// keeps its `tanh` output for backward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Softcapping {
    pub attention: Option<f64>,
    pub final_logits: Option<f64>,
}

/// Dropout probabilities as the config sets them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Dropout {
    /// After the embeddings (GPT-2 `embd_pdrop`, BERT `hidden_dropout_prob`).
    pub embedding: f64,
    /// On the attention probabilities (`attn_pdrop`, `attention_probs_dropout_prob`,
    /// `attention_dropout`).
    pub attention: f64,
    /// On the attention and MLP outputs before the residual add (`resid_pdrop`,
    /// `hidden_dropout_prob`, `hidden_dropout`, OPT/T5 `dropout`).
    pub hidden: f64,
}

/// Token, position and token-type embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// Width of the token embedding (differs from `hidden_size` only with a projection, as in
    /// OPT-350m's `word_embed_proj_dim`).
    pub dim: u64,
    pub positions: Positions,
    /// Token-type (segment) embedding rows (BERT `type_vocab_size`); 0 when absent.
    pub token_types: u64,
    /// LayerNorm applied to the embedding sum (BERT, RoBERTa).
    pub norm: Option<Norm>,
    /// Projections between `dim` and `hidden_size` (OPT `project_in`/`project_out`).
    pub projection: bool,
    /// Per-layer input embeddings (Gemma 4's PLE); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_layer_inputs: Option<PerLayerInputs>,
}

impl Embedding {
    /// A bare token table `dim` wide with `positions`: no token types, no norm over the sum,
    /// no projection, no per-layer inputs — `nn.Embedding(vocab_size, hidden_size)` alone, as
    /// transformers' `LlamaModel.__init__` (`modeling_llama.py`) builds `embed_tokens`.
    pub fn plain(dim: u64, positions: Positions) -> Self {
        Embedding {
            dim,
            positions,
            token_types: 0,
            norm: None,
            projection: false,
            per_layer_inputs: None,
        }
    }
}

/// Gemma 4's per-layer inputs (`modeling_gemma4.py` `Gemma4TextModel.__init__`,
/// `get_per_layer_inputs`, `project_per_layer_inputs`; `Gemma4TextDecoderLayer.forward`): a
/// second token table `embed_tokens_per_layer [vocab, layers · width]` and a projection of the
/// token embedding `per_layer_model_projection [layers · width, hidden]` normed per layer
/// (`per_layer_projection_norm [width]`), summed into one `[b, s, layers, width]` tensor of
/// which layer `i` reads slice `i`: through `per_layer_input_gate [width, hidden]`, the
/// activation, the product with its slice, `per_layer_projection [hidden, width]` and
/// `post_per_layer_input_norm [hidden]`, added to the residual at the end of the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerLayerInputs {
    /// `hidden_size_per_layer_input`.
    pub width: u64,
    /// `vocab_size_per_layer_input`: rows of the per-layer table.
    pub vocab: u64,
}

/// How positions enter the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Positions {
    /// A learned table of `rows` positions (GPT-2, BERT, OPT: OPT adds an offset of 2 rows).
    Learned { rows: u64 },
    /// Rotary embeddings: no parameters.
    Rotary { theta: Option<f64> },
    /// T5's relative-position buckets: one `buckets × heads` table in the first layer of each
    /// stack.
    Relative { buckets: u64 },
    /// ALiBi or nothing at all: no parameters.
    None,
}

/// A stack of layers and the norm after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    pub layers: Vec<Layer>,
    pub final_norm: Option<Norm>,
}

/// One transformer block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub attention: Attention,
    /// Cross-attention over the encoder output (T5 decoder).
    pub cross_attention: Option<Attention>,
    pub mlp: Mlp,
    /// The norms of this block, in the order they apply.
    pub norms: Vec<(NormSlot, Norm)>,
    /// Attention and MLP read the same input (GPT-NeoX, Falcon, GPT-J).
    pub parallel_residual: bool,
    /// A state-space mixer run beside `attention` on the same normed input, the two outputs
    /// summed before the residual add (Falcon-H1's parallel hybrid layer); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_ssm: Option<ParallelSsm>,
    /// A shared transformer block applied before the layer's mixer (Zamba2's hybrid layers,
    /// [`SharedBlock`]); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_block: Option<Box<SharedBlock>>,
    /// Routed experts run beside the dense `mlp` on the same residual, each branch with its
    /// own norms, the two outputs summed (Gemma 4's `enable_moe_block`,
    /// `modeling_gemma4.py` `Gemma4TextDecoderLayer.forward`); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts_beside: Option<MoeMlp>,
}

impl Layer {
    /// A sequential pre- or post-norm block (`attention`, then `mlp`, with `norms`): no
    /// cross-attention, no parallel residual, no state-space mixer beside attention, as
    /// transformers' `LlamaDecoderLayer` (`modeling_llama.py`); readers amend the rest.
    pub fn new(attention: Attention, mlp: Mlp, norms: Vec<(NormSlot, Norm)>) -> Self {
        Layer {
            attention,
            cross_attention: None,
            mlp,
            norms,
            parallel_residual: false,
            parallel_ssm: None,
            shared_block: None,
            experts_beside: None,
        }
    }

    /// The layer's state-space mixers: the one standing in attention's place (Mamba, Jamba's
    /// Mamba layers) and the one running beside attention (Falcon-H1).
    pub fn ssm_mixers(&self) -> impl Iterator<Item = &Ssm> {
        self.attention
            .kind
            .state_space()
            .into_iter()
            .chain(self.parallel_ssm.as_ref().map(|p| &p.ssm))
    }

    /// The layer's routed experts: its MLP when that is a mixture of experts, or the experts
    /// beside a dense MLP ([`Layer::experts_beside`], Gemma 4).
    pub fn routed_experts(&self) -> Option<&MoeMlp> {
        match &self.mlp {
            Mlp::Moe(m) => Some(m),
            Mlp::Dense(_) | Mlp::None => self.experts_beside.as_ref(),
        }
    }

    /// Whether the layer holds a recurrent state per sequence.
    pub fn holds_state(&self) -> bool {
        self.ssm_mixers().next().is_some()
    }
}

/// Falcon-H1's Mamba2 mixer beside attention (Zuo et al. 2025, "Falcon-H1", §2.1 parallel
/// hybrid design; transformers 5.x `modeling_falcon_h1.py` `FalconH1DecoderLayer.forward`:
/// `mamba(h) · ssm_out_multiplier + self_attn(h · attention_in_multiplier) ·
/// attention_out_multiplier`, `FalconH1Mixer`). The muP multipliers scale activations only;
/// `mup_vector` is a non-persistent buffer, no parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelSsm {
    /// The mixer's shapes: `version` Mamba2, `d_inner` = `mamba_d_ssm` (or `mamba_expand ·
    /// hidden_size`), `proj_bias` = `mamba_proj_bias` (on `in_proj` only).
    pub ssm: Ssm,
    /// `projectors_bias`: `out_proj` carries a bias.
    pub out_bias: bool,
    /// `mamba_rms_norm`: a gated RMSNorm (`norm [d_inner]`, per group) before `out_proj`;
    /// otherwise the scan output is gated by `silu(z)` with no norm.
    pub gated_norm: bool,
    /// `mamba_norm_before_gate` (with `gated_norm`): normalise, then gate; else gate first.
    pub norm_before_gate: bool,
    /// `mamba_chunk_size`: the chunk length of the SSD's torch path (`mamba2_chunk_scan`).
    pub chunk: u64,
}

/// Where a norm sits inside a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormSlot {
    /// Before self-attention (pre-norm models).
    PreAttention,
    /// After self-attention, before the residual add (post-norm BERT; Gemma-2/3's extra norm).
    PostAttention,
    /// Before cross-attention (T5 decoder).
    PreCrossAttention,
    /// Before the MLP.
    PreMlp,
    /// After the MLP (post-norm BERT; Gemma-2/3).
    PostMlp,
}

/// An attention block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub kind: AttentionKind,
    /// Which projections carry a bias.
    pub bias: ProjBias,
    /// Per-head norms of queries and keys (Qwen3, Gemma-3, OLMo-2): one `head_dim` norm each.
    pub qk_norm: Option<Norm>,
    /// Sliding-window size when this layer attends locally (Mistral, Gemma-2/3 local layers).
    pub sliding_window: Option<u64>,
    /// T5 relative-position bias table held by this layer (`buckets`), first layer only.
    pub relative_bias_buckets: Option<u64>,
    /// Learned per-head sink logits (gpt-oss `self_attn.sinks`, `[heads]`): one extra column
    /// in each softmax row that takes probability mass and is dropped before `@ V`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sinks: bool,
    /// The q/k norms span the whole projection, not one head (OLMoE `modeling_olmoe.py`
    /// `OlmoeAttention`: `q_norm` over `heads · head_dim`, `k_norm` over `kv_heads · head_dim`);
    /// `qk_norm` then gives their kind and its `dim` is unused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_norm_whole: bool,
    /// A weightless L2 norm on q and k per head (Llama 4 `Llama4TextL2Norm`, on its RoPE layers
    /// when `use_qk_norm`): no parameters, activations only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_l2_norm: bool,
    /// Chunked attention (Llama 4 `attention_chunk_size` on its RoPE layers): each token attends
    /// within its chunk only; the cache keeps at most this many tokens per sequence, as
    /// transformers' `cache_utils.py` builds a `DynamicSlidingWindowLayer` of
    /// `attention_chunk_size` for a `"chunked_attention"` layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk: Option<u64>,
    /// No rotary embedding on this layer although the model's positions are rotary (Llama 4's
    /// NoPE layers, `no_rope_layers[i] == 0`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub nope: bool,
    /// The layer attends to the images instead of the text (Llama-3.2-Vision's
    /// `MllamaCrossAttentionDecoderLayer`, `modeling_mllama.py`): queries from the text, keys
    /// and values from the projected vision states, `q_norm`/`k_norm` per head, no rotary, and
    /// the tanh gates `cross_attn_attn_gate` / `cross_attn_mlp_gate` on its two branches. Its
    /// cache holds the vision tokens, once per image, not the text.
    #[serde(default, skip_serializing_if = "is_false")]
    pub vision_cross: bool,
    /// A sigmoid output gate per attention channel (Qwen3-Next `Qwen3NextAttention`,
    /// `modeling_qwen3_next.py`): `q_proj` is twice as wide (`[q | gate]` per head) and the
    /// attention output is multiplied by `sigmoid(gate)` before `o_proj`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub output_gate: bool,
    /// The layer reuses the keys and values of the last earlier layer of its type that makes
    /// its own: no k/v projections or norms, nothing cached, its attention reads tensors the
    /// earlier layer already holds (Gemma 4's `num_kv_shared_layers`,
    /// `modeling_gemma4.py` `Gemma4TextAttention`, `is_kv_shared_layer`; `cache_utils.py`
    /// makes it a `DummyLayer`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub kv_shared: bool,
    /// No value projection: the values are the key projection's output, normed apart from the
    /// keys (Gemma 4's `attention_k_eq_v` on full layers, `Gemma4TextAttention.forward`:
    /// `value_states = key_states` before `k_norm`, then `v_norm`). The cache still holds
    /// keys and values as two tensors.
    #[serde(default, skip_serializing_if = "is_false")]
    pub values_from_keys: bool,
}

impl Attention {
    /// A block without a token mixer (Nemotron-H's MLP and MoE layers, `modeling_nemotron_h.py`
    /// `NemotronHBlock`: one mixer per layer) carries a standard attention of zero heads: no
    /// tensors, no cache, no activations.
    pub fn is_absent(&self) -> bool {
        matches!(self.kind, AttentionKind::Standard { heads: 0, .. })
    }

    /// An attention block of `kind` with `bias` and none of the per-family extras (no q/k norm,
    /// window, relative bias, sinks, chunking, NoPE, cross-attention or output gate): the
    /// block of transformers' `LlamaAttention` (`modeling_llama.py`), which the families'
    /// readers then amend field by field, so a new field is one edit here.
    pub fn new(kind: AttentionKind, bias: ProjBias) -> Self {
        Attention {
            kind,
            bias,
            qk_norm: None,
            sliding_window: None,
            relative_bias_buckets: None,
            sinks: false,
            qk_norm_whole: false,
            qk_l2_norm: false,
            attention_chunk: None,
            nope: false,
            vision_cross: false,
            output_gate: false,
            kv_shared: false,
            values_from_keys: false,
        }
    }

    /// Tokens of one sequence this layer's KV cache holds for a context of `tokens`: all of
    /// them, or at most the sliding window (or attention chunk) when the layer has one; none
    /// when it reuses another layer's keys and values ([`Attention::kv_shared`]).
    pub fn kv_held(&self, tokens: u64) -> u64 {
        if self.kv_shared {
            return 0;
        }
        self.kv_window().map_or(tokens, |n| n.min(tokens))
    }

    /// Tokens of one sequence this layer's cache holds right after one `update` of `tokens`
    /// new ones onto an empty cache (an HF `generate` prefill of a `tokens`-long prompt): all
    /// of them, the window too — transformers 5.24's `DynamicSlidingWindowLayer.update`
    /// (`cache_utils.py`, also built for `"chunked_attention"` layers) keeps
    /// `full_key_states[:, :, -sliding_window + 1:, :]`, a view that holds the whole
    /// `torch.cat` of the prompt until the layer's next `update` replaces it (measured:
    /// `validation/cpu-measured-generate-swa.json`). None when the layer reuses another's.
    pub fn kv_held_after_prefill(&self, tokens: u64) -> u64 {
        if self.kv_shared {
            0
        } else {
            tokens
        }
    }

    /// The window the layer's dynamic cache keeps after a decode step: `sliding_window`, or
    /// `attention_chunk_size` on a chunked layer (`cache_utils.py`
    /// `get_layer_types_and_kwargs`); `None` on a full-attention layer.
    pub fn kv_window(&self) -> Option<u64> {
        self.sliding_window.or(self.attention_chunk)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The attention variant and its shapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttentionKind {
    /// Multi-head, grouped-query or multi-query attention (MHA when `kv_heads == heads`, MQA when
    /// `kv_heads == 1`).
    Standard {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through
    /// low-rank latents; the KV cache holds `kv_lora_rank + qk_rope_head_dim` per token.
    Latent {
        heads: u64,
        /// `None`: queries are projected directly (DeepSeek-V2-Lite).
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
        /// DeepSeek Sparse Attention's lightning indexer on this layer (DeepSeek-V3.2, GLM-5):
        /// `None` for plain MLA (DeepSeek-V2/V3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        indexer: Option<Indexer>,
    },
    /// No softmax attention: a state-space token mixer (Mamba's selective scan, Mamba2's SSD)
    /// in its place. Its cache is a recurrent state per sequence, constant in context length,
    /// not K/V per token; `heads`/`kv_heads` and the head dims read 0.
    StateSpace(Ssm),
}

/// DeepSeek Sparse Attention's lightning indexer (`modeling_deepseek_v32.py`
/// `DeepseekV32Indexer`, transformers 5.24): per layer, `wq_b [heads · head_dim, q_lora_rank]`
/// reading the MLA query latent, `wk [head_dim, hidden]`, a LayerNorm `k_norm [head_dim]` with
/// bias, and `weights_proj [heads, hidden]`. Under `torch.no_grad` it scores every query against
/// every cached indexer key (fp32 `[b, s, heads, t]`) and keeps the `topk` best keys, which
/// become a sparse mask on the MLA attention. Its cache holds one `head_dim` key per token
/// (`cache_utils.py` `DynamicIndexedLayer.indexer_keys [b, t, head_dim]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Indexer {
    pub heads: u64,
    pub head_dim: u64,
    pub topk: u64,
    /// GLM-5's `"shared"` layers (`modeling_glm_moe_dsa.py` `GlmMoeDsaAttention`,
    /// `indexer_types[i] == "shared"`): no indexer of their own, no indexer keys cached; they
    /// reuse the previous full layer's top-k and still build the sparse mask from it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared: bool,
}

impl Indexer {
    /// Whether this layer runs its own indexer (holds its weights and caches its keys).
    pub fn own(&self) -> bool {
        !self.shared
    }
}

/// Which state-space mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SsmVersion {
    /// Mamba (Gu & Dao 2023, Alg. 2): per-channel selective scan; `A_log [d_inner, d_state]`,
    /// `x_proj` to Δ (rank `dt_rank`), B and C; `dt_proj` back to `d_inner`
    /// (`modeling_mamba.py` MambaMixer).
    Mamba1,
    /// FalconMamba: Mamba with weightless RMS norms on B, C and Δ
    /// (`modeling_falcon_mamba.py` `rms_forward`): Mamba1's shapes.
    FalconMamba,
    /// Mamba2 (Dao & Gu 2024, "Transformers are SSMs", §7 SSD): scalar `A` per head, B and C
    /// per group straight out of `in_proj`, a gated RMSNorm before `out_proj`
    /// (`modeling_mamba2.py` Mamba2Mixer).
    Mamba2,
    /// Jamba's Mamba mixer (Lieber et al. 2024, "Jamba", §3; `modeling_jamba.py`
    /// `JambaMambaMixer`): Mamba1's shapes plus RMSNorms with weights on Δ (`dt_layernorm
    /// [dt_rank]`), B and C (`b_layernorm`, `c_layernorm` `[d_state]`) between `x_proj` and
    /// the scan.
    Jamba,
    /// Qwen3-Next's gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks",
    /// eq. 10; `modeling_qwen3_next.py` `Qwen3NextGatedDeltaNet`): a linear-attention mixer
    /// whose state is a `d_k × d_v` matrix per value head. Fields read: `heads` value heads
    /// (`linear_num_value_heads`), `groups` key heads (`linear_num_key_heads`), `d_state` the
    /// key head width, `d_inner = heads · v_head_dim`, `d_conv` the conv kernel.
    GatedDeltaNet,
    /// LFM2's gated short convolution (`modeling_lfm2.py` `Lfm2ShortConv`): `in_proj` to B, C
    /// and x (`3 · hidden`), `y = C · conv(B · x)` with a depthwise causal `conv [hidden, 1,
    /// conv_L_cache]`, then `out_proj`; `conv_bias` on all three. No scan: `d_inner =
    /// hidden`, `d_conv = conv_L_cache`, `d_state`, `heads`, `groups` 0, so the recurrent
    /// state is the conv window alone.
    ShortConv,
}

/// A state-space mixer's shapes, as transformers' mixers build them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ssm {
    pub version: SsmVersion,
    /// Inner width (`intermediate_size` = `expand · hidden_size`).
    pub d_inner: u64,
    /// State size per channel (Mamba) or per head dimension (Mamba2) (`state_size`).
    pub d_state: u64,
    /// Depthwise causal convolution width (`conv_kernel`).
    pub d_conv: u64,
    /// Mamba1: rank of Δ's projection (`time_step_rank`); Mamba2: 0.
    pub dt_rank: u64,
    /// Mamba2: heads (`num_heads`, each `head_dim = d_inner / heads` wide); Mamba1: 0.
    pub heads: u64,
    /// Mamba2: B/C groups (`n_groups`); Mamba1: 0.
    pub groups: u64,
    /// The convolution carries a bias (`use_conv_bias`).
    pub conv_bias: bool,
    /// `in_proj` / `out_proj` carry biases (`use_bias`).
    pub proj_bias: bool,
    /// The cached SSM state is fp32 whatever the compute dtype (Nemotron-H
    /// `mamba_ssm_cache_dtype`, default `"float32"`, which vLLM honours; transformers' torch
    /// path returns `mamba2_chunk_scan`'s final state in fp32 too, `hidden_states.float()`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub state_fp32: bool,
    /// Mamba2's chunk length on transformers' torch SSD path (`chunk_size` /
    /// `mamba_chunk_size`, `mamba2_chunk_scan`) where the reader keeps it for the layer
    /// (Bamba, Granite 4.0-H, Nemotron-H); 0 where the torch path is not modelled per layer
    /// (Falcon-H1 keeps it in [`ParallelSsm::chunk`]; the fused kernel's estimate elsewhere).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk: u64,
}

impl Ssm {
    /// Channels the depthwise convolution runs over: `d_inner` (Mamba1), `d_inner + 2 ·
    /// groups · d_state` (Mamba2: x, B and C go through it together).
    pub fn conv_dim(&self) -> u64 {
        match self.version {
            SsmVersion::Mamba2 | SsmVersion::GatedDeltaNet => {
                self.d_inner + 2 * self.groups * self.d_state
            }
            _ => self.d_inner,
        }
    }

    /// Bytes of recurrent state one sequence holds in this layer with `width`-byte compute
    /// values: the conv state in the compute dtype; the SSM state too, except where it is fp32:
    /// the gated DeltaNet's (`torch_chunk_gated_delta_rule` computes in fp32 and returns its
    /// final state so), one marked [`Ssm::state_fp32`] (the config's cache dtype, which vLLM
    /// honours), and every SSM state in transformers' cache (`in_transformers`): the cache
    /// allocates `zeros_like` of the final state the mixer returns (`cache_utils.py`
    /// `LinearAttentionLayer.lazy_initialization`), and that state is fp32 on every path —
    /// Mamba2's `mamba2_chunk_scan` scans `hidden_states.float()` and mamba_ssm's
    /// `_state_passing_fwd` makes `final_states` in `torch.float32`; Mamba's torch scan adds
    /// the fp32 `deltaB_u` into it and `selective_scan_fn`'s `last_state` is a slice of its
    /// fp32 saved states (`modeling_mamba.py` `selective_scan`, transformers 5.24).
    pub fn state_bytes(&self, width: u64, in_transformers: bool) -> u64 {
        let (conv, ssm) = self.state_values();
        let ssm_width = match self.version {
            SsmVersion::GatedDeltaNet => 4,
            _ if self.state_fp32 || in_transformers => 4,
            _ => width,
        };
        conv.saturating_mul(width)
            .saturating_add(ssm.saturating_mul(ssm_width))
    }

    /// Values of recurrent state one sequence holds in this layer: the convolution's last
    /// `d_conv` inputs (`conv_states [conv_dim, d_conv]`) and the SSM state (`ssm_states
    /// [d_inner, d_state]`; Mamba2 `[heads, head_dim, d_state]`, the same count), as the
    /// mixers' cache path allocates them (transformers 5.x `cache_utils.py`
    /// `LinearAttentionLayer`; `modeling_mamba.py` / `modeling_mamba2.py` `cache_params`).
    /// LFM2's short convolution keeps only `conv_states [hidden, conv_L_cache]` of `B · x`
    /// (`Lfm2ShortConv.forward` → `cache.update_conv_state`, whose `lazy_initialization`
    /// allocates `(*conv_states.shape[:-1], conv_kernel_size)`). Constant in context length.
    pub fn state_values(&self) -> (u64, u64) {
        (self.conv_dim() * self.d_conv, self.d_inner * self.d_state)
    }
}

impl AttentionKind {
    pub fn heads(&self) -> u64 {
        match *self {
            AttentionKind::Standard { heads, .. } | AttentionKind::Latent { heads, .. } => heads,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Key/value heads as stored in a standard KV cache (MLA: all heads after decompression).
    pub fn kv_heads(&self) -> u64 {
        match *self {
            AttentionKind::Standard { kv_heads, .. } => kv_heads,
            AttentionKind::Latent { heads, .. } => heads,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Width of one query/key head.
    pub fn qk_head_dim(&self) -> u64 {
        match *self {
            AttentionKind::Standard { head_dim, .. } => head_dim,
            AttentionKind::Latent {
                qk_nope_head_dim,
                qk_rope_head_dim,
                ..
            } => qk_nope_head_dim + qk_rope_head_dim,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Width of one value head.
    pub fn v_head_dim(&self) -> u64 {
        match *self {
            AttentionKind::Standard { head_dim, .. } => head_dim,
            AttentionKind::Latent { v_head_dim, .. } => v_head_dim,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// The state-space mixer this layer runs in place of attention, if any.
    pub fn state_space(&self) -> Option<&Ssm> {
        match self {
            AttentionKind::StateSpace(s) => Some(s),
            _ => None,
        }
    }
}

/// Bias flags of the four attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProjBias {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub o: bool,
}

impl ProjBias {
    pub fn all(on: bool) -> Self {
        ProjBias {
            q: on,
            k: on,
            v: on,
            o: on,
        }
    }
}

/// The feed-forward part of a block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mlp {
    Dense(DenseMlp),
    Moe(MoeMlp),
    /// No feed-forward: the block is its mixer alone (Mamba, Mamba2).
    None,
}

/// A dense feed-forward network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseMlp {
    /// Intermediate width.
    pub ffn: u64,
    /// Gated (SwiGLU/GeGLU: gate, up and down matrices) or plain (up and down).
    pub gated: bool,
    pub bias: bool,
    /// The activation as the config names it (`silu`, `gelu_pytorch_tanh`, `relu`, ...).
    pub activation: String,
    /// The gate goes through Gemma 3n's Gaussian top-k before the activation
    /// (`modeling_gemma3n.py` `Gemma3nTextMLP._gaussian_topk`: `relu(gate - (mean + std ·
    /// Φ⁻¹(sparsity)))` on a layer whose `activation_sparsity_pattern` is above 0).
    #[serde(default, skip_serializing_if = "is_false")]
    pub gaussian_topk: bool,
}

/// A mixture-of-experts feed-forward network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeMlp {
    /// Routed experts.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// One routed expert (always gated in the supported families).
    pub expert: DenseMlp,
    /// Always-active shared expert(s), as one MLP of the summed width (Qwen2-MoE, DeepSeek).
    pub shared: Option<DenseMlp>,
    /// A sigmoid gate on the shared expert's output (Qwen2-MoE `shared_expert_gate`).
    pub shared_gate: bool,
    /// The router carries a bias (gpt-oss `GptOssTopKRouter.bias`, `[experts]`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub router_bias: bool,
    /// Times the block's input is multiplied in place by uniform noise in training, each
    /// saving its noise tensor for backward: Mixtral's `router_jitter_noise` once
    /// (`MixtralSparseMoeBlock`), Phi-3.5-MoE's `input_jitter_noise` twice (in
    /// `PhimoeSparseMoeBlock` and again in `PhimoeTopKRouter`); 0 without jitter.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_jitter: u64,
    /// The routed experts run in a latent width: `fc1_latent_proj [latent, hidden]` before
    /// them, `fc2_latent_proj [hidden, latent]` after, each expert `latent → ffn → latent`
    /// (Nemotron-3 `moe_latent_size`, `modeling_nemotron_h.py` `NemotronHMoE`); `None`: the
    /// experts read the hidden state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What sits on top of the last stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Head {
    /// A vocabulary projection (causal or seq2seq LM). `tied`: shares the token embedding.
    LanguageModel { tied: bool, bias: bool },
    /// BERT/RoBERTa masked-LM head: dense + LayerNorm transform, then a vocabulary decoder
    /// (tied or not) with a bias.
    MaskedLm { tied: bool },
    /// No head: the bare encoder/decoder; `pooler` adds BERT's dense pooler.
    None { pooler: bool },
    /// A sequence-classification head (`...ForSequenceClassification`): BERT's pooler and
    /// `classifier`, RoBERTa's `classifier.dense` + `out_proj`, or the decoders' `score`.
    Classifier { labels: u64, pooler: bool },
}

impl ModelSpec {
    /// Copies of the residual stream the decoder's blocks carry: Gemma 3n's
    /// `altup_num_inputs` ([`Gemma3nParts`]), else 1.
    pub fn residual_streams(&self) -> u64 {
        self.gemma3n.map_or(1, |g| g.altup_inputs)
    }

    /// All layers, encoder first, with their global index.
    pub fn all_layers(&self) -> impl Iterator<Item = &Layer> {
        self.encoder
            .iter()
            .flat_map(|s| s.layers.iter())
            .chain(self.decoder.layers.iter())
    }

    /// Number of transformer layers over both stacks.
    pub fn num_layers(&self) -> u64 {
        self.all_layers().count() as u64
    }

    /// Whether the token embedding is shared with the output projection.
    pub fn tied_embeddings(&self) -> bool {
        matches!(
            self.head,
            Head::LanguageModel { tied: true, .. } | Head::MaskedLm { tied: true }
        )
    }
}
