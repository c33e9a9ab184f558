//! The tensor inventory: every parameter tensor of a model with its shape, dtype, bytes, layer
//! and component. Built from a [`ModelSpec`] (names as the family's checkpoints spell them) or
//! read from file headers; both produce the same [`Inventory`], so they can be compared.

use crate::dtype::DType;
use crate::error::CoreError;
use crate::model::*;
use crate::vision::Part;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// Which part of the model a tensor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Token, position and token-type embeddings (and their projections/norm).
    Embedding,
    /// Attention projections and their biases (per-head q/k norms count as `Norm`), or the
    /// layer's state-space mixer in its place (Mamba's `mixer.*`).
    Attention,
    /// Dense feed-forward weights, including MoE shared experts (always active).
    Mlp,
    /// Routed MoE experts (only `top_k` of them are active per token).
    Experts,
    /// The MoE router (gate).
    Router,
    /// Normalisation layers.
    Norm,
    /// Output head: LM head, MLM transform, pooler.
    Head,
}

impl Component {
    pub const ALL: [Component; 7] = [
        Component::Embedding,
        Component::Attention,
        Component::Mlp,
        Component::Experts,
        Component::Router,
        Component::Norm,
        Component::Head,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Component::Embedding => "embedding",
            Component::Attention => "attention",
            Component::Mlp => "mlp",
            Component::Experts => "experts",
            Component::Router => "router",
            Component::Norm => "norm",
            Component::Head => "head",
        }
    }
}

/// One parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: DType,
    pub bytes: u64,
    /// Global layer index (encoder layers first); `None` outside the layer stacks.
    pub layer: Option<u32>,
    pub component: Component,
    /// The model component (vision-language models: vision tower, projector, language model)
    /// read from the tensor's name ([`crate::vision::Part::of_name`]); `language` is left out
    /// of the JSON.
    #[serde(default, skip_serializing_if = "Part::is_language")]
    pub part: Part,
}

impl Tensor {
    /// Builds a tensor, computing its bytes exactly; fails on overflow or a size the dtype
    /// cannot hold (a partial quantization block).
    pub fn new(
        name: String,
        shape: Vec<u64>,
        dtype: DType,
        layer: Option<u32>,
        component: Component,
    ) -> Result<Self, CoreError> {
        let elements = elements_of(&shape).ok_or_else(|| CoreError::Overflow {
            what: format!("element count of tensor '{name}'"),
        })?;
        let bytes = dtype
            .bytes_for(elements)
            .ok_or_else(|| CoreError::InvalidTensor {
                name: name.clone(),
                reason: format!("{elements} elements do not fill whole {dtype} blocks"),
            })?;
        Ok(Tensor {
            part: Part::of_name(&name),
            name,
            shape,
            dtype,
            bytes,
            layer,
            component,
        })
    }

    /// Number of elements (the product of the shape; 1 for a scalar).
    pub fn elements(&self) -> u64 {
        elements_of(&self.shape).unwrap_or(u64::MAX)
    }
}

/// Product of dimensions with overflow checking; `[]` (a scalar) has one element.
pub fn elements_of(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Parameters and bytes of a group of tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub params: u64,
    pub bytes: u64,
    pub tensors: u64,
}

impl Tally {
    fn add(&mut self, t: &Tensor) {
        self.params = self.params.saturating_add(t.elements());
        self.bytes = self.bytes.saturating_add(t.bytes);
        self.tensors += 1;
    }
}

/// The list of a model's parameter tensors.
///
/// An inventory is not changed once built: its [`ShapeTallies`] are computed on first use and
/// kept.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Inventory {
    pub tensors: Vec<Tensor>,
    #[serde(skip)]
    tallies: OnceLock<ShapeTallies>,
}

impl PartialEq for Inventory {
    fn eq(&self, other: &Self) -> bool {
        self.tensors == other.tensors
    }
}

impl Inventory {
    /// The inventory of these tensors.
    pub fn new(tensors: Vec<Tensor>) -> Self {
        Inventory {
            tensors,
            tallies: OnceLock::new(),
        }
    }

    /// The tensors tallied by shape class and layer composition (computed once).
    pub fn tallies(&self) -> &ShapeTallies {
        self.tallies.get_or_init(|| ShapeTallies::of(&self.tensors))
    }

    /// All tensors together.
    pub fn total(&self) -> Tally {
        let mut t = Tally::default();
        self.tensors.iter().for_each(|x| t.add(x));
        t
    }

    /// Total parameter count (tied tensors appear once).
    pub fn params(&self) -> u64 {
        self.total().params
    }

    /// Total bytes as stored.
    pub fn bytes(&self) -> u64 {
        self.total().bytes
    }

