//! A full fine-tune: every weight on the rank trained, each shape class's gradients, master copy
//! and optimizer states, and where the backward makes the gradients.

use super::rules::Rules;
use super::sums::Sums;
use super::{eight_bit, StateBytes};
use crate::error::CoreError;
use crate::estimate::optimizer;
use crate::estimate::overhead::round_size;
use crate::inventory::{Component, ShapeClass, ShapeTallies};

/// One class's trainable figures: elements on this rank, its gradient and master allocations,
/// its optimizer states (each state its own allocation, rounded by the allocator) and the
/// shape the optimizer sees (expert weights divided over EP ranks are flat).
pub(super) struct Trained {
    pub(super) elements: u64,
    pub(super) grad: u64,
    pub(super) master: u64,
    pub(super) states: u64,
    pub(super) state_shape: Vec<u64>,
    /// Tensors of the class on this rank.
    pub(super) count: u64,
    /// Of its states, the bytes a paged optimizer puts in unified memory.
    pub(super) paged: u64,
    /// Its own optimizer step's scratch (the optimizer stepping this one tensor).
    pub(super) scratch: u64,
}

impl Trained {
    fn of(class: &ShapeClass, r: &Rules) -> Result<Trained, CoreError> {
        let ep_share = r.ep_share(class.component);
        let n = class.elements / ep_share;
        let state_shape = if ep_share > 1 {
            vec![n]
        } else {
            class.shape.clone()
        };
        let mut states = 0u64;
        for st in optimizer::state_tensors(r.opt, &state_shape, r.w.state)? {
            states = states.saturating_add(round_size(st.bytes));
        }
        let paged = optimizer::paged_state_bytes(r.opt, &state_shape)?;
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&state_shape, r.w.state)])?;
        Ok(Trained {
            elements: n,
            grad: round_size(n.saturating_mul(r.w.grad)),
            master: round_size(n.saturating_mul(r.w.master)),
            states,
            state_shape,
            count: 0,
            paged: round_size(paged),
            scratch: round_size(scratch),
        })
    }
}

/// A full fine-tune: every weight on the rank trained. Adds each class's gradients, master
/// copy and optimizer states times its count, and places the gradients where the backward
/// makes them (per layer, the head, the embeddings). Returns each class's figures (`None` for
/// classes not on this rank).
pub(super) fn full_training(
    tl: &ShapeTallies,
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<Vec<Option<Trained>>, CoreError> {
    let mut trained: Vec<Option<Trained>> = (0..tl.classes.len()).map(|_| None).collect();
    for (layer, c, n) in r.on_rank_groups(tl) {
        let class = &tl.classes[c as usize];
        if r.frozen.contains(&class.part) || class.no_grad || !r.runs(class.part) {
            continue;
        }
        let t = match &mut trained[c as usize] {
            Some(t) => t,
            slot => slot.insert(Trained::of(class, r)?),
        };
        t.count += n;
        sums.trainable += t.elements * n;
        sums.grads = sums.grads.saturating_add(t.grad.saturating_mul(n));
        sums.master = sums.master.saturating_add(t.master.saturating_mul(n));
        sums.states = sums.states.saturating_add(t.states.saturating_mul(n));
        sums.paged = sums.paged.saturating_add(t.paged.saturating_mul(n));
        sums.any_8bit |= eight_bit(r.opt, &t.state_shape);
        let g = t.grad * n;
        let tied = layer.is_none()
            && class.component == Component::Embedding
            && r.tied_vocab.is_some()
            && class.shape.first() == r.tied_vocab.as_ref();
        out.hook_step
            .add(layer, class.component, tied, t.grad, t.scratch);
        match (layer, class.component) {
            // Each layer's own gradients are placed below.
            (Some(_), _) => {}
            (None, Component::Head) => out.head_grad += g,
            (None, Component::Embedding)
                if r.tied_vocab.is_some() && class.shape.first() == r.tied_vocab.as_ref() =>
            {
                // The tied matrix's gradient first appears at the head's backward.
                out.head_grad += g;
                out.embedding_backward_transient += 2 * g;
            }
            (None, _) => out.embedding_grad += g,
        }
    }
    layer_grads(tl, r, &trained, out);
    Ok(trained)
}

/// Places each layer's gradients in its backward: its composition's sum, computed once per
/// composition.
fn layer_grads(tl: &ShapeTallies, r: &Rules, trained: &[Option<Trained>], out: &mut StateBytes) {
    let mut per_kind: Vec<Option<u64>> = vec![None; tl.layer_kinds.len()];
    for l in r.layers_on_rank(tl) {
        let g = *per_kind[l.kind as usize].get_or_insert_with(|| {
            tl.layer_kinds[l.kind as usize]
                .iter()
                .map(|&(c, n)| trained[c as usize].as_ref().map_or(0, |t| t.grad * n))
                .sum()
        });
        if let Some(x) = out.layer_grads.get_mut(l.layer as usize) {
            *x += g;
        }
    }
}
