//! Selective checkpointing of eager attention's core as the allocator sees it: the core — from
//! `repeat_kv` to the context's transpose, the b·heads·s² scores, probabilities and dropout
//! between — runs inside a checkpoint that keeps its inputs (q, k, v) and none of what its ops
//! save, and is run again in backward, saving, before its own nodes. This is Korthikanti et
//! al. 2022 §5's "selective activation recomputation" (Megatron-LM's
//! `_checkpointed_attention_forward` around its core attention) as PyTorch runs it with
//! `torch.utils.checkpoint(..., use_reentrant=False)` (torch 2.x `utils/checkpoint.py`, the
//! variant transformers 5.x enables, wrapped around `eager_attention_forward`):
//!
//! - **forward**: `_NoopSaveInputs` saves the region's inputs; each op's saved tensors go
//!   through `_checkpoint_hook`'s pack hook, which stores a handle instead, so a tensor the
//!   core makes lives to its last reader only (the context, saved by `o_proj`, stays);
//! - **backward**: the first node of the core that unpacks a saved tensor (the newest core op
//!   that saved one, `probs @ v`) runs `recompute_fn` under `_recomputation_hook`: the core's
//!   ops again, from its first, each saved tensor kept in `frame.recomputed`, the others freed
//!   after their last reader; with early stop (the default) the recomputation raises
//!   `_StopRecomputationError` once the last saved tensor is packed — a matmul's saved
//!   inputs are packed before its kernel runs, so that op's output is never made. Each node
//!   then releases what it unpacked as the plain backward does;
//! - the inputs live as long as the frame: until the core's earliest saving node has run and
//!   its holders are gone.

use super::events::Ev;
use super::{Id, Tape};

/// A block's events under selective checkpointing of its attention core.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectiveEvents {
    /// The forward: the core saves nothing but its inputs.
    pub forward: Vec<Ev>,
    /// The backward, the core recomputed before its newest saving node.
    pub backward: Vec<Ev>,
    /// The same with every weight's `.grad` held (`BlockEvents::backward_accumulate`).
    pub backward_accumulate: Vec<Ev>,
    /// Slots the plain block saves and this one recomputes (the core's saved tensors).
    pub dropped: Vec<u32>,
    /// Slots of the core's inputs the checkpoint holds that the plain block does not keep
    /// (under autocast the fp32 rotated q and k the matmul casts, and v before `repeat_kv`).
    pub held: Vec<u32>,
}

impl SelectiveEvents {
    /// Bytes the block keeps less than the plain one: [`SelectiveEvents::dropped`] less
    /// [`SelectiveEvents::held`], each slot of `sizes` rounded by `round` (what the walk's
    /// selective block drops and recomputes, `activations.rs`).
    pub fn core_bytes(&self, sizes: &[u64], round: impl Fn(u64) -> u64) -> u64 {
        let sum = |slots: &[u32]| -> u64 {
            slots
                .iter()
                .map(|&k| round(sizes.get(k as usize).copied().unwrap_or(0)))
                .sum()
        };
        sum(&self.dropped).saturating_sub(sum(&self.held))
    }
}

impl Tape {
    /// The next op's index (for [`Tape::mark_core`]).
    pub fn next_op(&self) -> usize {
        self.ops + 1
    }

    /// Marks the ops from `first` to the last recorded as an attention core that selective
    /// checkpointing wraps. A tape with more than one core is not written
    /// ([`Tape::selective_events`] gives none).
    pub fn mark_core(&mut self, first: usize) {
        if first <= self.ops {
            self.core.get_or_insert((first, self.ops));
            self.cores += 1;
        }
    }

    /// The block's [`SelectiveEvents`] from its plain `saved` set; `None` without one marked
    /// core, under `no_grad` or compile, or where the core saves nothing.
    pub(super) fn selective_events(
        &self,
        input: Id,
        output: Id,
        saved: &[bool],
    ) -> Option<SelectiveEvents> {
        let (first, last) = self.core.filter(|_| self.cores == 1)?;
        if self.no_grad || self.compile {
            return None;
        }
        let in_core = |op: usize| (first..=last).contains(&op);
        let made_inside = |i: Id| in_core(self.entries[i].created) && self.allocated_here(i);
        // Saved by an op of the core: recomputed, not kept.
        let recomputed = |i: Id| saved[i] && made_inside(i) && in_core(self.entries[i].saver);
        let savers = (0..saved.len()).filter(|&i| recomputed(i));
        let open = savers.clone().map(|i| self.entries[i].saver).min()?;
        let stop = savers.map(|i| self.entries[i].saver).max()?;
        let is_input = |i: Id| {
            let e = &self.entries[i];
            e.created < first && e.last_use >= first && self.allocated_here(i)
        };
        let kept: Vec<bool> = (0..saved.len())
            .map(|i| (saved[i] && !recomputed(i)) || is_input(i))
            .collect();
        let mut backward_saved = kept.clone();
        for (i, s) in backward_saved.iter_mut().enumerate() {
            *s |= recomputed(i);
        }
        // An input no op before the core saved goes with the frame, at the core's earliest
        // saving node.
        let release = |i: Id| {
            if is_input(i) && !(saved[i] && self.entries[i].saver < first) {
                open
            } else {
                self.saved_release(i)
            }
        };
        let recompute = self.recompute_events(first, stop, saved, &kept);
        let backward = |accumulate: bool| {
            let keyed = self.backward_keyed(input, output, &backward_saved, accumulate, release);
            let at = keyed.partition_point(|&(op, _)| op > stop);
            let mut out: Vec<Ev> = keyed[..at].iter().map(|&(_, e)| e).collect();
            out.extend_from_slice(&recompute);
            out.extend(keyed[at..].iter().map(|&(_, e)| e));
            out
        };
        let slots = |f: &dyn Fn(Id) -> bool| -> Vec<u32> {
            (0..saved.len())
                .filter(|&i| f(i))
                .map(|i| i as u32)
                .collect()
        };
        Some(SelectiveEvents {
            forward: self.forward_events(input, output, &kept),
            backward: backward(false),
            backward_accumulate: backward(true),
            dropped: slots(&recomputed),
            held: slots(&|i| is_input(i) && !saved[i]),
        })
    }

    /// The core's ops `first..=stop` run again: each tensor made (the `stop` op's only where
    /// it saves it: early stop comes before its kernel), the unsaved freed after their last
    /// reader in the run; what the forward kept is live already.
    fn recompute_events(
        &self,
        first: usize,
        stop: usize,
        saved: &[bool],
        kept: &[bool],
    ) -> Vec<Ev> {
        let mut keyed: Vec<(usize, u8, usize)> = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let made = (first..=stop).contains(&e.created) && self.allocated_here(i) && !kept[i];
            if !made || (e.created == stop && !saved[i]) {
                continue;
            }
            keyed.push((e.created, 0, i));
            if !saved[i] {
                keyed.push((e.last_use.clamp(e.created, stop), 1, i));
            }
        }
        keyed.sort_unstable();
        keyed
            .into_iter()
            .map(|(_, free, i)| if free == 1 { Ev::free(i) } else { Ev::alloc(i) })
            .collect()
    }
}
