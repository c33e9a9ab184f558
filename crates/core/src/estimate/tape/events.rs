//! The tape as the caching allocator sees it: the allocations and frees one block issues, in
//! order, forward and backward. Each tensor is allocated when its op runs and freed once its
//! last reader has run (`c10::TensorImpl` refcount reaching zero after the op returns), unless
//! an op saved it for backward or it is the block's output. Backward runs the ops newest first
//! (`torch/csrc/autograd/engine.cpp`, `Engine::evaluate_function`): a node allocates the
//! gradients of its inputs, then its own output's gradient is released, then the tensors it
//! saved (`SavedVariable::reset_data` once the node has run). A tensor's gradient is therefore
//! live from the backward of its last reader to the backward of the op that made it — the
//! forward lifetime reversed, as the H200 snapshot of GPT-2 shows (`alloc` of the gradient,
//! `free` by `evaluate_function`, then `free` by `reset_data`, node after node).

use super::{GradRole, Id, Tape};

/// One allocator event of a block, on a local slot: slot `e` is tape entry `e`, slot `n + e`
/// its gradient (`n` entries). The top bit marks a free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev(pub u32);

const FREE: u32 = 1 << 31;

impl Ev {
    pub(super) fn alloc(slot: usize) -> Ev {
        Ev(slot as u32 & !FREE)
    }
    pub(super) fn free(slot: usize) -> Ev {
        Ev(slot as u32 | FREE)
    }
    /// Whether this event frees its slot.
    pub fn is_free(self) -> bool {
        self.0 & FREE != 0
    }
    /// The local slot.
    pub fn slot(self) -> u32 {
        self.0 & !FREE
    }
}

/// A block's allocator events, made once per distinct block and instantiated per layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockEvents {
    /// Bytes of each slot as requested (entries, then their gradients).
    pub sizes: Vec<u64>,
    /// The forward as autograd records it (saved tensors stay).
    pub forward: Vec<Ev>,
    /// The forward with nothing saved (`no_grad`, or a checkpointed block's first forward):
    /// every tensor but the output is freed after its last reader.
    pub forward_no_save: Vec<Ev>,
    /// The backward, newest op first; the input's gradient is left live (the previous block's
    /// output gradient), the weight gradients are the inventory's (added by the stream).
    pub backward: Vec<Ev>,
    /// The backward when every weight already has its `.grad` (a later micro-batch of
    /// gradient accumulation, or `zero_grad(set_to_none=False)`): each weight gradient the
    /// node makes is added into the parameter's `.grad` by `AccumulateGrad` and freed
    /// ([`Tape::backward_events`]).
    pub backward_accumulate: Vec<Ev>,
    /// Local slots of the block's input and output (their gradients: `+ n`).
    pub input: u32,
    pub output: u32,
    /// Number of tape entries (`n`).
    pub entries: u32,
    /// Slots of autocast's weight copies (freed at the region's exit when nothing saved them).
    pub copies: Vec<u32>,
    /// Slots of the weight gradients the backward makes and hands on (kept as `.grad`).
    pub weight_grads: Vec<u32>,
    /// Index in `forward_no_save` of the first allocation after the attention module's
    /// `cache.update` (`Tape::mark_attention`): the events before it have made q and the
    /// rotated k and v; `repeat_kv`, the mask's conversion and the kernel come after.
    pub attention_at: Option<u32>,
    /// Local slots of the keys and values the cache is made from (rebound to it).
    pub attention_kv: Option<[u32; 2]>,
    /// Slots of bitsandbytes' dequantized weights (`Tape::dequant`): the stream's alone, left
    /// out of [`BlockEvents::backward_peak`] (the walk adds the largest apart,
    /// `activations.rs`).
    pub stream_only: Vec<u32>,
    /// The block under selective checkpointing of its eager attention core
    /// (`tape/selective.rs`); `None` where the tape marked no single core.
    pub selective: Option<super::SelectiveEvents>,
    /// Slots held by a ctx attribute (`Tape::hold_in_ctx`): the backward does not release
    /// them; the stream frees them once the whole backward is done (the graph freed).
    pub held: Vec<u32>,
}

