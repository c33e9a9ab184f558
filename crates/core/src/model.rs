//! The model description (IR): what a transformer is made of, independent of the file it came
//! from. Loaders (config.json, presets) build a [`ModelSpec`]; [`crate::inventory`] turns it into
//! the exact list of parameter tensors, and the estimator reads its shapes. This file holds the
//! whole model (naming, embeddings, stacks, head); a block's parts are in `model/layer.rs`,
//! `model/attention.rs`, `model/ssm.rs`, `model/mlp.rs`, `model/norm.rs` and
//! `model/shared_block.rs`.

mod attention;
mod layer;
mod mlp;
pub mod norm;
mod serde_skip;
pub mod shared_block;
mod ssm;

pub use attention::{Attention, AttentionKind, Indexer, ProjBias};
pub use layer::{Layer, NormSlot};
pub use mlp::{DenseMlp, Mlp, MoeMlp};
pub use norm::{Norm, NormKind};
pub use shared_block::SharedBlock;
pub use ssm::{ParallelSsm, Ssm, SsmVersion};

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
