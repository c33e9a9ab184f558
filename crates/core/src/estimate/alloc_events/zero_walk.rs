//! ZeRO-1/2's buffers as the walk (`simulate.rs`) charges them, read off the same hooks the
//! stream runs (`zero.rs`) run on a byte meter: the bucket, each hook group's transient (the
//! reduce's flattened copy, an oversized gradient held, `grads_in_partition` made) and the
//! partition's gradients it leaves, the epilogue and the step.

use super::zero::{self, Live, Zero};
use super::{Param, Phase, Sink};
use crate::error::CoreError;
use crate::inventory::Inventory;
use crate::job::ResolvedJob;

/// Bytes live and their peak (a sink that keeps no events).
#[derive(Debug, Default)]
struct Meter {
    bytes: Vec<u64>,
    live: u64,
    peak: u64,
}

impl Meter {
    /// The peak from now on is measured from what is live now.
    fn mark(&mut self) -> u64 {
        self.peak = self.live;
        self.live
    }
}

impl Sink for Meter {
    fn alloc(&mut self, bytes: u64) -> u32 {
        self.bytes.push(bytes);
        self.live += bytes;
        self.peak = self.peak.max(self.live);
        self.bytes.len() as u32 - 1
    }

    fn alloc_at(&mut self, id: u32, bytes: u64) {
        if let Some(b) = self.bytes.get_mut(id as usize).filter(|b| **b == 0) {
            *b = bytes;
            self.live += bytes;
            self.peak = self.peak.max(self.live);
        }
    }

    fn free(&mut self, id: u32) {
        if let Some(b) = self.bytes.get_mut(id as usize) {
            self.live -= std::mem::take(b);
        }
    }

    fn reserve(&mut self, n: usize) -> u32 {
        let base = self.bytes.len() as u32;
        self.bytes.extend(std::iter::repeat_n(0, n));
        base
    }

    fn phase(&mut self, _: Phase) {}
    fn empty_cache(&mut self) {}
    fn stream(&mut self, _: u64) {}
}

/// One group of hooks as the walk sees it: the most it adds over what was live before it
/// (its gradients made just before it included), and ZeRO's gradient bytes held after it
/// (`grads_in_partition`, an oversized gradient waiting; the bucket apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Group {
    pub transient: u64,
    pub held: u64,
}

/// What the walk charges for one ZeRO rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkBuffers {
    pub stage: u8,
    /// The IPG bucket, from the first hook (the head's) to the epilogue.
    pub ipg: u64,
    /// Where the output side trains nothing (LoRA's frozen head and norm), the layer whose
    /// backward runs the first hook and sets the bucket up: the last with a trainable
    /// parameter. `None`: the head's.
    pub bucket_layer: Option<usize>,
    /// Gradients outside the blocks (16-bit, whole): the output side's, the tied matrix's
    /// (made at the head, summed at the embeddings), the other embeddings'.
    pub head_grads: u64,
    pub tied_grads: u64,
    pub embedding_grads: u64,
    /// Stage 2's hook groups: the output side, each layer, the embeddings.
    pub head: Group,
    pub layers: Vec<Group>,
    pub embedding: Group,
    /// ZeRO's bytes live as the epilogue begins: the bucket and the gradients held (stage 1:
    /// every gradient, whole; stage 2: the partition's).
    pub epilogue_from: u64,
    /// The epilogue (stage 1: every gradient, kept by the walk, reduced through the bucket).
    pub epilogue: Group,
    /// The step's most over the partition's gradients (steady state: the states made).
    pub step: u64,
    /// Accumulating over micro-batches, what the boundary's (the last, walked) carries in from
    /// the earlier ones: stage 1 every `.grad`, whole, and the bucket (made at the first
    /// micro-batch's first hook, freed by the boundary's epilogue); stage 2 the first
    /// micro-batch's `grads_in_partition` (`all_grad_tensors`). 0 with one micro-batch.
    pub carried: u64,
}

/// One group of ZeRO hooks (`ks`, newest first) run through the meter: under stage 2 each
/// gradient the tape did not free at its node is made, then hooked; the group's transient is
/// marked only where a reduce adds more than the gradients the hooks took.
fn hook_group(
    m: &mut Meter,
    live: &mut Live,
    params: &[Param],
    z: &Zero,
    ks: &[usize],
    ipg: u64,
) -> Group {
    let before = m.mark();
    if z.stage >= 2 {
        // A block's tape gradients are freed at their nodes before its hooks run.
        let ids: Vec<u32> = ks
            .iter()
            .map(|&k| match params[k].tape_grad {
                true => u32::MAX,
                false => m.alloc(params[k].grad),
            })
            .collect();
        for (&k, g) in ks.iter().zip(ids) {
            zero::hook(m, z, live, k, g);
        }
    }
    let made: u64 = ks
        .iter()
        .filter(|&&k| !params[k].tape_grad)
        .map(|&k| params[k].grad)
        .sum();
    let over = m.peak - before;
    Group {
        transient: if over > made { over } else { 0 },
        held: m.live - ipg,
    }
}