impl BlockEvents {
    /// The forward the stream runs: under `selective` checkpointing its core's
    /// ([`super::SelectiveEvents`]) where it has one, else the plain one.
    pub fn forward_under(&self, selective: bool) -> &[Ev] {
        match &self.selective {
            Some(sel) if selective => &sel.forward,
            _ => &self.forward,
        }
    }

    /// The backward the stream runs (`accumulate`: every weight holds its `.grad`), as
    /// [`BlockEvents::forward_under`] chooses.
    pub fn backward_under(&self, selective: bool, accumulate: bool) -> &[Ev] {
        match (&self.selective, accumulate) {
            (Some(sel), false) if selective => &sel.backward,
            (Some(sel), true) if selective => &sel.backward_accumulate,
            (_, false) => &self.backward,
            (_, true) => &self.backward_accumulate,
        }
    }

    /// The block's backward at its fullest, beyond what its forward left (its saved tensors
    /// and output), each tensor rounded as `round` says: the bytes it has made by then (the
    /// output's gradient it is handed, activation gradients, weight gradients kept as
    /// `.grad`) and the saved bytes its nodes have already released, at the moment the first
    /// less the second is largest. This is the backward's own scratch, read off the same
    /// autograd sequence the allocator stream runs (`backward_events`): eager attention's
    /// softmax backward holds the saved probabilities, their gradient and the scores'
    /// gradient together — two more sequence²-sized tensors than the forward had beside its
    /// kept ones — after the MLP's backward has released what the MLP saved.
    pub fn backward_peak(&self, round: impl Fn(u64) -> u64) -> BackwardPeak {
        self.peak_of(&self.backward, round)
    }

    /// [`BlockEvents::backward_peak`] of the accumulating backward (`backward_accumulate`):
    /// each weight gradient is made, added into the kept `.grad` and freed, so at most the
    /// ones in flight are held at the block's fullest moment.
    pub fn backward_accumulate_peak(&self, round: impl Fn(u64) -> u64) -> BackwardPeak {
        self.peak_of(&self.backward_accumulate, round)
    }

    /// The fullest moment of the backward sequence `events` over what the forward left.
    fn peak_of(&self, events: &[Ev], round: impl Fn(u64) -> u64) -> BackwardPeak {
        let n = self.entries as usize;
        let size = |slot: u32| round(self.sizes.get(slot as usize).copied().unwrap_or(0));
        let mut live = vec![false; 2 * n];
        for &e in &self.forward {
            if let Some(l) = live.get_mut(e.slot() as usize) {
                *l = !e.is_free();
            }
        }
        let from_forward = live.clone();
        // The output's gradient, made by the block after.
        let out_grad = self.output + self.entries;
        let (mut made, mut released) = (size(out_grad), 0u64);
        if let Some(l) = live.get_mut(out_grad as usize) {
            *l = true;
        }
        let mut best = BackwardPeak { made, released: 0 };
        for &e in events {
            let slot = e.slot();
            if !self.stream_only.is_empty() && self.stream_only.binary_search(&slot).is_ok() {
                continue;
            }
            let Some(l) = live.get_mut(slot as usize) else {
                continue;
            };
            let old = from_forward.get(slot as usize).copied().unwrap_or(false);
            if e.is_free() && *l {
                *l = false;
                if old {
                    released += size(slot);
                } else {
                    made = made.saturating_sub(size(slot));
                }
            } else if !e.is_free() && !*l {
                *l = true;
                made += size(slot);
                if made.saturating_sub(released) > best.net() {
                    best = BackwardPeak { made, released };
                }
            }
        }
        best
    }
}

/// A block backward's fullest moment ([`BlockEvents::backward_peak`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardPeak {
    /// Bytes the backward has made and still holds.
    pub made: u64,
    /// Bytes of the forward's saved tensors (and output) it has released by then.
    pub released: u64,
}

impl BackwardPeak {
    /// What the backward adds over what the forward left.
    pub fn net(&self) -> u64 {
        self.made.saturating_sub(self.released)
    }
}

