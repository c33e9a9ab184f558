//! What one data-parallel rank adds to the training stream around the step (`train.rs`):
//! DDP's gradient ready order (`ddp.rs`), FSDP2's unshard, reshard and reduce-scatter (`fsdp.rs`), DeepSpeed ZeRO-1/2's gradient
//! hooks and epilogue (`zero.rs`). A child of `train.rs`, reading its `Live` state.

use super::{Live, Sink, TrainInputs};

/// The order the backward makes the parameters' gradients (DDP's rebuilt buckets follow it):
/// the output side's (last first), the blocks' newest first (each block's last parameter
/// first), the embeddings'.
pub(super) fn ready_order(inp: &TrainInputs, live: &Live) -> Vec<usize> {
    let side = |emb: bool| {
        (0..inp.params.len())
            .rev()
            .filter(move |&k| inp.params[k].text_outside() && inp.params[k].embedding == emb)
    };
    let mut out: Vec<usize> = side(false).collect();
    for l in (0..live.start.len().saturating_sub(1)).rev() {
        let (a, b) = (live.start[l] as usize, live.start[l + 1] as usize);
        out.extend(live.by_layer[a..b].iter().rev().map(|&k| k as usize));
    }
    out.extend(side(true));
    out
}

/// FSDP's pre-forward (or pre-backward) of `unit`.
pub(super) fn fsdp_pre<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    unit: usize,
    forward: bool,
) {
    if let Some(f) = inp.fsdp {
        super::super::fsdp::pre(s, f, &mut live.fsdp, unit, forward);
    }
}

/// FSDP's post-forward of layer `unit` (resharded under FULL_SHARD).
pub(super) fn fsdp_post_forward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    unit: usize,
) {
    if let Some(f) = inp.fsdp {
        super::super::fsdp::post_forward(s, f, &mut live.fsdp, unit);
    }
}

/// The backward's final callback under FSDP: the root's post-backward (its gradients, the
/// output side's and the embeddings', reduce-scattered), a deferred first layer's, then the
/// last reduce-scatter input released.
pub(super) fn fsdp_root_post_backward<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live) {
    let Some(f) = inp.fsdp else {
        return;
    };
    let mut grads = Vec::new();
    for (k, p) in inp.params.iter().enumerate() {
        if p.layer.is_none() {
            grads.push(std::mem::replace(&mut live.grads[k], u32::MAX));
        }
    }
    grads.push(std::mem::replace(&mut live.tied_head, u32::MAX));
    super::super::fsdp::final_callback(s, f, &mut live.fsdp, &grads);
}

/// A layer's post-backward under FSDP: its unsharded gradients (the tape's and the stream's)
/// reduce-scattered and freed.
pub(super) fn fsdp_layer_post_backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    layer: usize,
    tape: &[u32],
) {
    let Some(f) = inp.fsdp else {
        return;
    };
    let mut grads = tape.to_vec();
    let (a, b) = (live.start[layer] as usize, live.start[layer + 1] as usize);
    for j in a..b {
        let k = live.by_layer[j] as usize;
        grads.push(std::mem::replace(&mut live.grads[k], u32::MAX));
    }
    super::super::fsdp::layer_post_backward(s, f, &mut live.fsdp, layer, grads);
}

/// ZeRO's gradient hooks for the parameters outside the blocks on one side, newest first:
/// the first sets the bucket up; under stage 2 each gradient goes through the bucket. Only
/// a trainable parameter has a hook (`create_gradient_handling_hooks`: `requires_grad`), so a
/// side of frozen ones (LoRA's base) sets nothing up.
pub(super) fn zero_side_hooks<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    embedding: bool,
) {
    let Some(z) = inp.zero else {
        return;
    };
    let side = |p: &super::Param| p.layer.is_none() && p.embedding == embedding;
    if inp.params.iter().any(|p| side(p) && p.grad > 0) {
        super::super::zero::setup(s, z, &mut live.zero);
    }
    for k in (0..inp.params.len()).rev() {
        let p = &inp.params[k];
        if z.stage >= 2 && p.layer.is_none() && p.embedding == embedding {
            let g = std::mem::replace(&mut live.grads[k], u32::MAX);
            super::super::zero::hook(s, z, &mut live.zero, k, g);
        }
    }
}

/// A layer's ZeRO hooks after its backward: the bucket set up where no earlier hook did (the
/// output side frozen: LoRA), then under stage 2 each gradient through it (its weight
/// gradients freed at their nodes: `BlockEvents::backward_accumulate`), newest first.
pub(super) fn zero_layer_hooks<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    layer: usize,
) {
    let Some(z) = inp.zero else {
        return;
    };
    let (a, b) = (live.start[layer] as usize, live.start[layer + 1] as usize);
    let trains = |j: usize| inp.params[live.by_layer[j] as usize].grad > 0;
    if (a..b).any(trains) {
        super::super::zero::setup(s, z, &mut live.zero);
    }
    if z.stage < 2 {
        return;
    }
    for j in (a..b).rev() {
        let k = live.by_layer[j] as usize;
        let g = std::mem::replace(&mut live.grads[k], u32::MAX);
        super::super::zero::hook(s, z, &mut live.zero, k, g);
    }
}

/// A block's tape gradients under ZeRO-1, kept as its parameters' `.grad` in module order
/// (the tape makes them in the block's op order, which is the inventory's for its linears);
/// any the layer's parameters do not take are kept apart and dropped by the epilogue.
pub(super) fn zero_keep_tape_grads(inp: &TrainInputs, live: &mut Live, layer: usize, tape: &[u32]) {
    let (a, b) = (live.start[layer] as usize, live.start[layer + 1] as usize);
    let mut next = tape.iter();
    for j in a..b {
        let k = live.by_layer[j] as usize;
        if inp.params[k].tape_grad {
            if let Some(&g) = next.next() {
                live.grads[k] = g;
            }
        }
    }
    live.tape_grads.extend(next);
}

/// ZeRO after the backward (`engine.backward` → `allreduce_gradients`): stage 2 runs the
/// epilogue after every micro-batch; stage 1 only at the accumulation `boundary` (before it
/// the gradients accumulate in `.grad` and the bucket `setup_buckets` made stays), where it
/// reduces every gradient in module order, then the epilogue.
pub(super) fn zero_epilogue<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    boundary: bool,
) {
    let Some(z) = inp.zero else {
        return;
    };
    if z.stage < 2 && !boundary {
        return;
    }
    if z.stage < 2 {
        let grads = std::mem::replace(&mut live.grads, vec![u32::MAX; inp.params.len()]);
        super::super::zero::reduce_gradients(s, z, &mut live.zero, &grads);
    }
    super::super::zero::epilogue(s, z, &mut live.zero, boundary);
    for g in live.tape_grads.drain(..) {
        s.free(g);
    }
}
