//! The contract's `model` object: what a report says about the model it describes.

use crate::inventory::Inventory;
use crate::model::{AttentionKind, Mlp, ModelSpec};
use serde::{Deserialize, Serialize};

/// `model` in every report (`../shared/contract.md`): the first five fields are the contract's;
/// the rest describe the architecture when it is known (`null` otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub name: String,
    /// Parameters of the model class (tied weights once, buffers excluded).
    pub params_total: u64,
    /// Parameters that receive gradients in this job (all, unless frozen or PEFT).
    pub params_trainable: u64,
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub architecture: Option<String>,
    pub model_type: Option<String>,
    pub dtype: Option<String>,
    pub vocab_size: Option<u64>,
    pub heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub ffn: Option<u64>,
    pub experts: Option<u64>,
    pub experts_per_token: Option<u64>,
    pub max_position_embeddings: Option<u64>,
    pub tied_embeddings: Option<bool>,
    /// Bytes of the weights as stored (the inventory's dtypes).
    pub weight_bytes: Option<u64>,
    /// Where the model was read (`source`, `origin`), filled in by the caller that loaded it.
    #[serde(flatten)]
    pub read_from: ReadFrom,
    /// A vision-language model's components: parameters and bytes of its vision tower,
    /// projector and language model (absent for a text-only model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components:
        Option<std::collections::BTreeMap<crate::vision::Part, crate::inventory::Tally>>,
    /// Layers with a state-space mixer (Mamba, Mamba2) in place of attention: their cache is a
    /// recurrent state per sequence, constant in context length (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_space_layers: Option<u64>,
}

/// Where a model or a pipeline was read (contract `model.source`, `model.origin`): both
/// filled in together by the caller that loaded it, from the reader's one description of the
/// place (`vramscope_formats::model_source::Source::read_from`); absent when nobody did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadFrom {
    /// `preset`, `file`, `hf-cache`, `hub`, `inline` or `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The details of `source`: `{"kind", "repo", "revision", "commit", "path"}` as apply (the
    /// commit a Hub or HF-cache model was read at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<serde_json::Value>,
}

impl ModelSummary {
    /// A summary from the architecture and (optionally) the inventory actually loaded.
    pub fn from_spec(spec: &ModelSpec, params_total: u64, inventory: Option<&Inventory>) -> Self {
        // Heads of the first attention layer (none in a pure state-space model; Nemotron-H's
        // MLP layers hold none either; Zamba2's is the shared block its hybrid layers apply).
        let attention = spec
            .all_layers()
            .filter(|l| !l.attention.is_absent())
            .map(|l| l.attention.kind)
            .find(|k| k.state_space().is_none())
            .or_else(|| {
                spec.all_layers()
                    .find_map(|l| l.shared_block.as_ref().map(|sb| sb.attention.kind))
            });
        let (ffn, experts, top_k) = spec
            .all_layers()
            .find_map(|l| l.routed_experts())
            .map(|m| (Some(m.expert.ffn), Some(m.experts), Some(m.top_k)))
            .unwrap_or_else(|| {
                // The first dense MLP (a hybrid's first layer may have none; Zamba2's is its
                // shared block's).
                let ffn = spec.all_layers().find_map(|l| match &l.mlp {
                    Mlp::Dense(d) => Some(d.ffn),
                    Mlp::Moe(_) | Mlp::None => l.shared_block.as_ref().map(|sb| sb.mlp.ffn),
                });
                (ffn, None, None)
            });
        ModelSummary {
            name: spec.name.clone(),
            params_total,
            params_trainable: params_total,
            layers: Some(spec.num_layers()),
            hidden: Some(spec.hidden_size),
            architecture: Some(spec.architecture.clone()),
            model_type: Some(spec.model_type.clone()),
            dtype: Some(spec.dtype.to_string()),
            vocab_size: Some(spec.vocab_size),
            heads: attention.map(|a| a.heads()),
            kv_heads: attention.map(|a| match a {
                AttentionKind::Standard { kv_heads, .. } => kv_heads,
                AttentionKind::Latent { .. } => 1,
                AttentionKind::StateSpace(_) => 0,
            }),
            head_dim: attention.map(|a| a.qk_head_dim()),
            ffn,
            experts,
            experts_per_token: top_k,
            max_position_embeddings: spec.max_position_embeddings,
            tied_embeddings: Some(spec.tied_embeddings()),
            weight_bytes: inventory.map(|i| i.bytes()),
            read_from: ReadFrom::default(),
            components: inventory.map(|i| i.by_part()).filter(|m| m.len() > 1),
            state_space_layers: Some(spec.all_layers().filter(|l| l.holds_state()).count() as u64)
                .filter(|n| *n > 0),
        }
    }

    /// A summary from file tensors alone (no config): layers are counted from tensor names.
    pub fn from_inventory(name: &str, inventory: &Inventory) -> Self {
        let layers = inventory.by_layer().len() as u64;
        let params = inventory.params();
        ModelSummary {
            name: name.to_string(),
            params_total: params,
            params_trainable: params,
            layers: (layers > 0).then_some(layers),
            hidden: None,
            architecture: None,
            model_type: None,
            dtype: None,
            vocab_size: None,
            heads: None,
            kv_heads: None,
            head_dim: None,
            ffn: None,
            experts: None,
            experts_per_token: None,
            max_position_embeddings: None,
            tied_embeddings: None,
            weight_bytes: Some(inventory.bytes()),
            read_from: ReadFrom::default(),
            components: Some(inventory.by_part()).filter(|m| m.len() > 1),
            state_space_layers: None,
        }
    }

    /// A summary of a bare parameter count.
    pub fn from_params(name: &str, params: u64) -> Self {
        ModelSummary {
            weight_bytes: None,
            layers: None,
            ..ModelSummary::from_inventory(name, &Inventory::default())
        }
        .with_params(params)
    }

    fn with_params(mut self, params: u64) -> Self {
        self.params_total = params;
        self.params_trainable = params;
        self
    }
}
