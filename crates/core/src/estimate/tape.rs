//! A symbolic autograd tape: the ops of one forward region with, for each, the tensor it makes
//! and the inputs autograd saves for backward. Replaying it gives the bytes a region leaves
//! saved, the bytes alive at its worst moment, and what is freed when.
//!
//! The rules are PyTorch's (`tools/autograd/derivatives.yaml`): a matmul saves both inputs,
//! an elementwise multiply saves the operands that the other's gradient needs (none when the
//! other is a constant), `add` saves nothing, softmax saves its output, LayerNorm its input, mean
//! and rstd, dropout (`native_dropout`) its bool mask. Under autocast (`torch.autocast`, CUDA's
//! op lists in `aten/src/ATen/autocast_mode.cpp`) a matmul-class op casts fp32 inputs to 16 bit
//! (a new tensor, which is what it saves) and an fp32-list op (softmax, layer_norm, pow, ...)
//! casts 16-bit inputs up.

mod compile;
mod events;
mod selective;

pub use events::{BackwardPeak, BlockEvents, Ev};
pub use selective::SelectiveEvents;

/// What a tensor made by an op's backward (not an activation gradient) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GradRole {
    /// Not one: a forward tensor.
    None,
    /// A weight's gradient, kept as `.grad`.
    Kept,
    /// A 16-bit weight gradient cast to the parameter's fp32 by autocast's `ToCopyBackward`:
    /// freed once the next (the kept fp32) gradient exists.
    CastSource,
    /// A reduction's temporary, freed at once.
    Temp,
    /// bitsandbytes' dequantized weight (or its fp32 absmax) made for the next op's forward
    /// and freed when it returns (`Tape::dequant`): a forward tensor of the stream only.
    Dequant,
    /// The same made again by the op's backward, before its input gradient, and freed after
    /// it (`MatMul4Bit.backward`).
    DequantBackward,
}

/// A symbolic tensor on the tape.
pub type Id = usize;

#[derive(Debug, Clone)]
struct Entry {
    bytes: u64,
    /// Bytes per element (4 fp32, 2 bf16/fp16, 1 bool/int8, 8 int64).
    width: u64,
    /// Saved for backward by some op, or kept as the region's output.
    kept: bool,
    /// Made outside this region (the region's input, parameters): never counted.
    external: bool,
    /// Index of the last op that reads it.
    last_use: usize,
    created: usize,
    /// Made by a pointwise op that `torch.compile`'s partitioner may recompute in backward
    /// (recorded only on a compiled tape, with `inputs`).
    pointwise: bool,
    /// The op's inputs (a compiled tape only).
    inputs: Vec<Id>,
    /// The earliest op that saved it (`usize::MAX`: none): backward runs ops newest first, so
    /// the saved tensor is released when this op's node has run (`SavedVariable::reset_data`).
    saver: usize,
    /// Autocast's 16-bit copy of a weight (`Tape::weight_copy`): an allocation of the stream
    /// only, left out of [`Tape::memory`] (the block counts copies apart, `weight_copies`).
    copy: bool,
    /// A tensor this op's backward makes beside the activation gradients (stream-only, like
    /// `copy`): [`GradRole`].
    wgrad: GradRole,
    /// Made inside a custom autograd Function's forward (bitsandbytes' int8 kernels: the
    /// quantized input, its scales, the int32 product): a forward tensor autograd never sees,
    /// so no gradient flows to it ([`Tape::detached_op`]).
    detached: bool,
}

impl Entry {
    /// A stream-only tensor of `bytes` (16-bit) made and dropped at op `at`, saved by nothing:
    /// a dequantized weight or a backward temporary ([`GradRole`] says which).
    fn transient(bytes: u64, at: usize, role: GradRole) -> Self {
        Entry {
            bytes,
            width: 2,
            kept: false,
            external: false,
            last_use: at,
            created: at,
            pointwise: false,
            inputs: Vec::new(),
            saver: usize::MAX,
            copy: false,
            wgrad: role,
            detached: false,
        }
    }
}

