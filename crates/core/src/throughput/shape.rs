//! The numbers of a model the step-time model reads, computed once per model: parameters a
//! token passes through in matmuls, the attention core's width per layer, the bytes its
//! memory-bound ops move per token.

use crate::inventory::{Component, Inventory};
use crate::model::{Layer, Mlp, ModelSpec, Naming, NormKind, Positions};

/// What one layer's forward is made of, as eager PyTorch runs a Hugging Face modelling file
/// (the mean over the model's layers): what [`super::eager`] counts kernels from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerOps {
    /// RMSNorms written out in Python (`LlamaRMSNorm`), q/k norms included.
    pub rms_norms: f64,
    /// LayerNorms (`F.layer_norm`, one kernel).
    pub layer_norms: f64,
    /// Projections (GEMMs with a weight): q, k, v, o (GPT-2's fused `c_attn` + `c_proj`), the
    /// MLP's two or three.
    pub projections: f64,
    /// Projections with a bias.
    pub biases: f64,
    /// Projections whose input is the fp32 residual side under autocast (cast at every call).
    pub fp32_inputs: f64,
    /// Gradient adds where one tensor feeds several projections (q, k, v; gate, up).
    pub shared_input_adds: f64,
    pub rotary: bool,
    /// Fewer key/value heads than query heads: eager attention's `repeat_kv`.
    pub repeat_kv: bool,
    /// Kernels of the activation (`silu`: 1; GPT-2's `gelu_new`, written out: 8).
    pub act_kernels: f64,
    pub gated: bool,
    /// Dropouts with p > 0 on the hidden states (after attention and MLP).
    pub hidden_dropouts: f64,
    pub attention_dropout: bool,
    /// LoRA-adapted projections (set per job by the step-time model, 0 here).
    pub lora: f64,
    /// Elements per token: the residual stream, the rotated q and k, the activation's input.
    pub hidden: f64,
    pub rotary_width: f64,
    pub act_width: f64,
    /// The attention's q/k head dim (the largest over layers): SDPA's kernel choice reads it.
    pub head_dim: u64,
}

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
    /// MoE layers and the experts each token is routed to (expert parallelism's all-to-all).
    pub moe_layers: u64,
    pub top_k: u64,
    /// Routed experts per MoE layer, and the routed experts' parameters (all layers).
    pub experts: u64,
    pub expert_params: f64,
    /// One layer's ops, for the kernels an eager step launches.
    pub layer_ops: LayerOps,
    /// Parameter tensors (the optimizer's and `zero_grad`'s per-tensor loops).
    pub param_tensors: f64,
}

impl ModelShape {
    /// `params` parameters, every one in a matmul, nothing else known: no layers, attention,
    /// experts or kernels counted (the shape a model without a description gets).
    pub fn dense(params: f64) -> ModelShape {
        ModelShape {
            matmul_params: params,
            params,
            attention: Vec::new(),
            heads: 0.0,
            layers: 0,
            hidden: 0,
            kv_width: 0,
            vocab: 0,
            moe_layers: 0,
            top_k: 0,
            experts: 0,
            expert_params: 0.0,
            layer_ops: LayerOps::default(),
            param_tensors: 0.0,
        }
    }

    /// Of the weights, the share one decode step of `tokens` tokens reads: every tensor but
    /// the routed experts whole, and of each MoE layer's E routed experts only those some
    /// token is routed to. With each token picking k distinct experts and the picks uniform
    /// and independent across tokens, an expert escapes one token with probability 1 − k/E,
    /// so E·(1 − (1 − k/E)^tokens) of them are read in expectation (occupancy of E bins by
    /// `tokens` draws of k; at one token exactly k: the decode of a single sequence reads
    /// k/E of the experts, which is why MoE decode is fast at small batch). 1 for a dense
    /// model.
    pub fn decode_weight_share(&self, tokens: u64) -> f64 {
        if self.experts == 0 || self.params <= 0.0 || self.expert_params <= 0.0 {
            return 1.0;
        }
        let e = self.experts as f64;
        let k = (self.top_k as f64).min(e);
        let read = e * (1.0 - (1.0 - k / e).powf(tokens as f64));
        let experts = self.expert_params.min(self.params);
        (self.params - experts + experts * read / e) / self.params
    }

