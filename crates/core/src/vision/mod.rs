//! Vision-language models: one model of three components — the vision tower (a ViT over
//! image patches), the projector (vision features → language-model embeddings) and the
//! language model — as transformers builds them (`modeling_qwen2_vl.py`,
//! `modeling_qwen2_5_vl.py`, `modeling_llava.py`, `modeling_llava_next.py`,
//! `modeling_gemma3.py`). A VLM's [`crate::model::ModelSpec`] holds its language model as
//! every other model does, plus a [`Vision`] for the tower and projector; the inventory tags
//! each tensor with its [`Part`], and the job can freeze parts or aim LoRA at one of them.

mod anyres;
mod blocks;
mod cost;
mod families;
pub mod gemma4;
mod inventory;
mod lfm2_vl;
pub mod llama4;
pub mod mllama;
mod onevision;
mod siglip2;
mod tiling;
mod tokens;

pub use cost::ImageCost;
pub use inventory::vision_tensors;
pub use lfm2_vl::Lfm2VlTokens;
pub use tokens::ImageTokens;

use crate::model::norm::NormKind;
use serde::{Deserialize, Serialize};

/// Which component of a vision-language model a tensor belongs to. Text-only models are all
/// `language`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The language model (embeddings, decoder layers, head).
    #[default]
    Language,
    /// The vision tower (patch embedding, encoder layers, its norms).
    Vision,
    /// The projector (Qwen's merger, LLaVA's `multi_modal_projector`, Gemma 3's pooling
    /// projection; Gemma 3n's two multimodal embedders).
    Projector,
    /// An audio tower and, where it runs only with audio input, its embedder (Gemma 4 E2B /
    /// E4B's `audio_tower` and `embed_audio`; Gemma 3n's `audio_tower`): loaded, never run, as
    /// no job field feeds audio (`ModelSpec::idle_tensors`).
    Audio,
}

impl Part {
    pub const ALL: [Part; 4] = [Part::Language, Part::Vision, Part::Projector, Part::Audio];

    /// The name the job and the outputs use.
    pub fn name(self) -> &'static str {
        match self {
            Part::Language => "language",
            Part::Vision => "vision",
            Part::Projector => "projector",
            Part::Audio => "audio",
        }
    }

    /// Reads a part's name (the job's `freeze` entries, LoRA's `part:module` targets).
    pub fn parse(s: &str) -> Option<Part> {
        Part::ALL.into_iter().find(|p| p.name() == s)
    }

    pub fn is_language(&self) -> bool {
        *self == Part::Language
    }

    /// Whether the job's forward runs this part: the language model always; the vision tower
    /// and projector when the job has images (a VLM's `forward` calls its tower only on
    /// `pixel_values`: `Gemma4Model.forward`, `Qwen2VLModel.forward`,
    /// `LlavaModel.forward`, transformers 5.24); the audio tower never (no job field feeds
    /// audio). A part that does not run leaves its weights' `.grad` `None`, so AdamW's
    /// `_init_group` (torch 2.15 `optim/adamw.py`) gives them no state.
    pub fn runs(self, images: bool) -> bool {
        match self {
            Part::Language => true,
            Part::Vision | Part::Projector => images,
            Part::Audio => false,
        }
    }
}

/// A LoRA target as the job writes it: `part:module` (`language:q_proj`, `vision:qkv`) aims
/// at one component; a bare module name at all of them.
pub fn split_target(target: &str) -> (Option<Part>, &str) {
    match target.split_once(':') {
        Some((p, m)) => match Part::parse(p) {
            Some(part) => (Some(part), m),
            None => (None, target),
        },
        None => (None, target),
    }
}