/// Records one region's ops.
#[derive(Debug, Clone, Default)]
pub struct Tape {
    entries: Vec<Entry>,
    ops: usize,
    /// Under `torch.no_grad()` (inference) nothing is saved.
    no_grad: bool,
    /// Tensors live while transformers' Python names hold them (`blocks/mod.rs`
    /// `Prog::hold`), not only to their last reader.
    python_holds: bool,
    /// The region runs under `torch.compile`: what pointwise ops save is decided by the
    /// partitioner's cut (`compile.rs`), not by autograd's per-op rule.
    compile: bool,
    /// Tensors saved by pointwise ops (or a norm's input), in order: under compile the cut
    /// decides whether each is saved or recomputed from its nearest non-pointwise producers.
    deferred: Vec<Id>,
    /// The op that runs the attention kernel (its output's maker) and the keys and values it
    /// reads, where a static KV cache's per-call tensors go in the inference stream
    /// (`alloc_events/static_cache.rs`).
    attention_op: Option<(usize, Id, Id)>,
    /// The ops of eager attention's core (`Tape::mark_core`: first and last) that selective
    /// checkpointing wraps, and how many cores the region marked (one is written).
    core: Option<(usize, usize)>,
    cores: u32,
    /// Tensors a custom autograd Function holds as a ctx attribute (`MatMul8bitLt`'s
    /// `ctx.tensors`): autograd's release of a node's saved tensors does not reach them, so
    /// they live until the graph is freed, after the whole backward ([`Tape::hold_in_ctx`]).
    ctx_held: Vec<Id>,
}

/// What a region leaves behind and how high it goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegionMemory {
    /// Bytes of tensors made in the region and still alive after it (saved for backward, or
    /// its output).
    pub kept: u64,
    /// Most bytes of region-made tensors alive at once during the region.
    pub peak: u64,
}

impl Tape {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tape for a forward under `torch.no_grad()`: ops save nothing.
    pub fn no_grad() -> Self {
        Tape {
            no_grad: true,
            ..Self::default()
        }
    }