impl Tape {
    /// Autocast's 16-bit copy of a weight of `bytes`, made by the next op and saved by it
    /// (`at::autocast::cached_cast`: the cast is cached for the autocast region and the matmul
    /// saves it for its input gradient). Stream-only: [`Tape::memory`] leaves it out.
    pub fn weight_copy(&mut self, bytes: u64) {
        let at = self.ops + 1;
        let saved = !self.no_grad;
        self.entries.push(super::Entry {
            bytes,
            width: 2,
            kept: saved,
            external: false,
            last_use: at,
            created: at,
            pointwise: false,
            inputs: Vec::new(),
            saver: if saved { at } else { usize::MAX },
            copy: true,
            wgrad: GradRole::None,
            detached: false,
        });
    }

    /// The gradient of a weight the last op read, made by that op's backward (after the input
    /// gradient: `addmm`/`mm` backward computes `grad_input` first, as the H200 trace orders
    /// them) and kept by `AccumulateGrad` as the parameter's `.grad`. Stream-only:
    /// [`Tape::memory`] leaves it out. Nothing under `no_grad`.
    pub fn weight_grad(&mut self, bytes: u64) {
        self.backward_tensor(bytes, GradRole::Kept);
    }

    /// A 16-bit weight gradient that autocast's `ToCopyBackward` casts to the fp32
    /// parameter's dtype (the H200 SmolLM2 bf16-mixed trace: 1.69 MiB bf16, then 3.38 MiB fp32,
    /// then the bf16 one freed); record it just before [`Tape::weight_grad`].
    pub fn weight_grad_cast_source(&mut self, bytes: u64) {
        self.backward_tensor(bytes, GradRole::CastSource);
    }

    /// A frozen bitsandbytes 4-bit weight dequantized for the next op (record it just before
    /// the op): `MatMul4Bit.forward` (`bitsandbytes/autograd/_functions.py`) runs
    /// `F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)`, so the tensor
    /// is made before the op's output and dropped when the op returns (`dequantize_4bit`'s
    /// `torch.empty(shape, dtype)`, `functional.py`). It saves only the packed `B`
    /// (`ctx.tensors = (None, B)`), so nothing of it outlives the op. Stream-only:
    /// [`Tape::memory`] and the backward's peak leave it out. Nothing of zero bytes.
    pub fn dequant(&mut self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let at = self.ops + 1;
        self.entries
            .push(super::Entry::transient(bytes, at, GradRole::Dequant));
    }

    /// The last op's weight dequantized again by its backward (record it just after the op):
    /// `MatMul4Bit.backward` computes `grad_A = torch.matmul(grad_output,
    /// F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())`: made before the input's
    /// gradient, dropped once the matmul returns. Nothing under `no_grad`.
    pub fn dequant_backward(&mut self, bytes: u64) {
        if bytes > 0 {
            self.backward_tensor(bytes, GradRole::DequantBackward);
        }
    }

    /// A temporary of the last op's backward, freed at once (a reduction's buffer).
    pub fn backward_temp(&mut self, bytes: u64) {
        self.backward_tensor(bytes, GradRole::Temp);
    }

    fn backward_tensor(&mut self, bytes: u64, role: GradRole) {
        if self.no_grad {
            return;
        }
        let at = self.ops;
        self.entries.push(super::Entry::transient(bytes, at, role));
    }