/// How a family lays out and names its vision tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TowerKind {
    /// Qwen2-VL / Qwen2.5-VL `model.visual`: a 3-D patch convolution (no bias), rotary
    /// positions, fused `attn.qkv` and `attn.proj`, no class token, no final norm.
    Qwen,
    /// CLIP (`CLIPVisionModel`, LLaVA): class token, learned positions, `pre_layrnorm`,
    /// `post_layernorm`.
    Clip,
    /// SigLIP (`SiglipVisionModel`, Gemma 3): learned positions, `post_layernorm`, no class
    /// token.
    Siglip,
    /// SigLIP with its attention-pooling head (`SiglipMultiheadAttentionPoolingHead`, built
    /// when `vision_use_head` is true, its `SiglipVisionConfig` default): LLaVA-OneVision
    /// configs that leave the key out. The head's output is not used by the VLM.
    SiglipHead,
    /// Idefics3 / SmolVLM `model.vision_model` (`modeling_idefics3.py`
    /// `Idefics3VisionTransformer`): SigLIP's layout under another root.
    Idefics3,
    /// Pixtral (`modeling_pixtral.py` `PixtralVisionModel`, Mistral 3): a patch convolution
    /// without bias, `ln_pre` (RMSNorm), 2-D rotary positions, blocks of `attention_norm`,
    /// `attention.{q,k,v,o}_proj` and a SwiGLU `feed_forward`, all without biases; no final
    /// norm.
    Pixtral,
    /// Qwen3-VL `model.visual` (`modeling_qwen3_vl.py` `Qwen3VLVisionModel`): Qwen2-VL's
    /// blocks (`linear_fc1`/`linear_fc2` MLP) with a biased 3-D patch convolution and a
    /// learned `pos_embed` of `num_position_embeddings` rows, interpolated to the image.
    Qwen3,
    /// InternViT (`modeling_internvl.py` `InternVLVisionModel`, InternVL 3): class token,
    /// learned positions (`use_absolute_position_embeddings`), a biased patch convolution,
    /// blocks of `layernorm_before`, `attention.{q,k,v}_proj` (biased when `attention_bias`),
    /// optional `q_norm`/`k_norm` (RMSNorm over the width), `projection_layer`,
    /// `layernorm_after`, `mlp.fc1`/`fc2` and the layer scales `lambda_1`/`lambda_2`; a final
    /// `layernorm` unless `use_mean_pooling`.
    InternVit {
        qkv_bias: bool,
        qk_norm: bool,
        final_norm: bool,
        mask_token: bool,
    },
    /// Llama-3.2-Vision (`modeling_mllama.py` `MllamaVisionModel`): a bias-free patch
    /// convolution, class token, gated and tiled positional embeddings, `layers` local
    /// encoder layers and `global_layers` gated ones, all over the `tiles` tiles of an image
    /// as one sequence; the outputs of `intermediate` local layers are concatenated to the
    /// last one's. `aspect_ratios`: `len(supported_aspect_ratios)`.
    Mllama {
        global_layers: u64,
        tiles: u64,
        aspect_ratios: u64,
        intermediate: u64,
    },
    /// SigLIP2 NaFlex (`modeling_siglip2.py` `Siglip2VisionModel`, LFM2-VL's tower): SigLIP's
    /// blocks and `post_layernorm` under `vision_model`, but the patch embedding is a linear
    /// over the flattened `channels · patch²` pixels of each patch and the learned positions
    /// are a `num_patches` table resized to each image's grid; the pooling head when
    /// `vision_use_head` (its `Siglip2VisionConfig` default: true).
    Siglip2 { head: bool },
    /// Llama 4 (`modeling_llama4.py` `Llama4VisionModel`): an unfold-and-linear patch
    /// embedding, class token, learned positions, `layernorm_pre`/`_post`, LayerNorm encoder
    /// layers with biased `q/k/v/o_proj` and 2-D rotary positions, then the pixel-shuffle
    /// adapter (`shuffle`: `1 / pixel_shuffle_ratio`) whose `fc1` maps the shuffled
    /// `intermediate_size` to `projector_input` and `fc2` is `projector_output` square.
    Llama4 {
        shuffle: u64,
        projector_input: u64,
        projector_output: u64,
    },
    /// Gemma 4 (`modeling_gemma4.py` `Gemma4VisionModel`, [`gemma4`]): a linear patch
    /// embedder with a `[2, positions, hidden]` table of x and y position embeddings, encoder
    /// layers with q/k/v RMS norms over `head_dim` (v's weightless), 2-D rotary positions,
    /// four RMS norms and a gated MLP, all linears bias-free `Gemma4ClippableLinear`s
    /// (`clipped`: each clamps its input and output); then the pooler (`pooling²` patches
    /// to one soft token, in fp32) and, with `standardize`, the fp32 standardisation.
    Gemma4 {
        kv_heads: u64,
        head_dim: u64,
        positions: u64,
        pooling: u64,
        clipped: bool,
        standardize: bool,
    },
}

impl TowerKind {
    /// Whether the tower's linears carry biases (all but Pixtral's).
    pub fn biased(self) -> bool {
        !matches!(self, TowerKind::Pixtral | TowerKind::Gemma4 { .. })
    }
}

/// The vision tower's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tower {
    pub kind: TowerKind,
    pub hidden: u64,
    pub layers: u64,
    /// Layers whose output reaches the projector: LLaVA's `vision_feature_layer: -2` takes the
    /// second-to-last hidden state, so the last layer's activations are not kept.
    pub layers_used: u64,
    pub heads: u64,
    pub ffn: u64,
    /// SwiGLU MLP (`gate_proj`/`up_proj`/`down_proj`, Qwen2.5-VL) or plain `fc1`/`fc2`.
    pub gated: bool,
    pub norm: NormKind,
    /// The MLP activation as the config names it (`quick_gelu`, `silu`, `gelu_pytorch_tanh`).
    pub activation: String,
    pub channels: u64,
    pub patch: u64,
    /// Frames one patch spans (Qwen's `temporal_patch_size`: a still image is repeated); 1 for
    /// a 2-D patch embedding.
    pub temporal_patch: u64,
    /// Rows of the learned position table (CLIP: patches + 1; SigLIP: patches); 0 with rotary.
    pub position_rows: u64,
    /// Qwen2.5-VL: layers other than `fullatt_block_indexes` attend within windows of this
    /// many patches (`window_size / patch_size` squared); `None`: every layer attends over the
    /// whole image.
    pub window_patches: Option<u64>,
    pub full_attention_layers: Vec<u64>,
}

