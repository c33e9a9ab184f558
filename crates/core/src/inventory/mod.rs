//! The tensor inventory: every parameter tensor of a model with its shape, dtype, bytes, layer
//! and component. Built from a [`ModelSpec`](crate::model::ModelSpec) (names as the family's
//! checkpoints spell them; `builder.rs`) or read from file headers; both produce the same
//! [`Inventory`], so they can be compared.

use crate::dtype::DType;
use crate::error::CoreError;
use crate::vision::Part;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

mod builder;
mod gated_delta;
mod gemma3n;
mod gemma4;
mod mixers;
mod mlps;
mod nemotron_h;
mod parallel;
mod zamba2;

pub use builder::build_inventory;

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
    /// Held but never run by the step ([`crate::model::ModelSpec::idle_tensors`]: Gemma 3n's
    /// towers in a text-only job, Gemma 4's audio tower), so never given a gradient.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
}

impl Tensor {
    /// Whether the weight never gets a gradient when the model trains: DeepSeek Sparse
    /// Attention's indexer (`self_attn.indexer.*`) runs under `@torch.no_grad()`
    /// (`modeling_deepseek_v32.py` `DeepseekV32Indexer.forward`, transformers 5.24; GLM-5's
    /// `GlmMoeDsaIndexer` likewise), so its weights get neither a gradient nor optimizer
    /// state (a measured step: `grad_bytes_after` is the parameters less the indexer's); an
    /// [`idle`](Tensor::idle) tower's weights never run.
    pub fn trains_without_grad(&self) -> bool {
        self.idle || self.name.contains(".indexer.")
    }

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
            idle: false,
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
    /// The class's weights never get a gradient in training ([`Tensor::trains_without_grad`]).
    pub no_grad: bool,
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

/// What makes two tensors one [`ShapeClass`]: shape, dtype, component, part, stored bytes and
/// whether they train without a gradient.
type ClassKey<'a> = (&'a [u64], DType, Component, Part, u64, bool);

impl ShapeTallies {
    /// Tallies `tensors` (one pass; the classes in order of first appearance).
    pub fn of(tensors: &[Tensor]) -> Self {
        let mut out = ShapeTallies::default();
        let mut index: HashMap<ClassKey, u32> = HashMap::new();
        let mut layers: BTreeMap<u32, (BTreeMap<u32, u64>, u64)> = BTreeMap::new();
        let mut outside: BTreeMap<u32, u64> = BTreeMap::new();
        for t in tensors {
            let next = out.classes.len() as u32;
            let class = *index
                .entry((
                    t.shape.as_slice(),
                    t.dtype,
                    t.component,
                    t.part,
                    t.bytes,
                    t.trains_without_grad(),
                ))
                .or_insert(next);
            if class == next {
                out.classes.push(ShapeClass {
                    shape: t.shape.clone(),
                    dtype: t.dtype,
                    component: t.component,
                    part: t.part,
                    elements: t.elements(),
                    bytes: t.bytes,
                    no_grad: t.trains_without_grad(),
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