    /// The block's events with `input` its input tensor and `output` its output.
    pub fn events(&self, input: Id, output: Id) -> BlockEvents {
        let n = self.entries.len();
        let saved: Vec<bool> = (0..n)
            .map(|i| self.is_saved(i) || self.copy_saved(i))
            .collect();
        let mut sizes: Vec<u64> = self.entries.iter().map(|e| e.bytes).collect();
        sizes.extend(self.entries.iter().map(|e| e.bytes));
        let no_save = self.forward_events(input, output, &vec![false; n]);
        let attention_at = self.attention_op.and_then(|(op, _, _)| {
            no_save
                .iter()
                .position(|e| !e.is_free() && self.entries[e.slot() as usize].created >= op)
                .map(|i| i as u32)
        });
        BlockEvents {
            forward: self.forward_events(input, output, &saved),
            forward_no_save: no_save,
            attention_at,
            attention_kv: self.attention_op.map(|(_, k, v)| [k as u32, v as u32]),
            backward: self.backward_events(input, output, &saved, false),
            backward_accumulate: self.backward_events(input, output, &saved, true),
            selective: self.selective_events(input, output, &saved),
            sizes,
            input: input as u32,
            output: output as u32,
            entries: n as u32,
            copies: (0..n)
                .filter(|&i| self.entries[i].copy)
                .map(|i| i as u32)
                .collect(),
            weight_grads: (0..n)
                .filter(|&i| self.entries[i].wgrad == GradRole::Kept)
                .map(|i| i as u32)
                .collect(),
            stream_only: (0..n)
                .filter(|&i| {
                    matches!(
                        self.entries[i].wgrad,
                        GradRole::Dequant | GradRole::DequantBackward
                    )
                })
                .map(|i| i as u32)
                .collect(),
            held: {
                let mut h: Vec<u32> = self.ctx_held.iter().map(|&i| i as u32).collect();
                h.sort_unstable();
                h
            },
        }
    }

    fn copy_saved(&self, i: Id) -> bool {
        let e = &self.entries[i];
        e.copy && e.kept
    }

    /// Whether entry `i` is one the block allocates (not a parameter or a tensor made before).
    pub(super) fn allocated_here(&self, i: Id) -> bool {
        let e = &self.entries[i];
        !e.external && e.wgrad == GradRole::None && e.bytes > 0
    }

    /// Op by op: the op's new tensors, then the tensors it read for the last time.
    pub(super) fn forward_events(&self, input: Id, output: Id, saved: &[bool]) -> Vec<Ev> {
        let mut keyed: Vec<(usize, u8, usize)> = Vec::with_capacity(2 * self.entries.len());
        for (i, e) in self.entries.iter().enumerate() {
            if e.wgrad == GradRole::Dequant {
                // Made for its op and gone when the op returns (`Tape::dequant`).
                keyed.push((e.created, 0, i));
                keyed.push((e.created, 1, i));
                continue;
            }
            let mine = self.allocated_here(i);
            if mine {
                keyed.push((e.created, 0, i));
            }
            // A weight copy lives in autocast's cache: saved by its matmul, or (nothing saved)
            // freed when the autocast region exits, which the stream does.
            let freed = (mine || i == input) && i != output && !saved[i] && !e.copy;
            if freed && e.bytes > 0 {
                keyed.push((e.last_use.max(e.created), 1, i));
            }
        }
        keyed.sort_unstable();
        keyed
            .into_iter()
            .map(|(_, free, i)| if free == 1 { Ev::free(i) } else { Ev::alloc(i) })
            .collect()
    }

    /// Whether entry `i` gets a gradient: a floating tensor the block made (or its input)
    /// that some later op read. Masks (1 byte) and indices (8 bytes) get none.
    fn has_grad(&self, i: Id, input: Id) -> bool {
        let e = &self.entries[i];
        let floating = e.width == 2 || e.width == 4;
        floating
            && !e.copy
            && !e.detached
            && (self.allocated_here(i) || i == input)
            && e.last_use > e.created
    }

    /// Newest op first: the gradients of the tensors this op read last, the op's own output
    /// gradient released, then what it saved. `accumulate`: the parameters hold a `.grad`
    /// already, so each weight gradient is released after its node — `AccumulateGrad`
    /// (`torch/csrc/autograd/functions/accumulate_grad.h`, `accumulateGrad`: with grad mode
    /// off it runs `variable_grad += new_grad` in place) is queued first once the node has
    /// returned (its sequence number is the highest, `engine.cpp`'s ready queue), and the node
    /// has by then dropped its output gradient and released its saved tensors
    /// (`Engine::evaluate_function`).
    fn backward_events(&self, input: Id, output: Id, saved: &[bool], accumulate: bool) -> Vec<Ev> {
        let release = |i: Id| self.saved_release(i);
        self.backward_keyed(input, output, saved, accumulate, release)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }

