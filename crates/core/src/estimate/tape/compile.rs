//! The saved set of a region compiled with `torch.compile` (inductor): AOTAutograd traces the
//! forward and backward into one joint graph and its min-cut partitioner
//! (`torch/_functorch/partitioners.py`, `min_cut_rematerialization_partition` / `solve_min_cut`,
//! torch 2.15, default `activation_memory_budget = 1.0`) chooses which forward tensors the
//! backward receives; everything else it recomputes in backward, fused by inductor into the
//! backward's kernels. Its rules, as this tape models them:
//!
//! - A compute-intensive op (`mm`, `bmm`, SDPA: `get_default_op_list().compute_intensive_ops`)
//!   is never recomputed, and a tensor an unfusible backward op reads (a matmul's input, which
//!   `mm`'s backward reads for the weight gradient) is "materialized in backward" and banned
//!   from recomputation (`should_ban_recomputation`, `ban_recompute_materialized_backward`):
//!   such saves stay as autograd makes them ([`Tape::op`], [`Tape::keep`]).
//! - Random ops are banned (a dropout's bool mask stays saved), and so are reductions whose
//!   output is 4× smaller than their input (`ban_recompute_reductions`: a norm's mean/rstd).
//! - A pointwise op (`recomputable_ops`) is recomputable; what it saves (an activation's input,
//!   a product's operands, `tanh`'s output, RMSNorm's normalized tensor, an autocast copy) is
//!   recorded with [`Tape::fused_op`] / [`Tape::keep_fused`] and resolved by the cut: the
//!   partitioner saves the cheaper side of the cut, so the backward gets either the tensor
//!   itself or its nearest non-pointwise producers (the chain's inputs, a matmul's output,
//!   which `get_node_weight` weighs ×1 against ×2 for an unmaterialized pointwise result), and
//!   recomputes the chain from them. Here: the producers when they cost no more bytes than the
//!   tensor (producers already saved, and the region's inputs, cost nothing).
//! - The residual stream: a block's output is read again after the next block's unfusible
//!   ops, so `ban_recompute_used_far_apart` bans it (the block keeps it as its output); the
//!   residual inside a block is pointwise in the block input and the branch output and is
//!   recomputed from them (the branch output is the cheaper side under autocast: 16 bit).
//!
//! A GELU chain thus keeps its input only, Llama's SiLU gate product keeps the gate and up
//! projections (not `silu(gate)`), RMSNorm keeps `rsqrt` (not the normalized tensor), eager
//! attention keeps the scores (not softmax's fp32 output: `_softmax` is recomputable, and its
//! max and sum, b·heads·s each, are left out here); the saves of matmuls, SDPA, LayerNorm's
//! statistics and dropout masks are autograd's. This is the cut `solve_min_cut` returned for
//! the measured tiny GPT-2, Llama and BERT models (the backward graphs' saved inputs listed by
//! `scripts/compile_saved.py`, `docs/techniques.md`), not a general min-cut solver.

use super::{Entry, Id, Tape};

impl Tape {
    /// A tape for a forward compiled with `torch.compile`.
    pub fn compiled() -> Self {
        Tape {
            compile: true,
            ..Self::default()
        }
    }

    /// A pointwise op (recomputable by the partitioner) reading `inputs` whose saves are left to
    /// the cut. Without compile it is exactly [`Tape::op`].
    pub fn fused_op(&mut self, inputs: &[Id], saved: &[Id], elements: u64, width: u64) -> Id {
        let out = self.norm_op(inputs, saved, elements, width);
        if self.compile {
            self.entries[out].pointwise = true;
        }
        out
    }

    /// An op that is not recomputed but whose saves are left to the cut (a norm, which saves its
    /// input: under compile an autocast copy of it is recomputed from the original). Without
    /// compile it is exactly [`Tape::op`].
    pub fn norm_op(&mut self, inputs: &[Id], saved: &[Id], elements: u64, width: u64) -> Id {
        if !self.compile || self.no_grad {
            return self.op(inputs, saved, elements, width);
        }
        let out = self.op(inputs, &[], elements, width);
        let at = self.entries[out].created;
        for &s in saved {
            self.entries[s].last_use = self.entries[s].last_use.max(at);
            self.deferred.push(s);
        }
        out
    }

    /// A tensor saved by a pointwise op's backward (e.g. `tanh`'s output): left to the cut.
    pub fn keep_fused(&mut self, id: Id) {
        if self.compile && !self.no_grad {
            self.deferred.push(id);
        } else {
            self.keep(id);
        }
    }

    /// The nearest tensors not made by a pointwise op that `id` is computed from.
    fn producers(&self, id: Id, out: &mut Vec<Id>) {
        let e: &Entry = &self.entries[id];
        if !e.pointwise || e.inputs.is_empty() {
            if !out.contains(&id) {
                out.push(id);
            }
            return;
        }
        for &i in &e.inputs {
            self.producers(i, out);
        }
    }

    /// Which tensors stay saved under the cut: autograd's materialized saves, then each
    /// deferred save as itself or as its producers, whichever costs fewer new bytes.
    pub(super) fn compiled_kept(&self) -> Vec<bool> {
        let mut kept: Vec<bool> = self.entries.iter().map(|e| e.kept).collect();
        for &s in &self.deferred {
            if kept[s] {
                continue;
            }
            let mut from = Vec::new();
            self.producers(s, &mut from);
            let cost: u64 = from
                .iter()
                .filter(|&&f| !kept[f] && !self.entries[f].external)
                .map(|&f| self.entries[f].bytes)
                .sum();
            if cost <= self.entries[s].bytes {
                for f in from {
                    kept[f] = true;
                }
            } else {
                kept[s] = true;
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2's `gelu_new` on a matmul output x of 10 fp32 elements (40 B), the way the block
    /// program writes it: eager autograd saves x (pow), tanh's output, 0.5·x and 1 + tanh
    /// (the final product's operands): 4 × 40 = 160 B. Compiled, every one of them is a
    /// pointwise function of x, so the cut saves x alone: 40 B.
    #[test]
    fn gelu_chain_keeps_its_input() {
        for (tape, saved) in [(Tape::new(), 160), (Tape::compiled(), 40)] {
            let mut t = tape;
            let w = t.external(10, 4);
            let x = t.op(&[w], &[], 10, 4);
            let p = t.fused_op(&[x], &[x], 10, 4);
            let c1 = t.fused_op(&[p], &[], 10, 4);
            let s1 = t.fused_op(&[x, c1], &[], 10, 4);
            let th = t.fused_op(&[s1], &[], 10, 4);
            t.keep_fused(th);
            let o = t.fused_op(&[th], &[], 10, 4);
            let h1 = t.fused_op(&[x], &[], 10, 4);
            let y = t.fused_op(&[h1, o], &[h1, o], 10, 4);
            // The output y is kept as the region's output (+40 B).
            assert_eq!(t.memory(Some(y), |b| b).kept, saved + 40);
        }
    }

    /// A pointwise result of two large inputs that is smaller than them (a broadcast
    /// reduction's partner): saving the 8-byte result beats saving two 40-byte producers.
    #[test]
    fn cheaper_side_of_the_cut() {
        let mut t = Tape::compiled();
        let a = t.op(&[], &[], 10, 4);
        let b = t.op(&[], &[], 10, 4);
        let small = t.fused_op(&[a, b], &[], 2, 4);
        let y = t.fused_op(&[small], &[small], 2, 4);
        assert_eq!(t.memory(Some(y), |b| b).kept, 8 + 8);
    }
}
