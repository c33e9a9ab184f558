//! The loss's and the head's backward in the training stream: the whole loss's, a chunked
//! loss's per-projection weight gradients (`chunked_loss.rs`, `linear_ce.rs`), Liger's saved
//! gradients (`fused_ce.rs`). Split from `train.rs`, whose `Live` and `Fwd` they read.

use super::{first_embedding, grad_of, output_side_grads, Fwd, Live, TrainInputs};
use crate::estimate::alloc_events::Sink;

/// One chunk's projection backward, weight side (`chunked_loss::backward`): the first (the
/// last chunk's) makes the output side's gradients as the whole head's backward does, with
/// the autograd thread's cuBLAS workspace on its first matmul; each later chunk's weight
/// gradient is added into autograd's input buffer and freed. Under autocast the matmuls'
/// gradients are of the weight's 16-bit copy: the first is the buffer (returned) the later
/// ones are added into, and the output side's gradients are made after every projection, from
/// it (`ToCopyBackward`, [`output_side_grads`]).
pub(super) fn chunk_head_grad<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    which: crate::estimate::alloc_events::chunked_loss::ChunkGrad,
) -> u32 {
    use crate::estimate::alloc_events::chunked_loss::ChunkGrad;
    let copy = inp.chunked_output.as_ref().map_or(0, |c| c.weight_copy);
    let head = if inp.tied {
        first_embedding(inp)
    } else {
        head_param(inp)
    };
    match which {
        ChunkGrad::First => {
            let buffer = if copy > 0 {
                s.alloc(copy)
            } else {
                output_side_grads(s, inp, live, None);
                u32::MAX
            };
            if !live.second_handle {
                s.alloc(inp.workspace);
                live.second_handle = true;
            }
            buffer
        }
        ChunkGrad::Later { second, buffer } => {
            let bytes = if copy > 0 {
                copy
            } else {
                head.map_or(0, |k| inp.params[k].grad)
            };
            let g = s.alloc(bytes);
            if !second {
                s.free(g);
                return buffer;
            }
            // The buffered first contribution: the copy's gradient, the tied head's, or the
            // head's `.grad` (the stream makes it at the first projection).
            let held = match (copy > 0, inp.tied, head) {
                (true, _, _) => buffer,
                (false, true, _) => live.tied_head,
                (false, false, Some(k)) => live.grads[k],
                _ => u32::MAX,
            };
            let sum = s.alloc(bytes);
            s.free(held);
            s.free(g);
            match (copy > 0, inp.tied, head) {
                (true, _, _) => return sum,
                (false, true, _) => live.tied_head = sum,
                (false, false, Some(k)) => live.grads[k] = sum,
                _ => {}
            }
            u32::MAX
        }
        ChunkGrad::AfterAll { buffer } => {
            if copy > 0 {
                output_side_grads(s, inp, live, Some(buffer));
            }
            u32::MAX
        }
    }
}

/// The untied head's weight: the largest output-side parameter (the final norm's are a
/// vector).
fn head_param(inp: &TrainInputs) -> Option<usize> {
    inp.params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.text_outside() && !p.embedding)
        .max_by_key(|(_, p)| p.bytes)
        .map(|(k, _)| k)
}

/// Liger's fused loss backward (`fused_ce.rs`): the saved `grad_weight` becomes the head's
/// `.grad` (`AccumulateGrad` steals it; added into `.grad` and freed when one is held; a tied
/// head's is the embedding's first contribution), the final norm's gradients as the whole
/// head's backward makes them, the autograd thread's cuBLAS workspace before the blocks'
/// first matmul; the saved `grad_input` is the head input's gradient (returned).
pub(super) fn fused_backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    live: &mut Live,
    saved: crate::estimate::alloc_events::fused_ce::Saved,
) -> u32 {
    crate::estimate::alloc_events::fused_ce::backward(s);
    let head = if inp.tied { None } else { head_param(inp) };
    for (k, p) in inp.params.iter().enumerate().rev() {
        if !p.text_outside() || p.embedding {
            continue;
        }
        if Some(k) != head {
            grad_of(s, live, k, p.grad);
        } else if live.grads[k] == u32::MAX {
            live.grads[k] = saved.grad_weight;
        } else {
            s.free(saved.grad_weight);
        }
    }
    if inp.tied {
        live.tied_head = saved.grad_weight;
    }
    if !live.second_handle {
        s.alloc(inp.workspace);
        live.second_handle = true;
    }
    saved.grad_input
}

/// The whole loss's backward and the head's: the loss's gradients, dlogits, the output side's
/// weight gradients, the head input's gradient (returned).
pub(super) fn loss_and_head_backward<S: Sink>(
    s: &mut S,
    inp: &TrainInputs,
    fwd: &Fwd,
    live: &mut Live,
) -> u32 {
    let l = &inp.loss;
    // nll_loss_backward, then _log_softmax_backward_data (dlogits in the loss width).
    let g1 = s.alloc(l.log_softmax);
    let g2 = s.alloc(l.log_softmax);
    s.free(g1);
    s.free(fwd.loss.log_softmax);
    s.free(fwd.loss.labels_shifted);
    let dlogits = if l.upcast > 0 {
        let d = s.alloc(l.logits);
        s.free(g2);
        d
    } else {
        g2
    };
    // The head's matmul backward: its weight gradient, the autograd thread's own cuBLAS
    // handle on its first matmul, the input gradient.
    output_side_grads(s, inp, live, None);
    if !live.second_handle {
        s.alloc(inp.workspace);
        live.second_handle = true;
    }
    let grad = s.alloc(inp.head_grad_input);
    s.free(dlogits);
    grad
}