    /// Tallies per component, in [`Component::ALL`] order (absent components omitted).
    pub fn by_component(&self) -> BTreeMap<Component, Tally> {
        let mut m = BTreeMap::new();
        for t in &self.tensors {
            m.entry(t.component).or_insert_with(Tally::default).add(t);
        }
        m
    }

    /// Tallies per storage dtype.
    /// Parameters per model component (vision tower, projector, language model).
    pub fn by_part(&self) -> BTreeMap<Part, Tally> {
        let mut m: BTreeMap<Part, Tally> = BTreeMap::new();
        for t in &self.tensors {
            m.entry(t.part).or_default().add(t);
        }
        m
    }

    pub fn by_dtype(&self) -> BTreeMap<DType, Tally> {
        let mut m = BTreeMap::new();
        for t in &self.tensors {
            m.entry(t.dtype).or_insert_with(Tally::default).add(t);
        }
        m
    }

    /// Tallies per layer index (tensors outside the layer stacks are not included).
    pub fn by_layer(&self) -> BTreeMap<u32, Tally> {
        let mut m = BTreeMap::new();
        for t in &self.tensors {
            if let Some(l) = t.layer {
                m.entry(l).or_insert_with(Tally::default).add(t);
            }
        }
        m
    }

    /// Looks a tensor up by name.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Tensors the estimator treats alike: one shape, dtype, component and stored size. The per-tensor rules
/// (the caching allocator's rounding, an optimizer's states, expert-parallel division) give
/// every tensor of a class the same bytes, so they are applied once per class and multiplied
/// by the class's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeClass {
    pub shape: Vec<u64>,
    pub dtype: DType,
    pub component: Component,
    /// The model component (vision tower, projector, language model) of its tensors.
    pub part: Part,
    /// [`Tensor::elements`] of one tensor of the class.
    pub elements: u64,
    /// Bytes as stored of one tensor of the class.
    pub bytes: u64,
}

/// One layer of the stacks: its index, its composition (an index into
/// [`ShapeTallies::layer_kinds`]) and its parameter count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerTally {
    pub layer: u32,
    pub kind: u32,
    pub elements: u64,
}

/// An inventory tallied by [`ShapeClass`]: a few dozen classes and one or two layer
/// compositions stand for hundreds (or, with routed experts, tens of thousands) of tensors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShapeTallies {
    pub classes: Vec<ShapeClass>,
    /// Each tensor's class, in inventory order (for rules that depend on the order).
    pub tensor_class: Vec<u32>,
    /// The distinct compositions of a layer: (class, tensors) pairs, by class.
    pub layer_kinds: Vec<Vec<(u32, u64)>>,
    /// Every layer that has tensors, by layer index.
    pub layers: Vec<LayerTally>,
    /// Tensors outside the layer stacks: (class, tensors) pairs, by class.
    pub outside: Vec<(u32, u64)>,
}

impl ShapeTallies {
    /// Tallies `tensors` (one pass; the classes in order of first appearance).
    pub fn of(tensors: &[Tensor]) -> Self {
        let mut out = ShapeTallies::default();
        let mut index: HashMap<(&[u64], DType, Component, Part, u64), u32> = HashMap::new();
        let mut layers: BTreeMap<u32, (BTreeMap<u32, u64>, u64)> = BTreeMap::new();
        let mut outside: BTreeMap<u32, u64> = BTreeMap::new();
        for t in tensors {
            let next = out.classes.len() as u32;
            let class = *index
                .entry((t.shape.as_slice(), t.dtype, t.component, t.part, t.bytes))
                .or_insert(next);
            if class == next {
                out.classes.push(ShapeClass {
                    shape: t.shape.clone(),
                    dtype: t.dtype,
                    component: t.component,
                    part: t.part,
                    elements: t.elements(),
                    bytes: t.bytes,
                });
            }
            out.tensor_class.push(class);
            match t.layer {
                Some(l) => {
                    let (counts, elements) = layers.entry(l).or_default();
                    *counts.entry(class).or_default() += 1;
                    *elements = elements.saturating_add(t.elements());
                }
                None => *outside.entry(class).or_default() += 1,
            }
        }
        let mut kinds: HashMap<Vec<(u32, u64)>, u32> = HashMap::new();
        for (layer, (counts, elements)) in layers {
            let composition: Vec<(u32, u64)> = counts.into_iter().collect();
            let next = out.layer_kinds.len() as u32;
            let kind = *kinds.entry(composition.clone()).or_insert(next);
            if kind == next {
                out.layer_kinds.push(composition);
            }
            out.layers.push(LayerTally {
                layer,
                kind,
                elements,
            });
        }
        out.outside = outside.into_iter().collect();
        out
    }
}