    /// The op whose node releases saved entry `i` (`SavedVariable::reset_data` once the
    /// earliest op that saved it has run; its maker's when none did).
    pub(super) fn saved_release(&self, i: Id) -> usize {
        let e = &self.entries[i];
        if e.saver == usize::MAX {
            e.created
        } else {
            e.saver
        }
    }

    /// [`Tape::backward_events`] with each event's op (the node that issues it), a saved
    /// entry released at `release`'s op.
    pub(super) fn backward_keyed(
        &self,
        input: Id,
        output: Id,
        saved: &[bool],
        accumulate: bool,
        release: impl Fn(Id) -> usize,
    ) -> Vec<(usize, Ev)> {
        let n = self.entries.len();
        // (op, kind: 0 made by the node / 1 output gradient / 2 saved / 3 accumulated, place, free, slot)
        let mut keyed: Vec<(usize, u8, usize, u8, usize)> = Vec::with_capacity(3 * n);
        for (i, e) in self.entries.iter().enumerate() {
            match e.wgrad {
                GradRole::None => {}
                GradRole::Dequant => continue,
                GradRole::DequantBackward => {
                    // Before the input gradient (place 0, a lower slot), freed after it.
                    keyed.push((e.created, 0, 0, 0, i));
                    keyed.push((e.created, 0, 0, 1, i));
                    continue;
                }
                GradRole::Kept => {
                    keyed.push((e.created, 0, i + 1, 0, i));
                    if accumulate {
                        keyed.push((e.created, 3, i + 1, 1, i));
                    }
                    continue;
                }
                GradRole::CastSource => {
                    keyed.push((e.created, 0, i + 1, 0, i));
                    keyed.push((e.created, 0, i + 2, 1, i));
                    continue;
                }
                GradRole::Temp => {
                    keyed.push((e.created, 0, i + 1, 0, i));
                    keyed.push((e.created, 0, i + 1, 1, i));
                    continue;
                }
            }
            // The input gradients first (place 0), then the weights' (their entry's place).
            if self.has_grad(i, input) && i != output {
                keyed.push((e.last_use, 0, 0, 0, n + i));
            }
            let grad_freed = i != input && (i == output || self.has_grad(i, input));
            if grad_freed {
                keyed.push((e.created, 1, 0, 1, n + i));
            }
            let released = !self.ctx_held.contains(&i);
            if released && saved[i] && (self.allocated_here(i) || i == input) && i != output {
                keyed.push((release(i), 2, 0, 1, i));
            }
        }
        // Newest op first; within one node: what it makes, the output gradient, the saved,
        // then (accumulating) the weight gradients added into `.grad`.
        keyed.sort_unstable_by(|a, b| {
            b.0.cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
                .then(a.4.cmp(&b.4))
        });
        keyed
            .into_iter()
            .map(|(op, _, _, free, s)| {
                let ev = if free == 0 { Ev::alloc(s) } else { Ev::free(s) };
                (op, ev)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y = x·W (saves x), z = gelu(y) (saves y), out = z + x: the order PyTorch issues.
    #[test]
    fn a_linear_and_an_activation() {
        let mut t = Tape::new();
        let x = t.external(10, 4);
        let y = t.op(&[x], &[x], 10, 4); // op 1
        let z = t.op(&[y], &[y], 10, 4); // op 2
        let out = t.op(&[z, x], &[], 10, 4); // op 3
        let ev = t.events(x, out);
        let n = ev.entries as usize;
        assert_eq!(n, 4);
        // Forward: y made; z made; out made, then z freed (last read by op 3). x and y are
        // saved, out is the output: nothing else freed.
        assert_eq!(
            ev.forward,
            vec![Ev::alloc(y), Ev::alloc(z), Ev::alloc(out), Ev::free(z)]
        );
        // Without saves: y freed after op 2, x (input) and z after op 3.
        assert_eq!(
            ev.forward_no_save,
            vec![
                Ev::alloc(y),
                Ev::alloc(z),
                Ev::free(y),
                Ev::alloc(out),
                Ev::free(x),
                Ev::free(z)
            ]
        );
        // Backward op 3: grads of z and x (both last read there), out's grad released.
        // Op 2: grad of y, z's grad released, y (saved by op 2) released.
        // Op 1: y's grad released, x (saved by op 1) released; x's grad stays for the block
        // before.
        assert_eq!(
            ev.backward,
            vec![
                Ev::alloc(n + x),
                Ev::alloc(n + z),
                Ev::free(n + out),
                Ev::alloc(n + y),
                Ev::free(n + z),
                Ev::free(y),
                Ev::free(n + y),
                Ev::free(x),
            ]
        );
    }

    /// The same tape's backward at its fullest, every tensor 40 B: the forward leaves y and
    /// out; the backward is handed out's gradient (made 40), makes x's and z's (120), frees
    /// out's (80), makes y's (120 again, not more), then frees z's, y (saved: released 40),
    /// y's; x is the block before's. Fullest: 120 made, nothing released yet.
    #[test]
    fn backward_peak_of_a_linear_and_an_activation() {
        let mut t = Tape::new();
        let x = t.external(10, 4);
        let y = t.op(&[x], &[x], 10, 4);
        let z = t.op(&[y], &[y], 10, 4);
        let out = t.op(&[z, x], &[], 10, 4);
        let peak = t.events(x, out).backward_peak(|b| b);
        assert_eq!(
            peak,
            BackwardPeak {
                made: 120,
                released: 0
            }
        );
        assert_eq!(peak.net(), 120);
    }

    #[test]
    fn weight_copies_live_until_their_matmul_backward() {
        let mut t = Tape::new();
        let x = t.external(8, 2);
        t.weight_copy(64);
        let w = 1; // the copy's entry
        let y = t.op(&[x], &[x], 8, 2);
        let m = t.memory(Some(y), |b| b);
        assert_eq!(m.kept, 16); // the copy is not counted by memory()
        let ev = t.events(x, y);
        assert_eq!(ev.forward, vec![Ev::alloc(w), Ev::alloc(y)]);
        assert!(ev.backward.contains(&Ev::free(w)));
    }

    /// y = f(x) (saves nothing), z = g(y) holding y as a ctx attribute (`hold_in_ctx`), the
    /// block's output. Forward: y made, then the input x freed (nothing saved it), z made; y
    /// stays (held). Backward of
    /// g: y's gradient made, z's released; of f: y's gradient released — and y itself is not
    /// released by any node (a ctx attribute): it is the block's `held`, for the stream to
    /// free with the graph. Saved through `save_for_backward` instead (`op(.., &[y], ..)`),
    /// g's node releases it after z's gradient.
    #[test]
    fn a_ctx_held_tensor_outlives_the_backward() {
        let mut t = Tape::new();
        let x = t.external(10, 2);
        let y = t.op(&[x], &[], 10, 2);
        let z = t.op(&[y], &[], 10, 2);
        t.hold_in_ctx(y);
        let ev = t.events(x, z);
        let n = ev.entries as usize;
        assert_eq!(ev.forward, vec![Ev::alloc(y), Ev::free(x), Ev::alloc(z)]);
        let (gy, gz, gx) = (n + y, n + z, n + x);
        let want = [Ev::alloc(gy), Ev::free(gz), Ev::alloc(gx), Ev::free(gy)];
        assert_eq!(ev.backward, want);
        assert_eq!(ev.held, vec![y as u32]);
        assert_eq!(t.memory(Some(z), |b| b).kept, 40);
        let mut saved = Tape::new();
        let x = saved.external(10, 2);
        let y = saved.op(&[x], &[], 10, 2);
        let z = saved.op(&[y], &[y], 10, 2);
        let ev = saved.events(x, z);
        assert!(ev.held.is_empty());
        assert_eq!(
            ev.backward[..3],
            [Ev::alloc(n + y), Ev::free(n + z), Ev::free(y)]
        );
    }
}