    /// The shape of a model: from its architecture and tensors, or from its parameter count
    /// alone ([`ModelShape::dense`]). Takes the model's parts (the
    /// estimator's `ModelInput` fields) so that the model's memo can hold a shape.
    pub fn of(
        spec: Option<&ModelSpec>,
        inventory: Option<&Inventory>,
        params_total: u64,
    ) -> ModelShape {
        let bare = ModelShape {
            param_tensors: inventory.map_or(0.0, |i| i.tensors.len() as f64),
            ..ModelShape::dense(params_total as f64)
        };
        match spec {
            Some(spec) => from_spec(spec, inventory, bare),
            None => bare,
        }
    }
}

fn from_spec(spec: &ModelSpec, inventory: Option<&Inventory>, bare: ModelShape) -> ModelShape {
    let h = spec.hidden_size;
    let mut attention: Vec<(f64, Option<u64>)> = Vec::new();
    let mut heads = 0.0;
    let (mut moe_layers, mut top_k, mut kv_width, mut experts) = (0, 0, 0, 0);
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
        // Zamba2's hybrid layer runs its shared block's attention too, one core per application.
        if let Some(sb) = &l.shared_block {
            let k = sb.attention.kind;
            let width = (k.heads() * (k.qk_head_dim() + k.v_head_dim())) as f64;
            match attention.iter_mut().find(|(_, w)| w.is_none()) {
                Some(g) => g.0 += width,
                None => attention.push((width, None)),
            }
            heads += k.heads() as f64;
            kv_width = kv_width.max(k.kv_heads() * (k.qk_head_dim() + k.v_head_dim()));
        }
        if let Some(m) = l.routed_experts() {
            moe_layers += 1;
            top_k = m.top_k;
            experts = m.experts;
        }
    }
    let layers = spec.num_layers();
    ModelShape {
        matmul_params: matmul_params(spec, inventory).unwrap_or(bare.params),
        attention,
        heads,
        layers,
        hidden: h,
        kv_width,
        vocab: spec.vocab_size,
        moe_layers,
        top_k,
        experts,
        expert_params: inventory.map_or(0.0, |inv| {
            inv.tensors
                .iter()
                .filter(|t| t.component == Component::Experts)
                .map(|t| t.elements() as f64)
                .sum()
        }),
        layer_ops: layer_ops(spec),
        ..bare
    }
}

/// The mean of [`LayerOps`] over a model's layers.
fn layer_ops(spec: &ModelSpec) -> LayerOps {
    let mut sum = LayerOps::default();
    let mut n = 0.0;
    for l in spec.all_layers() {
        let o = one_layer(spec, l);
        n += 1.0;
        sum.rms_norms += o.rms_norms;
        sum.layer_norms += o.layer_norms;
        sum.projections += o.projections;
        sum.biases += o.biases;
        sum.fp32_inputs += o.fp32_inputs;
        sum.shared_input_adds += o.shared_input_adds;
        sum.act_kernels += o.act_kernels;
        sum.hidden_dropouts += o.hidden_dropouts;
        sum.hidden += o.hidden;
        sum.rotary_width += o.rotary_width;
        sum.act_width += o.act_width;
        sum.head_dim = sum.head_dim.max(o.head_dim);
        sum.rotary |= o.rotary;
        sum.repeat_kv |= o.repeat_kv;
        sum.gated |= o.gated;
        sum.attention_dropout |= o.attention_dropout;
    }
    let n = f64::max(n, 1.0);
    LayerOps {
        rms_norms: sum.rms_norms / n,
        layer_norms: sum.layer_norms / n,
        projections: sum.projections / n,
        biases: sum.biases / n,
        fp32_inputs: sum.fp32_inputs / n,
        shared_input_adds: sum.shared_input_adds / n,
        act_kernels: sum.act_kernels / n,
        hidden_dropouts: sum.hidden_dropouts / n,
        hidden: sum.hidden / n,
        rotary_width: sum.rotary_width / n,
        act_width: sum.act_width / n,
        ..sum
    }
}