impl WalkBuffers {
    /// The figures for `params` laid out by `z` (`tied`: the first embedding is the head) at
    /// the accumulation boundary, after earlier micro-batches where `accumulating`.
    pub fn of(params: &[Param], z: &Zero, tied: bool, accumulating: bool) -> Self {
        let side = |emb: bool| -> Vec<usize> {
            (0..params.len())
                .rev()
                .filter(|&k| params[k].layer.is_none() && params[k].embedding == emb)
                .collect()
        };
        let first_emb = params.iter().position(|p| p.embedding && p.layer.is_none());
        let sum = |ks: &[usize]| ks.iter().map(|&k| params[k].grad).sum::<u64>();
        let tied_grads = first_emb.filter(|_| tied).map_or(0, |k| params[k].grad);
        let (mut m, mut live) = (Meter::default(), Live::default());
        zero::setup(&mut m, z, &mut live);
        let ipg = m.live;
        let carried = match (accumulating, z.stage >= 2) {
            (false, _) => 0,
            (true, false) => params.iter().map(|p| p.grad).sum(),
            (true, true) => {
                zero::carry_partition(&mut m, z, &mut live);
                m.live - ipg
            }
        };
        let group =
            |m: &mut Meter, live: &mut Live, ks: &[usize]| hook_group(m, live, params, z, ks, ipg);
        let head = group(&mut m, &mut live, &side(false));
        let layer_count = params
            .iter()
            .filter_map(|p| p.layer)
            .max()
            .map_or(0, |l| l + 1);
        let mut layers = vec![Group::default(); layer_count as usize];
        for l in (0..layer_count).rev() {
            let ks: Vec<usize> = (0..params.len())
                .rev()
                .filter(|&k| params[k].layer == Some(l))
                .collect();
            layers[l as usize] = group(&mut m, &mut live, &ks);
        }
        let embedding = group(&mut m, &mut live, &side(true));
        let grads: Vec<u32> = if z.stage < 2 {
            params.iter().map(|p| m.alloc(p.grad)).collect()
        } else {
            Vec::new()
        };
        let epilogue_from = m.mark();
        zero::reduce_gradients(&mut m, z, &mut live, &grads);
        zero::epilogue(&mut m, z, &mut live, true);
        let epilogue = Group {
            transient: m.peak - epilogue_from,
            held: m.live,
        };
        let before = m.mark();
        zero::step(&mut m, z, &mut live, false);
        let head_trains = side(false).iter().any(|&k| params[k].grad > 0);
        let bucket_layer = params
            .iter()
            .filter(|p| p.grad > 0 && !head_trains)
            .filter_map(|p| p.layer)
            .max()
            .map(|l| l as usize);
        WalkBuffers {
            stage: z.stage,
            ipg,
            bucket_layer,
            head_grads: sum(&side(false)),
            tied_grads,
            embedding_grads: sum(&side(true)) - tied_grads,
            head,
            layers,
            embedding,
            epilogue_from,
            epilogue,
            step: m.peak - before,
            carried,
        }
    }

    /// Stage 2 (the gradients go through the bucket as they are made).
    pub fn partitions_gradients(&self) -> bool {
        self.stage >= 2
    }

    /// Beside the model states at the epilogue's mark (`zero_marks::epilogue`): the bucket, the
    /// gradients held as it begins, and the most its reduce adds.
    pub fn at_epilogue(&self) -> u64 {
        self.epilogue_from + self.epilogue.transient
    }

    /// Beside the model states at the optimizer step's mark (`simulate.rs` `walk`): the
    /// partition's gradients the epilogue leaves and the most the step adds over them.
    pub fn at_step(&self) -> u64 {
        self.epilogue.held + self.step
    }

    /// Layer `i`'s group (empty past the end).
    pub fn layer(&self, i: usize) -> Group {
        self.layers.get(i).copied().unwrap_or_default()
    }
}

/// The walk's ZeRO figures for a job the stream writes as ZeRO-1/2 (`inputs::expressible`
/// and [`zero::params`]), or `None` (the heuristic's `comm_buffers` then stand).
pub fn walk_buffers(
    inv: Option<&Inventory>,
    job: &ResolvedJob,
    covered: bool,
    (tied, conv1d): (bool, bool),
) -> Result<Option<WalkBuffers>, CoreError> {
    let Some(inv) = inv.filter(|_| covered && job.framework == crate::job::Framework::Deepspeed)
    else {
        return Ok(None);
    };
    let accumulating = job.grad_accum > 1;
    Ok(zero::params(inv, job, conv1d)?.map(|(p, z)| WalkBuffers::of(&p, &z, tied, accumulating)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters of 6, 3, 5, 2 elements (2 bytes each) over 2 ranks in one layer, a bucket of
    /// 8: F = 16, P = 8, rank 0's partition the first two whole (9 elements, 18 B;
    /// `zero::tests`). Accumulating, the boundary micro-batch carries in under stage 2 the
    /// first's `grads_in_partition` (18 B), under stage 1 every `.grad` (16 · 2 = 32 B); with
    /// one micro-batch nothing. Stage 2's layer group then makes a fresh `grads_in_partition`
    /// (18 B) and holds both, 36 B, to the epilogue, which frees the fresh one: 18 B held.
    #[test]
    fn the_boundary_carries_what_earlier_micro_batches_leave() {
        let params: Vec<Param> = [6u64, 3, 5, 2]
            .iter()
            .map(|&n| Param {
                bytes: 2 * n,
                grad: 2 * n,
                layer: Some(0),
                ..Param::default()
            })
            .collect();
        for (stage, carried) in [(2u8, 18u64), (1, 32)] {
            let z = Zero {
                stage,
                ..Zero::of(vec![6, 3, 5, 2], 2, 2, 8)
            };
            assert_eq!(WalkBuffers::of(&params, &z, false, false).carried, 0);
            let w = WalkBuffers::of(&params, &z, false, true);
            assert_eq!(w.carried, carried, "stage {stage}");
            assert_eq!(w.epilogue.held, 18, "stage {stage}");
            if stage == 2 {
                assert_eq!(w.layer(0).held, 36);
            }
        }
    }
}