/// Builds the exact inventory of `spec`: every parameter of the model class it describes, tied
/// weights once, buffers (rotary tables, attention masks, DeepSeek's `e_score_correction_bias`)
/// excluded. Shapes follow PyTorch (`nn.Linear` weights are `[out, in]`; GPT-2's `Conv1D` is
/// `[in, out]`). Tensor names follow the family's Hugging Face checkpoints.
pub fn build_inventory(spec: &ModelSpec) -> Result<Inventory, CoreError> {
    let mut b = Builder {
        spec,
        dtype: spec.dtype,
        out: Vec::new(),
    };
    b.embeddings()?;
    let mut global = 0u32;
    if let Some(enc) = &spec.encoder {
        for (i, layer) in enc.layers.iter().enumerate() {
            b.layer(StackKind::Encoder, i, global, layer)?;
            global += 1;
        }
        if let Some(n) = enc.final_norm {
            let name = b.final_norm_name(StackKind::Encoder);
            b.norm(&name, n, None)?;
        }
    }
    let kind = if spec.encoder.is_some() {
        StackKind::Decoder
    } else {
        StackKind::Main
    };
    for (i, layer) in spec.decoder.layers.iter().enumerate() {
        b.layer(kind, i, global, layer)?;
        global += 1;
    }
    if let Some(n) = spec.decoder.final_norm {
        let name = b.final_norm_name(kind);
        b.norm(&name, n, None)?;
    }
    b.head()?;
    if let Some(v) = &spec.vision {
        crate::vision::vision_tensors(v, spec.dtype, &mut b.out)?;
    }
    Ok(Inventory::new(b.out))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StackKind {
    Main,
    Encoder,
    Decoder,
}

struct Builder<'a> {
    spec: &'a ModelSpec,
    dtype: DType,
    out: Vec<Tensor>,
}