/// One layer's ops from its description (`modeling_llama.py` / `modeling_gpt2.py`).
fn one_layer(spec: &ModelSpec, l: &Layer) -> LayerOps {
    let k = l.attention.kind;
    let qk_norms = if l.attention.qk_norm.is_some() {
        2.0
    } else {
        0.0
    };
    let (mut rms, mut ln) = (0.0, 0.0);
    for (_, norm) in &l.norms {
        match norm.kind {
            NormKind::RmsNorm => rms += 1.0,
            NormKind::LayerNorm { .. } => ln += 1.0,
        }
    }
    // Fused q/k/v (GPT-2's `c_attn`, Phi-3's `qkv_proj`) is one projection and one input.
    let fused = matches!(spec.naming, Naming::Gpt2 | Naming::Phi3);
    let (attn_proj, attn_inputs) = if fused { (2.0, 1.0) } else { (4.0, 3.0) };
    let b = &l.attention.bias;
    let mut biases = [b.q, b.k, b.v, b.o].iter().filter(|&&x| x).count() as f64;
    if fused && b.q {
        biases = 2.0;
    }
    let (mlp_proj, mlp_inputs, gated, act, ffn) = match &l.mlp {
        Mlp::Dense(d) => {
            biases += if d.bias {
                2.0 + f64::from(u8::from(d.gated))
            } else {
                0.0
            };
            let p = if d.gated { 3.0 } else { 2.0 };
            (
                p,
                p - 1.0,
                d.gated,
                activation_kernels(&d.activation),
                d.ffn,
            )
        }
        // Routed experts run per expert (not modelled here): the shared path's shape.
        Mlp::Moe(m) => (3.0, 2.0, m.expert.gated, 1.0, m.expert.ffn * m.top_k),
        Mlp::None => (0.0, 0.0, false, 0.0, 0),
    };
    let rotary = matches!(spec.embedding.positions, Positions::Rotary { .. }) && !l.attention.nope;
    let dropout = spec.dropout;
    LayerOps {
        rms_norms: rms + qk_norms,
        layer_norms: ln,
        projections: attn_proj + mlp_proj,
        biases,
        fp32_inputs: attn_inputs + mlp_inputs,
        shared_input_adds: (attn_inputs - 1.0) + (mlp_inputs - 1.0).max(0.0),
        rotary,
        repeat_kv: k.kv_heads() < k.heads(),
        act_kernels: act,
        gated,
        hidden_dropouts: if dropout.hidden > 0.0 { 2.0 } else { 0.0 },
        attention_dropout: dropout.attention > 0.0,
        lora: 0.0,
        hidden: spec.hidden_size as f64,
        rotary_width: if rotary {
            ((k.heads() + k.kv_heads()) * k.qk_head_dim()) as f64
        } else {
            0.0
        },
        act_width: ffn as f64,
        head_dim: k.qk_head_dim(),
    }
}

/// Kernels an activation launches: one for a native op (`F.silu`, `F.gelu`, `gelu_pytorch_tanh`
/// = `F.gelu(approximate="tanh")`); eight for transformers' `NewGELUActivation` (`gelu_new`,
/// written out in `activations.py`: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`).
fn activation_kernels(name: &str) -> f64 {
    match name {
        "gelu_new" | "gelu_fast" => 8.0,
        _ => 1.0,
    }
}

/// Parameters in the matmuls a token passes through: attention, dense MLP, router and head
/// tensors whole, routed experts at `top_k / experts`, and the embedding again when the head
/// is tied to it (the head multiplies by it). Embedding lookups and norms are no matmuls; a
/// tower that never runs has none.
fn matmul_params(spec: &ModelSpec, inventory: Option<&Inventory>) -> Option<f64> {
    let inv = inventory?;
    let routed = spec
        .all_layers()
        .find_map(|l| l.routed_experts())
        .map(|m| m.top_k as f64 / m.experts.max(1) as f64);
    let mut n = 0.0;
    // Zamba2's shared blocks run once per application, not once per stored copy: their
    // tensors are counted per application below ([`crate::model::SharedBlock::matmul_params`]).
    let shared: Vec<_> = spec
        .all_layers()
        .filter_map(|l| l.shared_block.as_deref())
        .collect();
    for sb in &shared {
        n += sb.matmul_params(spec.hidden_size) as f64;
    }
    for t in &inv.tensors {
        if !shared.is_empty() && t.name.contains(".shared_transformer.") {
            continue;
        }
        // A tower that is loaded, never run (`ModelSpec::idle_tensors`: Gemma 4's audio
        // tower, Gemma 3n's towers).
        if t.idle {
            continue;
        }
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
