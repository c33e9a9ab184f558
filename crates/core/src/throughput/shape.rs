//! The numbers of a model the step-time model reads, computed once per model: parameters a
//! token passes through in matmuls, the attention core's width per layer, the bytes its
//! memory-bound ops move per token.

use crate::estimate::ModelInput;
use crate::inventory::Component;
use crate::model::{Mlp, ModelSpec};

/// Per-model coefficients of the step-time model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelShape {
    /// Parameters a token multiplies through (every weight matrix of the blocks, the routed
    /// experts at `top_k / experts`, the LM head — tied or not): a forward costs 2 FLOPs each.
    pub matmul_params: f64,
    /// All parameters (model states).
    pub params: f64,
    /// Attention core per layer group: Σ heads × (qk head dim + v head dim) over its layers,
    /// and the sliding window it attends within (`None`: the whole sequence).
    pub attention: Vec<(f64, Option<u64>)>,
    /// Σ heads over layers (eager attention's score matrices).
    pub heads: f64,
    pub layers: u64,
    pub hidden: u64,
    /// Keys and values per token per layer, elements (context parallelism's ring exchange).
    pub kv_width: u64,
    pub vocab: u64,
    /// Elements one token's memory-bound ops read and write per layer in the forward: norms
    /// and residual adds (replicated across tensor-parallel ranks without sequence
    /// parallelism), and rotary embeddings and the MLP's activation (split across them).
    pub elementwise_replicated: f64,
    pub elementwise_split: f64,
    /// MoE layers and the experts each token is routed to (expert parallelism's all-to-all).
    pub moe_layers: u64,
    pub top_k: u64,
}

impl ModelShape {
    /// The shape of a model: from its architecture and tensors, or from its parameter count
    /// alone (every parameter in a matmul, nothing else known).
    pub fn of(model: &ModelInput) -> ModelShape {
        let params = model.params_total as f64;
        let bare = ModelShape {
            matmul_params: params,
            params,
            attention: Vec::new(),
            heads: 0.0,
            layers: 0,
            hidden: 0,
            kv_width: 0,
            vocab: 0,
            elementwise_replicated: 0.0,
            elementwise_split: 0.0,
            moe_layers: 0,
            top_k: 0,
        };
        match &model.spec {
            Some(spec) => from_spec(spec, model, bare),
            None => bare,
        }
    }
}

fn from_spec(spec: &ModelSpec, model: &ModelInput, bare: ModelShape) -> ModelShape {
    let h = spec.hidden_size;
    let mut attention: Vec<(f64, Option<u64>)> = Vec::new();
    let (mut heads, mut rep, mut split) = (0.0, 0.0, 0.0);
    let (mut moe_layers, mut top_k, mut kv_width) = (0, 0, 0);
    for l in spec.all_layers() {
        let k = l.attention.kind;
        let width = (k.heads() * (k.qk_head_dim() + k.v_head_dim())) as f64;
        let window = l.attention.sliding_window;
        match attention.iter_mut().find(|(_, w)| *w == window) {
            Some(g) => g.0 += width,
            None => attention.push((width, window)),
        }
        heads += k.heads() as f64;
        kv_width = kv_width.max(k.kv_heads() * (k.qk_head_dim() + k.v_head_dim()));
        // Two norms (read h, write h) and two residual adds (read 2h, write h).
        rep += (2 * 2 * h + 2 * 3 * h) as f64;
        // Rotary on q and k (read and write each), the MLP's activation (gated: read 2f,
        // write f; else read f, write f).
        split += (2 * k.heads() * k.qk_head_dim() + 2 * k.kv_heads() * k.qk_head_dim()) as f64;
        let (ffn, gated) = match &l.mlp {
            Mlp::Dense(d) => (d.ffn, d.gated),
            Mlp::Moe(m) => {
                moe_layers += 1;
                top_k = m.top_k;
                (m.expert.ffn * m.top_k, m.expert.gated)
            }
            Mlp::None => (0, false),
        };
        split += (ffn * if gated { 3 } else { 2 }) as f64;
    }
    let layers = spec.num_layers();
    let n = layers.max(1) as f64;
    ModelShape {
        matmul_params: matmul_params(spec, model).unwrap_or(bare.params),
        attention,
        heads,
        layers,
        hidden: h,
        kv_width,
        vocab: spec.vocab_size,
        elementwise_replicated: rep / n,
        elementwise_split: split / n,
        moe_layers,
        top_k,
        ..bare
    }
}

/// Parameters in the matmuls a token passes through: attention, dense MLP, router and head
/// tensors whole, routed experts at `top_k / experts`, and the embedding again when the head
/// is tied to it (the head multiplies by it). Embedding lookups and norms are no matmuls.
fn matmul_params(spec: &ModelSpec, model: &ModelInput) -> Option<f64> {
    let inv = model.inventory.as_ref()?;
    let routed = spec.all_layers().find_map(|l| match &l.mlp {
        Mlp::Moe(m) => Some(m.top_k as f64 / m.experts.max(1) as f64),
        Mlp::Dense(_) | Mlp::None => None,
    });
    let mut n = 0.0;
    for t in &inv.tensors {
        let e = t.elements() as f64;
        n += match t.component {
            Component::Attention | Component::Mlp | Component::Router | Component::Head => e,
            Component::Experts => e * routed.unwrap_or(1.0),
            Component::Embedding | Component::Norm => 0.0,
        };
    }
    if spec.tied_embeddings() {
        n += (spec.vocab_size * spec.hidden_size) as f64;
    }
    Some(n)
}