    /// Records the next ops under `torch.no_grad()` (`on`) or not; returns the previous mode.
    pub fn set_no_grad(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.no_grad, on)
    }

    /// A no-grad tape whose tensors live while Python names hold them (`python_holds`).
    pub fn with_python_holds(mut self, on: bool) -> Self {
        self.python_holds = on && self.no_grad;
        self
    }

    /// A tensor that exists before the region (its input, a parameter, a shared mask).
    pub fn external(&mut self, elements: u64, width: u64) -> Id {
        self.entries.push(Entry {
            bytes: elements.saturating_mul(width),
            width,
            kept: false,
            external: true,
            last_use: 0,
            created: 0,
            pointwise: false,
            inputs: Vec::new(),
            saver: usize::MAX,
            copy: false,
            wgrad: GradRole::None,
            detached: false,
        });
        self.entries.len() - 1
    }

    /// Records an op reading `inputs`, saving `saved` (a subset of the inputs) and making one
    /// tensor of `elements` × `width` bytes.
    /// Marks the next op as the first after the attention module's `cache.update` on keys `k`
    /// and values `v` (the first mark of a block holds: the decoder's attention marks it
    /// before its kernel's inputs, `blocks/attention.rs` `core_after_projections`).
    pub fn mark_attention(&mut self, k: Id, v: Id) {
        self.attention_op.get_or_insert((self.ops + 1, k, v));
    }

    pub fn op(&mut self, inputs: &[Id], saved: &[Id], elements: u64, width: u64) -> Id {
        self.ops += 1;
        let at = self.ops;
        for &i in inputs.iter().chain(saved) {
            self.entries[i].last_use = at;
        }
        if !self.no_grad {
            for &i in saved {
                self.entries[i].kept = true;
                self.entries[i].saver = self.entries[i].saver.min(at);
            }
        }
        self.entries.push(Entry {
            bytes: elements.saturating_mul(width),
            width,
            kept: false,
            external: false,
            last_use: at,
            created: at,
            pointwise: false,
            inputs: if self.compile {
                inputs.to_vec()
            } else {
                Vec::new()
            },
            saver: usize::MAX,
            copy: false,
            wgrad: GradRole::None,
            detached: false,
        });
        self.entries.len() - 1
    }

    /// An op inside a custom autograd Function's forward (`Entry::detached`): it reads
    /// `inputs`, saves nothing and makes a tensor no gradient reaches.
    pub fn detached_op(&mut self, inputs: &[Id], elements: u64, width: u64) -> Id {
        let id = self.op(inputs, &[], elements, width);
        self.entries[id].detached = true;
        id
    }

    /// Marks tensors as saved by an op recorded later in another way (e.g. a fused kernel's
    /// extra outputs).
    pub fn keep(&mut self, id: Id) {
        if !self.no_grad {
            let e = &mut self.entries[id];
            e.kept = true;
            e.saver = e.saver.min(self.ops.max(e.created));
        }
    }

    /// Marks `id` as held by the last op's ctx (`Tape::ctx_held`); nothing under `no_grad`.
    pub fn hold_in_ctx(&mut self, id: Id) {
        if !self.no_grad && !self.ctx_held.contains(&id) {
            self.keep(id);
            self.ctx_held.push(id);
        }
    }

    /// Extends a tensor's life to the current op (it is read again later, e.g. a residual).
    pub fn touch(&mut self, id: Id) {
        self.entries[id].last_use = self.ops.max(self.entries[id].last_use);
    }

    /// A cast to `width` bytes per element: a new tensor, or `x` itself when already there.
    pub fn cast(&mut self, x: Id, width: u64) -> Id {
        if self.width(x) == width {
            x
        } else {
            let n = self.elements(x);
            self.fused_op(&[x], &[], n, width)
        }
    }

    /// The Python RMSNorm of the Llama family over `rows` rows of `dim` (`modeling_llama.py`
    /// LlamaRMSNorm): upcast to fp32, `x · rsqrt(mean(x²) + eps)` (saving the fp32 input and
    /// the rsqrt), cast back, times the weight, which saves the normalized tensor for the
    /// weight's gradient. Gemma's (`modeling_gemma.py` GemmaRMSNorm) multiplies by `1 + w` in
    /// fp32 before the cast back, and OLMo-2/3's (`modeling_olmo2.py` Olmo2RMSNorm, `(weight ·
    /// hidden_states).to(input_dtype)`) by `w` in fp32, so their saved normalized tensor is
    /// fp32 ([`RmsWeight`]). A frozen weight (LoRA) needs no gradient: the multiply then saves
    /// only what the input's gradient needs.
    pub fn rms_norm(
        &mut self,
        x: Id,
        dim: u64,
        param_width: u64,
        weight: RmsWeight,
        frozen: bool,
    ) -> Id {
        let rows = self.elements(x) / dim.max(1);
        let in_w = self.width(x);
        let x32 = self.cast(x, 4);
        let sq = self.fused_op(&[x32], &[x32], rows * dim, 4);
        let mean = self.op(&[sq], &[], rows, 4);
        let eps = self.fused_op(&[mean], &[], rows, 4);
        let r = self.fused_op(&[eps], &[], rows, 4);
        self.keep_fused(r);
        let hn = self.fused_op(&[x32, r], &[x32, r], rows * dim, 4);
        match weight {
            RmsWeight::OnePlusInFp32 => {
                let scale = self.op(&[], &[], dim, 4);
                let saved: &[Id] = if frozen { &[scale] } else { &[hn, scale] };
                let out = self.fused_op(&[hn, scale], saved, rows * dim, 4);
                self.cast(out, in_w)
            }
            RmsWeight::InFp32 => {
                // The weight is the parameter itself: the multiply saves `hn` for its gradient.
                let saved: &[Id] = if frozen { &[] } else { &[hn] };
                let out = self.fused_op(&[hn], saved, rows * dim, 4);
                let out = self.cast(out, in_w);
                // `hidden_states` (fp32) is a local until the return (under `no_grad`, where
                // nothing saves it, that is when it is freed).
                if self.python_holds {
                    self.touch(hn);
                }
                out
            }
            // No weight: the normalized fp32 tensor cast back.
            RmsWeight::Without => self.cast(hn, in_w),
            RmsWeight::AfterCast => {
                let h16 = self.cast(hn, in_w);
                let saved: &[Id] = if frozen { &[] } else { &[h16] };
                let out = self.fused_op(&[h16], saved, rows * dim, param_width.max(in_w));
                // `return self.weight * hidden_states.to(input_dtype)`: the fp32
                // `hidden_states` is a local until the return, after the product is made
                // (under `no_grad`, where nothing saves it, that is when it is freed).
                if self.python_holds {
                    self.touch(hn);
                }
                out
            }
        }
    }

    /// Whether some op saved this tensor for backward (under compile: the partitioner's cut).
    pub fn is_saved(&self, id: Id) -> bool {
        if self.compile {
            self.compiled_kept()[id]
        } else {
            self.entries[id].kept
        }
    }

    pub fn width(&self, id: Id) -> u64 {
        self.entries[id].width
    }

    pub fn elements(&self, id: Id) -> u64 {
        let e = &self.entries[id];
        e.bytes / e.width.max(1)
    }

    /// Replays the tape: bytes kept after the region and the most alive at once. Each tensor is
    /// rounded up as `round` says (the caching allocator's 512-byte granularity).
    pub fn memory(&self, output: Option<Id>, round: impl Fn(u64) -> u64) -> RegionMemory {
        let mut kept = 0u64;
        let mut delta = vec![0i128; self.ops + 2];
        let cut = self.compile.then(|| self.compiled_kept());
        for (i, e) in self.entries.iter().enumerate() {
            if e.external || e.copy || e.wgrad != GradRole::None {
                continue;
            }
            let b = round(e.bytes);
            let saved = cut.as_ref().map_or(e.kept, |c| c[i]);
            let stays = saved || Some(i) == output;
            if stays {
                kept += b;
                delta[e.created] += b as i128;
            } else {
                delta[e.created] += b as i128;
                // Freed once its last reader has run.
                delta[(e.last_use + 1).min(self.ops + 1)] -= b as i128;
            }
        }
        let mut live = 0i128;
        let mut peak = 0i128;
        for d in delta {
            live += d;
            peak = peak.max(live);
        }
        RegionMemory {
            kept,
            peak: peak.max(0) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_and_transient() {
        let mut t = Tape::new();
        let x = t.external(10, 4);
        // y = x @ W saves x (external: not counted); z = softmax(y) saves z; w = z * 2 (scalar:
        // saves nothing) is the output.
        let y = t.op(&[x], &[x], 10, 4);
        let z = t.op(&[y], &[], 10, 4);
        t.keep(z);
        let w = t.op(&[z], &[], 10, 4);
        let m = t.memory(Some(w), |b| b);
        assert_eq!(m.kept, 80); // z and w
        assert_eq!(m.peak, 80); // y is freed once z exists... y, z live together at op 2
    }
}

/// How a family's RMSNorm applies its weight (see [`Tape::rms_norm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmsWeight {
    /// `w · x.to(input_dtype)`: Llama and most families.
    AfterCast,
    /// `(x · (1 + w.float())).to(input_dtype)`: Gemma 1–3, Qwen3-Next.
    OnePlusInFp32,
    /// `(w · x).to(input_dtype)` with `x` in fp32: OLMo-2, OLMo-3.
    InFp32,
    /// No weight (`Gemma3nRMSNorm(with_scale=False)`): `x.float() · pow(mean(x²) + eps,
    /// −0.5)`, `type_as(x)`.
    Without,
}