impl Builder<'_> {
    fn push(
        &mut self,
        name: String,
        shape: Vec<u64>,
        layer: Option<u32>,
        component: Component,
    ) -> Result<(), CoreError> {
        self.out
            .push(Tensor::new(name, shape, self.dtype, layer, component)?);
        Ok(())
    }

    /// A linear layer `in → out`: weight `[out, in]` (or `[in, out]` for Conv1D) and bias.
    fn linear(
        &mut self,
        name: &str,
        inp: u64,
        out: u64,
        bias: bool,
        layer: Option<u32>,
        c: Component,
    ) -> Result<(), CoreError> {
        let shape = if self.spec.naming == Naming::Gpt2 {
            vec![inp, out]
        } else {
            vec![out, inp]
        };
        self.push(format!("{name}.weight"), shape, layer, c)?;
        if bias {
            self.push(format!("{name}.bias"), vec![out], layer, c)?;
        }
        Ok(())
    }

    fn norm(&mut self, name: &str, n: Norm, layer: Option<u32>) -> Result<(), CoreError> {
        self.push(
            format!("{name}.weight"),
            vec![n.dim],
            layer,
            Component::Norm,
        )?;
        if let NormKind::LayerNorm { bias: true } = n.kind {
            self.push(format!("{name}.bias"), vec![n.dim], layer, Component::Norm)?;
        }
        Ok(())
    }

    /// The prefix of the base model inside the task class (`model.`, `transformer.`, ...), or
    /// nothing for a bare base model.
    fn root(&self) -> &'static str {
        let bare = matches!(self.spec.head, Head::None { .. });
        let root = match self.spec.naming {
            Naming::Llama
            | Naming::Mixtral
            | Naming::QwenMoe
            | Naming::DeepSeek
            | Naming::Phi3
            | Naming::GptOss
            | Naming::Llama4
            | Naming::Jamba => "model.",
            Naming::Gpt2 | Naming::BigCode | Naming::Falcon => "transformer.",
            Naming::NeoX => "gpt_neox.",
            Naming::Opt => return if bare { "decoder." } else { "model.decoder." },
            Naming::Bert => "bert.",
            Naming::Roberta => "roberta.",
            Naming::T5 => "",
            Naming::Mamba => "backbone.",
        };
        if bare {
            ""
        } else {
            root
        }
    }

    fn embeddings(&mut self) -> Result<(), CoreError> {
        let s = self.spec;
        let r = self.root();
        let e = &s.embedding;
        let c = Component::Embedding;
        let (tok, pos) = match s.naming {
            Naming::Gpt2 | Naming::BigCode => ("wte", "wpe"),
            Naming::NeoX => ("embed_in", ""),
            Naming::Falcon => ("word_embeddings", ""),
            Naming::Opt => ("embed_tokens", "embed_positions"),
            Naming::Bert | Naming::Roberta => (
                "embeddings.word_embeddings",
                "embeddings.position_embeddings",
            ),
            Naming::T5 => ("shared", ""),
            Naming::Mamba => ("embeddings", ""),
            _ => ("embed_tokens", ""),
        };
        self.push(
            format!("{r}{tok}.weight"),
            vec![s.vocab_size, e.dim],
            None,
            c,
        )?;
        if let Positions::Learned { rows } = e.positions {
            self.push(
                format!("{r}{pos}.weight"),
                vec![rows, s.hidden_size],
                None,
                c,
            )?;
        }
        if e.token_types > 0 {
            self.push(
                format!("{r}embeddings.token_type_embeddings.weight"),
                vec![e.token_types, s.hidden_size],
                None,
                c,
            )?;
        }
        if let Some(n) = e.norm {
            let before = self.out.len();
            self.norm(&format!("{r}embeddings.LayerNorm"), n, None)?;
            for t in &mut self.out[before..] {
                t.component = Component::Embedding;
            }
        }
        if e.projection {
            // OPT: project_out (hidden → dim) and project_in (dim → hidden), no bias.
            self.linear(
                &format!("{r}project_out"),
                s.hidden_size,
                e.dim,
                false,
                None,
                c,
            )?;
            self.linear(
                &format!("{r}project_in"),
                e.dim,
                s.hidden_size,
                false,
                None,
                c,
            )?;
        }
        Ok(())
    }

    fn layer_prefix(&self, kind: StackKind, i: usize) -> String {
        let r = self.root();
        match (self.spec.naming, kind) {
            (Naming::T5, StackKind::Encoder) => format!("encoder.block.{i}"),
            (Naming::T5, _) => format!("decoder.block.{i}"),
            (Naming::Gpt2 | Naming::BigCode | Naming::Falcon, _) => format!("{r}h.{i}"),
            (Naming::Bert | Naming::Roberta, _) => format!("{r}encoder.layer.{i}"),
            _ => format!("{r}layers.{i}"),
        }
    }

    fn final_norm_name(&self, kind: StackKind) -> String {
        let r = self.root();
        match (self.spec.naming, kind) {
            (Naming::T5, StackKind::Encoder) => "encoder.final_layer_norm".into(),
            (Naming::T5, _) => "decoder.final_layer_norm".into(),
            (Naming::Gpt2 | Naming::BigCode | Naming::Falcon, _) => format!("{r}ln_f"),
            (Naming::NeoX | Naming::Opt, _) => format!("{r}final_layer_norm"),
            (Naming::Mamba, _) => format!("{r}norm_f"),
            (Naming::Jamba, _) => format!("{r}final_layernorm"),
            _ => format!("{r}norm"),
        }
    }

    fn layer(
        &mut self,
        kind: StackKind,
        i: usize,
        global: u32,
        layer: &Layer,
    ) -> Result<(), CoreError> {
        let p = self.layer_prefix(kind, i);
        let l = Some(global);
        let is_t5_decoder = self.spec.naming == Naming::T5 && kind == StackKind::Decoder;
        let has_post_attn = layer
            .norms
            .iter()
            .any(|(s, _)| *s == NormSlot::PostAttention);
        for (slot, n) in &layer.norms {
            let name = self.norm_name(&p, *slot, has_post_attn, layer, is_t5_decoder);
            self.norm(&name, *n, l)?;
        }
        let attn_name = match self.spec.naming {
            Naming::T5 => format!("{p}.layer.0.SelfAttention"),
            Naming::Gpt2 | Naming::BigCode => format!("{p}.attn"),
            Naming::NeoX => format!("{p}.attention"),
            Naming::Falcon => format!("{p}.self_attention"),
            Naming::Bert | Naming::Roberta => format!("{p}.attention"),
            Naming::Mamba => format!("{p}.mixer"),
            Naming::Jamba if layer.attention.kind.state_space().is_some() => format!("{p}.mamba"),
            _ => format!("{p}.self_attn"),
        };
        self.attention(&attn_name, &layer.attention, l)?;
        if let Some(cross) = &layer.cross_attention {
            self.attention(&format!("{p}.layer.1.EncDecAttention"), cross, l)?;
        }
        let mlp_name = match self.spec.naming {
            Naming::T5 if is_t5_decoder => format!("{p}.layer.2.DenseReluDense"),
            Naming::T5 => format!("{p}.layer.1.DenseReluDense"),
            Naming::Mixtral => format!("{p}.block_sparse_moe"),
            Naming::Llama4 => format!("{p}.feed_forward"),
            Naming::Jamba => format!("{p}.feed_forward"),
            Naming::Opt | Naming::Bert | Naming::Roberta => p.clone(),
            _ => format!("{p}.mlp"),
        };
        match &layer.mlp {
            Mlp::Dense(d) => self.dense_mlp(&mlp_name, d, l, Component::Mlp)?,
            Mlp::Moe(m) => self.moe(&mlp_name, m, l)?,
            Mlp::None => {}
        }
        Ok(())
    }

    fn norm_name(
        &self,
        p: &str,
        slot: NormSlot,
        has_post_attn: bool,
        layer: &Layer,
        t5_decoder: bool,
    ) -> String {
        use NormSlot::*;
        let s = match self.spec.naming {
            Naming::Gpt2 | Naming::BigCode => match slot {
                PreAttention => "ln_1",
                _ => "ln_2",
            },
            Naming::Opt => match slot {
                PreAttention => "self_attn_layer_norm",
                _ => "final_layer_norm",
            },
            Naming::Falcon => {
                let two = layer.norms.len() == 2;
                match slot {
                    PreAttention if two && layer.parallel_residual => "ln_attn",
                    PreAttention => "input_layernorm",
                    _ if layer.parallel_residual => "ln_mlp",
                    _ => "post_attention_layernorm",
                }
            }
            Naming::Bert | Naming::Roberta => match slot {
                PostAttention => "attention.output.LayerNorm",
                _ => "output.LayerNorm",
            },
            Naming::Mamba => "norm",
            Naming::Jamba => match slot {
                PreAttention => "input_layernorm",
                _ => "pre_ff_layernorm",
            },
            Naming::T5 => match slot {
                PreAttention => "layer.0.layer_norm",
                PreCrossAttention => "layer.1.layer_norm",
                _ if t5_decoder => "layer.2.layer_norm",
                _ => "layer.1.layer_norm",
            },
            _ => match slot {
                PreAttention => "input_layernorm",
                PostAttention => "post_attention_layernorm",
                PreMlp if has_post_attn => "pre_feedforward_layernorm",
                PreMlp => "post_attention_layernorm",
                PostMlp => "post_feedforward_layernorm",
                PreCrossAttention => "cross_attn_layernorm",
            },
        };
        format!("{p}.{s}")
    }

    fn attention(&mut self, a: &str, att: &Attention, l: Option<u32>) -> Result<(), CoreError> {
        match att.kind {
            AttentionKind::Standard {
                heads,
                kv_heads,
                head_dim,
            } => self.standard_attention(a, att, (heads, kv_heads, head_dim), l)?,
            AttentionKind::Latent { .. } => self.latent_attention(a, att, l)?,
            AttentionKind::StateSpace(ssm) => self.state_space(a, &ssm, l)?,
        }
        if let Some(n) = att.qk_norm {
            // OLMoE normalises the whole q and k projections (`q_norm [heads · head_dim]`,
            // `k_norm [kv_heads · head_dim]`); the others one head.
            let (q, k) = if att.qk_norm_whole {
                let k = att.kind;
                (k.heads() * k.qk_head_dim(), k.kv_heads() * k.qk_head_dim())
            } else {
                (n.dim, n.dim)
            };
            self.norm(&format!("{a}.q_norm"), Norm { dim: q, ..n }, l)?;
            self.norm(&format!("{a}.k_norm"), Norm { dim: k, ..n }, l)?;
        }
        if att.sinks {
            let heads = att.kind.heads();
            self.push(format!("{a}.sinks"), vec![heads], l, Component::Attention)?;
        }
        Ok(())
    }

    /// A state-space mixer's tensors, as transformers' `MambaMixer` / `FalconMambaMixer`
    /// (`in_proj [2·d_inner, h]`, depthwise `conv1d [d_inner, 1, d_conv]`, `x_proj [dt_rank +
    /// 2·d_state, d_inner]`, `dt_proj [d_inner, dt_rank]` with bias, `A_log [d_inner,
    /// d_state]`, `D [d_inner]`, `out_proj [h, d_inner]`) and `Mamba2Mixer` (`in_proj [d_inner +
    /// conv_dim + heads, h]`, `conv1d [conv_dim, 1, d_conv]`, `dt_bias`, `A_log`, `D` `[heads]`,
    /// the gated `norm [d_inner]`, `out_proj`) build them; Jamba's mixer adds its Δ, B and C
    /// norms (`modeling_jamba.py` `JambaMambaMixer.dt_layernorm` / `b_layernorm` /
    /// `c_layernorm`).
    fn state_space(&mut self, a: &str, s: &Ssm, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let mamba2 = s.version == SsmVersion::Mamba2;
        let in_out = if mamba2 {
            s.d_inner + s.conv_dim() + s.heads
        } else {
            2 * s.d_inner
        };
        self.linear(&format!("{a}.in_proj"), h, in_out, s.proj_bias, l, c)?;
        let conv = s.conv_dim();
        self.push(format!("{a}.conv1d.weight"), vec![conv, 1, s.d_conv], l, c)?;
        if s.conv_bias {
            self.push(format!("{a}.conv1d.bias"), vec![conv], l, c)?;
        }
        if mamba2 {
            self.push(format!("{a}.dt_bias"), vec![s.heads], l, c)?;
            self.push(format!("{a}.A_log"), vec![s.heads], l, c)?;
            self.push(format!("{a}.D"), vec![s.heads], l, c)?;
            self.norm(&format!("{a}.norm"), Norm::rms(s.d_inner), l)?;
        } else {
            let x_out = s.dt_rank + 2 * s.d_state;
            self.linear(&format!("{a}.x_proj"), s.d_inner, x_out, false, l, c)?;
            self.linear(&format!("{a}.dt_proj"), s.dt_rank, s.d_inner, true, l, c)?;
            self.push(format!("{a}.A_log"), vec![s.d_inner, s.d_state], l, c)?;
            self.push(format!("{a}.D"), vec![s.d_inner], l, c)?;
        }
        if s.version == SsmVersion::Jamba {
            self.norm(&format!("{a}.dt_layernorm"), Norm::rms(s.dt_rank), l)?;
            self.norm(&format!("{a}.b_layernorm"), Norm::rms(s.d_state), l)?;
            self.norm(&format!("{a}.c_layernorm"), Norm::rms(s.d_state), l)?;
        }
        self.linear(&format!("{a}.out_proj"), s.d_inner, h, s.proj_bias, l, c)
    }

    /// Multi-head / grouped-query attention: q, k, v and output projections, fused or not as
    /// the family's checkpoints name them.
    fn standard_attention(
        &mut self,
        a: &str,
        att: &Attention,
        (heads, kv_heads, head_dim): (u64, u64, u64),
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let b = att.bias;
        let q = mul(heads, head_dim, "attention width")?;
        let kv = mul(kv_heads, head_dim, "key/value width")?;
        let qkv = q
            .checked_add(2 * kv)
            .ok_or_else(|| overflow("fused qkv width"))?;
        match self.spec.naming {
            Naming::Gpt2 | Naming::BigCode => {
                self.linear(&format!("{a}.c_attn"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.c_proj"), q, h, b.o, l, c)?;
            }
            Naming::NeoX | Naming::Falcon => {
                self.linear(&format!("{a}.query_key_value"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.dense"), q, h, b.o, l, c)?;
            }
            Naming::Phi3 => {
                self.linear(&format!("{a}.qkv_proj"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.o_proj"), q, h, b.o, l, c)?;
            }
            Naming::Bert | Naming::Roberta => {
                self.linear(&format!("{a}.self.query"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.self.key"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.self.value"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.output.dense"), q, h, b.o, l, c)?;
            }
            Naming::T5 => {
                for (n, out) in [("q", q), ("k", kv), ("v", kv)] {
                    self.linear(&format!("{a}.{n}"), h, out, false, l, c)?;
                }
                self.linear(&format!("{a}.o"), q, h, false, l, c)?;
                if let Some(buckets) = att.relative_bias_buckets {
                    self.push(
                        format!("{a}.relative_attention_bias.weight"),
                        vec![buckets, heads],
                        l,
                        c,
                    )?;
                }
            }
            Naming::Opt => {
                self.linear(&format!("{a}.k_proj"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.v_proj"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.q_proj"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.out_proj"), q, h, b.o, l, c)?;
            }
            _ => {
                self.linear(&format!("{a}.q_proj"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.k_proj"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.v_proj"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.o_proj"), q, h, b.o, l, c)?;
            }
        }
        Ok(())
    }

    /// DeepSeek-V2/V3 multi-head latent attention (transformers `modeling_deepseek_v3.py`,
    /// `DeepseekV3Attention`): low-rank query and key/value projections with their norms.
    fn latent_attention(
        &mut self,
        a: &str,
        att: &Attention,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let AttentionKind::Latent {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
        } = att.kind
        else {
            return Ok(());
        };
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let b = att.bias;
        let qk_head = qk_nope_head_dim + qk_rope_head_dim;
        let q_out = mul(heads, qk_head, "MLA query width")?;
        match q_lora_rank {
            Some(r) => {
                self.linear(&format!("{a}.q_a_proj"), h, r, b.q, l, c)?;
                self.norm(&format!("{a}.q_a_layernorm"), Norm::rms(r), l)?;
                self.linear(&format!("{a}.q_b_proj"), r, q_out, false, l, c)?;
            }
            None => self.linear(&format!("{a}.q_proj"), h, q_out, false, l, c)?,
        }
        self.linear(
            &format!("{a}.kv_a_proj_with_mqa"),
            h,
            kv_lora_rank + qk_rope_head_dim,
            b.k,
            l,
            c,
        )?;
        self.norm(&format!("{a}.kv_a_layernorm"), Norm::rms(kv_lora_rank), l)?;
        let kv_b = mul(heads, qk_nope_head_dim + v_head_dim, "MLA kv_b width")?;
        self.linear(&format!("{a}.kv_b_proj"), kv_lora_rank, kv_b, false, l, c)?;
        let o_in = mul(heads, v_head_dim, "MLA output width")?;
        self.linear(&format!("{a}.o_proj"), o_in, h, b.o, l, c)?;
        Ok(())
    }

    fn dense_mlp(
        &mut self,
        m: &str,
        d: &DenseMlp,
        l: Option<u32>,
        c: Component,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let f = d.ffn;
        let bias = d.bias;
        match (self.spec.naming, d.gated) {
            (Naming::Phi3, true) => {
                let two_f = mul(2, f, "gate_up width")?;
                self.linear(&format!("{m}.gate_up_proj"), h, two_f, bias, l, c)?;
                self.linear(&format!("{m}.down_proj"), f, h, bias, l, c)?;
            }
            (Naming::Gpt2 | Naming::BigCode, _) => {
                self.linear(&format!("{m}.c_fc"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.c_proj"), f, h, bias, l, c)?;
            }
            (Naming::NeoX | Naming::Falcon, _) => {
                self.linear(&format!("{m}.dense_h_to_4h"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.dense_4h_to_h"), f, h, bias, l, c)?;
            }
            (Naming::Opt, _) => {
                self.linear(&format!("{m}.fc1"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.fc2"), f, h, bias, l, c)?;
            }
            (Naming::Bert | Naming::Roberta, _) => {
                self.linear(&format!("{m}.intermediate.dense"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.output.dense"), f, h, bias, l, c)?;
            }
            (Naming::T5, true) => {
                self.linear(&format!("{m}.wi_0"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.wi_1"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.wo"), f, h, bias, l, c)?;
            }
            (Naming::T5, false) => {
                self.linear(&format!("{m}.wi"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.wo"), f, h, bias, l, c)?;
            }
            (Naming::Mixtral, true) => {
                self.linear(&format!("{m}.w1"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.w2"), f, h, bias, l, c)?;
                self.linear(&format!("{m}.w3"), h, f, bias, l, c)?;
            }
            (_, true) => {
                self.linear(&format!("{m}.gate_proj"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.up_proj"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.down_proj"), f, h, bias, l, c)?;
            }
            (_, false) => {
                // StarCoder2-style plain MLP inside a Llama-named model.
                self.linear(&format!("{m}.c_fc"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.c_proj"), f, h, bias, l, c)?;
            }
        }
        Ok(())
    }

    fn moe(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        if self.spec.naming == Naming::GptOss {
            return self.fused_experts(m, moe, l);
        }
        if self.spec.naming == Naming::Llama4 {
            // Llama4TextMoe: `router`, the fused experts, an ungated-output `shared_expert`.
            self.fused_experts(m, moe, l)?;
            if let Some(shared) = &moe.shared {
                self.dense_mlp(&format!("{m}.shared_expert"), shared, l, Component::Mlp)?;
            }
            return Ok(());
        }
        let router = match self.spec.naming {
            Naming::Jamba => "router",
            _ => "gate",
        };
        self.linear(
            &format!("{m}.{router}"),
            h,
            moe.experts,
            false,
            l,
            Component::Router,
        )?;
        for e in 0..moe.experts {
            self.dense_mlp(
                &format!("{m}.experts.{e}"),
                &moe.expert,
                l,
                Component::Experts,
            )?;
        }
        if let Some(shared) = &moe.shared {
            let name = match self.spec.naming {
                Naming::DeepSeek => format!("{m}.shared_experts"),
                _ => format!("{m}.shared_expert"),
            };
            self.dense_mlp(&name, shared, l, Component::Mlp)?;
        }
        if moe.shared_gate {
            self.linear(
                &format!("{m}.shared_expert_gate"),
                h,
                1,
                false,
                l,
                Component::Router,
            )?;
        }
        Ok(())
    }

    /// gpt-oss's router (`mlp.router`, weight and bias) and its experts as four stacked
    /// parameters, the matrices stored `[in, out]` (`modeling_gpt_oss.py` `GptOssExperts`:
    /// `gate_up_proj` `[E, hidden, 2·ffn]`, `down_proj` `[E, ffn, hidden]`, biases `[E, out]`).
    fn fused_experts(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let (e, f) = (moe.experts, moe.expert.ffn);
        let r = Component::Router;
        self.linear(&format!("{m}.router"), h, e, moe.router_bias, l, r)?;
        let two_f = mul(2, f, "gate_up width")?;
        let x = Component::Experts;
        self.push(format!("{m}.experts.gate_up_proj"), vec![e, h, two_f], l, x)?;
        if moe.expert.bias {
            self.push(
                format!("{m}.experts.gate_up_proj_bias"),
                vec![e, two_f],
                l,
                x,
            )?;
        }
        self.push(format!("{m}.experts.down_proj"), vec![e, f, h], l, x)?;
        if moe.expert.bias {
            self.push(format!("{m}.experts.down_proj_bias"), vec![e, h], l, x)?;
        }
        Ok(())
    }

    fn head(&mut self) -> Result<(), CoreError> {
        let s = self.spec;
        let h = s.hidden_size;
        let v = s.vocab_size;
        let c = Component::Head;
        match s.head {
            Head::LanguageModel { tied, bias } => {
                if !tied {
                    let name = match s.naming {
                        Naming::NeoX => "embed_out",
                        _ => "lm_head",
                    };
                    // The head reads the hidden state, or the projected state in OPT-350m.
                    self.linear(name, s.embedding.dim, v, bias, None, c)?;
                } else if bias {
                    self.push("lm_head.bias".into(), vec![v], None, c)?;
                }
            }
            Head::MaskedLm { tied } => {
                let (p, dense, ln, dec, b) = match s.naming {
                    Naming::Roberta => (
                        "lm_head",
                        "lm_head.dense",
                        "lm_head.layer_norm",
                        "lm_head.decoder",
                        "lm_head.bias",
                    ),
                    _ => (
                        "cls.predictions",
                        "cls.predictions.transform.dense",
                        "cls.predictions.transform.LayerNorm",
                        "cls.predictions.decoder",
                        "cls.predictions.bias",
                    ),
                };
                let _ = p;
                self.linear(dense, h, h, true, None, c)?;
                let before = self.out.len();
                self.norm(ln, Norm::layer(h, true), None)?;
                for t in &mut self.out[before..] {
                    t.component = Component::Head;
                }
                if !tied {
                    self.push(format!("{dec}.weight"), vec![v, h], None, c)?;
                }
                self.push(b.into(), vec![v], None, c)?;
            }
            Head::None { pooler } => {
                if pooler {
                    let r = self.root();
                    self.linear(&format!("{r}pooler.dense"), h, h, true, None, c)?;
                }
            }
            Head::Classifier { labels, pooler } => {
                let r = self.root();
                match s.naming {
                    Naming::Bert => {
                        if pooler {
                            self.linear(&format!("{r}pooler.dense"), h, h, true, None, c)?;
                        }
                        self.linear("classifier", h, labels, true, None, c)?;
                    }
                    Naming::Roberta => {
                        self.linear("classifier.dense", h, h, true, None, c)?;
                        self.linear("classifier.out_proj", h, labels, true, None, c)?;
                    }
                    _ => self.linear("score", h, labels, false, None, c)?,
                }
            }
        }
        Ok(())
    }
}

fn mul(a: u64, b: u64, what: &str) -> Result<u64, CoreError> {
    a.checked_mul(b).ok_or_else(|| overflow(what))
}

fn overflow(what: &str) -> CoreError {
    CoreError::Overflow { what: what.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, shape: &[u64], layer: Option<u32>, c: Component) -> Tensor {
        Tensor::new(name.into(), shape.to_vec(), DType::BF16, layer, c).unwrap()
    }

    #[test]
    fn tallies_group_alike_tensors_and_layers() {
        let mut tensors = vec![t("embed", &[16, 8], None, Component::Embedding)];
        for l in 0..3 {
            tensors.push(t(&format!("{l}.q"), &[8, 8], Some(l), Component::Attention));
            tensors.push(t(&format!("{l}.k"), &[4, 8], Some(l), Component::Attention));
            tensors.push(t(&format!("{l}.v"), &[4, 8], Some(l), Component::Attention));
            tensors.push(t(&format!("{l}.norm"), &[8], Some(l), Component::Norm));
        }
        // Layer 3 lacks its norm: a second composition.
        tensors.push(t("3.q", &[8, 8], Some(3), Component::Attention));
        // The head has the embedding's shape but is another component: its own class.
        tensors.push(t("head", &[16, 8], None, Component::Head));
        let tl = Inventory::new(tensors).tallies().clone();
        // Classes in order of first appearance: embed, q, k/v, norm, head.
        assert_eq!(tl.classes.len(), 5);
        assert_eq!(tl.classes[2].shape, vec![4, 8]);
        assert_eq!(tl.classes[2].elements, 32);
        assert_eq!(tl.classes[2].bytes, 64); // 32 bf16 elements
        assert_eq!(tl.tensor_class[..5], [0, 1, 2, 2, 3]);
        assert_eq!(
            tl.layer_kinds,
            vec![vec![(1, 1), (2, 2), (3, 1)], vec![(1, 1)]]
        );
        let layers: Vec<(u32, u32, u64)> = tl
            .layers
            .iter()
            .map(|l| (l.layer, l.kind, l.elements))
            .collect();
        // Layers 0-2: 64 + 2 × 32 + 8 = 136 elements; layer 3: 64.
        assert_eq!(
            layers,
            vec![(0, 0, 136), (1, 0, 136), (2, 0, 136), (3, 1, 64)]
        );
        assert_eq!(tl.outside, vec![(0, 1), (4, 1)]);
    }

    #[test]
    fn equal_inventories_compare_equal_whatever_was_tallied() {
        let a = Inventory::new(vec![t("x", &[2, 2], None, Component::Head)]);
        let b = a.clone();
        let _ = a.tallies();
        assert_eq!(a, b);
    }
}