/// The projector between tower and language model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Projector {
    /// Qwen's `PatchMerger`: `ln_q` over the tower width, then `merge²·hidden → merge²·hidden
    /// → out` (GELU between), every `merge × merge` patches becoming one token.
    QwenMerger {
        merge: u64,
        norm: NormKind,
        out: u64,
    },
    /// LLaVA's `LlavaMultiModalProjector`: `linear_1` (hidden → out), GELU, `linear_2`;
    /// LLaVA-NeXT adds the learned `image_newline` row.
    LlavaMlp { out: u64, image_newline: bool },
    /// Gemma 3's `Gemma3MultiModalProjector`: average pooling to `tokens` per image, an
    /// RMSNorm over the tower width and `mm_input_projection_weight` `[hidden, out]`.
    Gemma3 { out: u64 },
    /// Mistral 3's `Mistral3MultiModalProjector`: an RMSNorm over the tower width, the
    /// `patch_merger.merging_layer` (`merge²·hidden → hidden`, no bias), then `linear_1`
    /// (hidden → out), GELU, `linear_2` (out → out), biased when `multimodal_projector_bias`.
    Mistral3 { merge: u64, out: u64, bias: bool },
    /// Idefics3 / SmolVLM's connector (`Idefics3Connector`): pixel shuffle of `scale × scale`
    /// patches into one (`scale²·hidden` wide), then `modality_projection.proj` to `out`, no
    /// bias.
    PixelShuffle { scale: u64, out: u64 },
    /// Qwen3-VL's `Qwen3VLVisionPatchMerger`: a LayerNorm over the tower width, `linear_fc1`
    /// (`merge²·hidden` square), GELU, `linear_fc2` → out; plus one DeepStack merger per
    /// `deepstack_visual_indexes` entry (the LayerNorm over the merged width instead), whose
    /// outputs are added to the first language layers' hidden states.
    Qwen3Merger {
        merge: u64,
        out: u64,
        deepstack: u64,
    },
    /// InternVL's `InternVLMultiModalProjector`: pixel shuffle of `scale × scale` patches
    /// (`1 / downsample_ratio`), a LayerNorm over `scale²·hidden`, `linear_1` → out, GELU,
    /// `linear_2` (out → out), all biased.
    InternVl { scale: u64, out: u64 },
    /// Mllama's `multi_modal_projector`: one biased linear from the tower's concatenated
    /// output (`vision_output_dim`) to the text width.
    Mllama { input: u64, out: u64 },
    /// PaliGemma's `PaliGemmaMultiModalProjector` (`modeling_paligemma.py`): one biased
    /// linear from the tower width to `projection_dim` (the language model's width).
    PaliGemma { out: u64 },
    /// LFM2-VL's `Lfm2VlMultiModalProjector` (`modeling_lfm2_vl.py`): pixel unshuffle of
    /// `scale × scale` patches into one (`scale²·hidden` wide), a LayerNorm over that width
    /// when `projector_use_layernorm`, `linear_1` → `projector_hidden_size`, GELU, `linear_2`
    /// → the language model's width, both biased when `projector_bias`.
    Lfm2Vl {
        scale: u64,
        inner: u64,
        out: u64,
        norm: bool,
        bias: bool,
    },
    /// Llama 4's `Llama4MultiModalProjector`: `linear_1` from the adapter's output
    /// (`vision_output_dim`) to the text width, no bias.
    Llama4 { input: u64, out: u64 },
    /// Gemma 4's `Gemma4MultimodalEmbedder` (`embed_vision`): a weightless RMS norm over the
    /// tower width, then `embedding_projection` to the text width `out`, no bias.
    Gemma4 { out: u64 },
}

/// A VLM's vision side: tower, projector and the family's rule for image tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vision {
    /// The config's top-level `model_type` (`qwen2_5_vl`, `llava`, ...).
    pub family: String,
    pub tower: Tower,
    pub projector: Projector,
    pub tokens: ImageTokens,
}

/// The images of one sequence, as the job gives them (`images`: count, width, height).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Images {
    pub count: u64,
    pub width: u64,
    pub height: u64,
}
