//! The forward programs of transformer blocks, written on the [`Tape`] op by op as Hugging Face
//! transformers 5.x runs them (`modeling_llama.py`, `modeling_gpt2.py`, `modeling_bert.py`,
//! ...), so that the bytes a block saves for backward come out of the same rules autograd
//! applies. One program serves every family; the IR's norm kind, attention kind, MLP kind,
//! residual layout and dropout pick its branches.

use super::tape::{Id, Tape};
use crate::job::AttentionKernel;
use crate::model::{
    AttentionKind, DenseMlp, Layer, Mlp, ModelSpec, Naming, NormKind, NormSlot, Positions,
};

/// Numeric setting of one forward pass.
#[derive(Debug, Clone, Copy)]
pub struct Numerics {
    /// Width of parameters and of the residual stream (4 under fp32 and autocast, 2 in pure
    /// 16-bit training).
    pub param: u64,
    /// Width of matmul outputs (2 under autocast or pure 16-bit, 4 in fp32).
    pub compute: u64,
    /// `torch.autocast` is on: matmul-class ops cast fp32 inputs to 16 bit; fp32-list ops cast up.
    pub autocast: bool,
}

/// Everything a block program needs besides the layer itself.
#[derive(Debug, Clone, Copy)]
pub struct BlockCtx<'a> {
    pub spec: &'a ModelSpec,
    pub batch: u64,
    /// Query length (tokens per sequence processed by this block).
    pub seq: u64,
    /// Key/value length seen by attention (= seq in training).
    pub kv_seq: u64,
    pub num: Numerics,
    pub kernel: AttentionKernel,
    /// Dropout probabilities from the config (attention probabilities, hidden states).
    pub attn_dropout: f64,
    pub hidden_dropout: f64,
    pub causal: bool,
    /// Inference: the forward runs under `no_grad` and saves nothing.
    pub no_grad: bool,
    /// LoRA on these module names: (targets, rank, lora_dropout).
    pub lora: Option<(&'a [String], u64, f64)>,
}

/// The projections of a block, for LoRA's module names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Q,
    K,
    V,
    O,
    Qkv,
    Gate,
    Up,
    Down,
}

impl Role {
    /// The module name of this projection in the family's Hugging Face code.
    pub fn name(self, naming: Naming) -> &'static str {
        use Role::*;
        match naming {
            Naming::Gpt2 | Naming::BigCode => match self {
                Q | K | V | Qkv => "c_attn",
                O => "c_proj",
                Gate | Up => "c_fc",
                Down => "c_proj",
            },
            Naming::Bert | Naming::Roberta => match self {
                Q => "query",
                K => "key",
                V => "value",
                Qkv => "query",
                O | Down => "dense",
                Gate | Up => "dense",
            },
            Naming::NeoX | Naming::Falcon => match self {
                Q | K | V | Qkv => "query_key_value",
                O => "dense",
                Gate | Up => "dense_h_to_4h",
                Down => "dense_4h_to_h",
            },
            Naming::Opt => match self {
                Q => "q_proj",
                K => "k_proj",
                V => "v_proj",
                Qkv => "q_proj",
                O => "out_proj",
                Gate | Up => "fc1",
                Down => "fc2",
            },
            Naming::T5 => match self {
                Q | Qkv => "q",
                K => "k",
                V => "v",
                O => "o",
                Gate => "wi_0",
                Up => "wi_1",
                Down => "wo",
            },
            Naming::Phi3 => match self {
                Q | K | V | Qkv => "qkv_proj",
                O => "o_proj",
                Gate | Up => "gate_up_proj",
                Down => "down_proj",
            },
            Naming::Mixtral => match self {
                Q | Qkv => "q_proj",
                K => "k_proj",
                V => "v_proj",
                O => "o_proj",
                Gate => "w1",
                Up => "w3",
                Down => "w2",
            },
            _ => match self {
                Q | Qkv => "q_proj",
                K => "k_proj",
                V => "v_proj",
                O => "o_proj",
                Gate => "gate_proj",
                Up => "up_proj",
                Down => "down_proj",
            },
        }
    }
}

/// Whether the family's RMSNorm scales by `1 + w` in fp32 (Gemma 1–3) rather than by `w` after
/// casting back (Llama and the rest).
pub(crate) fn gemma_norm(spec: &ModelSpec) -> bool {
    spec.model_type.starts_with("gemma")
}

/// What one block leaves saved and how high it goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockMemory {
    /// Bytes saved for backward plus the block's output (what stays after the block).
    pub kept: u64,
    /// Most block-made bytes alive at once during the block's forward.
    pub peak: u64,
    /// Autocast's 16-bit copies of this block's weights (kept until the block's backward).
    pub weight_copies: u64,
    /// Bytes of the block's input that the block frees: nothing in it saves its input (e.g. a
    /// norm that saves an fp32 copy instead), so the input dies once the residual add has read
    /// it and the block's net addition is `kept − input_freed`. Measured per-layer increments
    /// of pure-bf16 Llama steps show exactly this.
    pub input_freed: u64,
}

/// A tape with autocast-aware helpers for one block.
struct Prog<'a> {
    t: Tape,
    c: BlockCtx<'a>,
    tokens: u64,
    weight_copies: u64,
}

impl<'a> Prog<'a> {
    fn new(c: BlockCtx<'a>) -> Self {
        Prog {
            t: if c.no_grad {
                Tape::no_grad()
            } else {
                Tape::new()
            },
            tokens: c.batch.saturating_mul(c.seq),
            c,
            weight_copies: 0,
        }
    }

    fn w(&self, id: Id) -> u64 {
        self.t.width(id)
    }

    /// The input of a matmul-class op: under autocast an fp32 tensor is cast to 16 bit (a new
    /// tensor, the one saved); otherwise the tensor itself.
    fn mm_input(&mut self, x: Id) -> Id {
        if self.c.num.autocast && self.w(x) == 4 {
            let n = self.t.elements(x);
            self.t.op(&[x], &[], n, 2)
        } else {
            x
        }
    }

    /// A projection that LoRA may wrap: PEFT's `lora.Linear` runs the base layer, then
    /// `lora_B(lora_A(dropout(x)))`: the dropout makes a copy of the input (and a mask) that
    /// lora_A saves, lora_A's r-wide output is saved by lora_B, and the sum is a new tensor.
    fn linear_named(&mut self, x: Id, inp: u64, out: u64, bias: bool, role: Role) -> Id {
        let y = self.linear(x, inp, out, bias);
        let Some((targets, rank, dropout)) = self.c.lora else {
            return y;
        };
        let name = role.name(self.c.spec.naming);
        if !targets.iter().any(|t| t == name) {
            return y;
        }
        let rows = self.t.elements(x) / inp.max(1);
        // PEFT keeps adapters in fp32 beside a 16-bit base (`autocast_adapter_dtype=True`) and
        // casts their input to the adapter dtype first (`_cast_input_dtype`), so without
        // autocast the dropout, lora_A's saved input and its output are fp32; under autocast
        // lora_A casts its input to 16 bit as any linear does.
        let x = if self.c.num.autocast {
            x
        } else {
            self.cast(x, 4)
        };
        let xd = if dropout > 0.0 {
            self.dropout(x, dropout)
        } else {
            x
        };
        let xa = self.mm_input(xd);
        self.t.keep(xa);
        let w = if self.c.num.autocast { 2 } else { 4 };
        let a = self.t.op(&[xa], &[xa], rows * rank, w);
        self.t.keep(a);
        let b = self.t.op(&[a], &[], rows * out, w);
        let scaled = self.t.op(&[b], &[], rows * out, w);
        // `result + lora_B(...) * scaling` promotes; PEFT casts the sum back to the base dtype.
        let yw = self.w(y);
        let sum = self.elementwise(&[y, scaled], &[]);
        self.cast(sum, yw)
    }

    /// `nn.Linear` / `Conv1D` over the last dim: saves its input; autocast caches a 16-bit copy
    /// of an fp32 weight (and bias) for the whole forward.
    fn linear(&mut self, x: Id, inp: u64, out: u64, bias: bool) -> Id {
        let xin = self.mm_input(x);
        if self.c.num.autocast && self.c.num.param == 4 {
            self.weight_copies += 2 * inp * out + if bias { 2 * out } else { 0 };
        }
        let width = if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        };
        let rows = self.t.elements(x) / inp.max(1);
        // A frozen weight (PEFT base) needs no weight gradient, so autograd does not save the
        // input (derivatives.yaml: mm saves `self` only for `mat2`'s gradient).
        if self.c.lora.is_some() {
            self.t.op(&[xin], &[], rows * out, width)
        } else {
            self.t.op(&[xin], &[xin], rows * out, width)
        }
    }

    /// An elementwise op over `xs` that saves `saved`; output width follows type promotion.
    fn elementwise(&mut self, xs: &[Id], saved: &[Id]) -> Id {
        let n = xs.iter().map(|&x| self.t.elements(x)).max().unwrap_or(0);
        let width = xs.iter().map(|&x| self.w(x)).max().unwrap_or(4);
        self.t.op(xs, saved, n, width)
    }

    /// A cast to `width` bytes (a no-op when already there).
    fn cast(&mut self, x: Id, width: u64) -> Id {
        self.t.cast(x, width)
    }

    /// `native_dropout`: keeps a 1-byte mask; the output replaces the input.
    fn dropout(&mut self, x: Id, p: f64) -> Id {
        if p <= 0.0 {
            return x;
        }
        let n = self.t.elements(x);
        let w = self.w(x);
        let out = self.t.op(&[x], &[], n, w);
        let mask = self.t.op(&[x], &[], n, 1);
        self.t.keep(mask);
        out
    }

    fn residual(&mut self, a: Id, b: Id) -> Id {
        self.elementwise(&[a, b], &[])
    }

    /// A norm over `dim` features of `x`.
    fn norm(&mut self, x: Id, kind: NormKind, dim: u64) -> Id {
        let rows = self.t.elements(x) / dim.max(1);
        match kind {
            // native_layer_norm saves input, mean and rstd (fp32); in the autocast fp32 list.
            NormKind::LayerNorm { .. } => {
                let xin = if self.c.num.autocast {
                    self.cast(x, 4)
                } else {
                    x
                };
                let out_w = self.w(xin);
                let out = self.t.op(&[xin], &[xin], rows * dim, out_w);
                let mean = self.t.op(&[xin], &[], rows, 4);
                let rstd = self.t.op(&[xin], &[], rows, 4);
                self.t.keep(mean);
                self.t.keep(rstd);
                out
            }
            NormKind::RmsNorm => self.t.rms_norm(
                x,
                dim,
                self.c.num.param,
                gemma_norm(self.c.spec),
                self.c.lora.is_some(),
            ),
        }
    }

    /// The activation of an MLP on `x`.
    fn activation(&mut self, x: Id, name: &str) -> Id {
        match name {
            // NewGELUActivation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in Python ops;
            // pow is in the autocast fp32 list.
            "gelu_new" | "gelu_fast" => {
                let xp = if self.c.num.autocast {
                    self.cast(x, 4)
                } else {
                    x
                };
                let p = self.t.op(&[xp], &[xp], self.t.elements(x), self.w(xp));
                let c1 = self.elementwise(&[p], &[]);
                let s1 = self.elementwise(&[x, c1], &[]);
                let c2 = self.elementwise(&[s1], &[]);
                let th = self.elementwise(&[c2], &[]);
                self.t.keep(th);
                let o = self.elementwise(&[th], &[]);
                let h1 = self.elementwise(&[x], &[]);
                self.elementwise(&[h1, o], &[h1, o])
            }
            // ReLU saves its output.
            "relu" => {
                let out = self.elementwise(&[x], &[]);
                self.t.keep(out);
                out
            }
            // F.gelu (erf or tanh approximation), F.silu, ...: save the input.
            _ => self.elementwise(&[x], &[x]),
        }
    }

    fn mlp(&mut self, x: Id, d: &DenseMlp, h: u64) -> Id {
        // T5's feed-forward drops out its inner activations before `wo`
        // (`T5DenseActDense` / `T5DenseGatedActDense`, `dropout_rate`): a mask of the inner
        // width, and the dropped tensor is what `wo` saves.
        let inner_dropout = if self.c.spec.naming == Naming::T5 {
            self.c.hidden_dropout
        } else {
            0.0
        };
        if d.gated {
            let g = self.linear_named(x, h, d.ffn, d.bias, Role::Gate);
            let a = self.activation(g, &d.activation);
            let u = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
            let p = self.elementwise(&[a, u], &[a, u]);
            let p = self.dropout(p, inner_dropout);
            self.linear_named(p, d.ffn, h, d.bias, Role::Down)
        } else {
            let up = self.linear_named(x, h, d.ffn, d.bias, Role::Up);
            let a = self.activation(up, &d.activation);
            let a = self.dropout(a, inner_dropout);
            self.linear_named(a, d.ffn, h, d.bias, Role::Down)
        }
    }

    /// Routed experts as transformers 5 runs them by default (`experts_implementation =
    /// "grouped_mm"`, `integrations/moe.py::grouped_mm_experts_forward`): the router (an
    /// `nn.Linear`, under autocast like any other, with a softmax in fp32 and `topk`), then the
    /// `top_k · tokens` routed rows sorted by expert and gathered, two `grouped_mm`s over the
    /// stacked expert weights and the weighting by the router scores. `grouped_mm` is not on
    /// autocast's lists and casts its input to the weights' dtype, so with fp32 weights the
    /// expert path runs and saves in fp32 even under autocast, and makes no 16-bit weight copies.
    fn moe(&mut self, x: Id, m: &crate::model::MoeMlp, h: u64) -> Id {
        let logits = self.linear(x, h, m.experts, false);
        let probs = self.cast(logits, 4);
        let probs = self.t.op(&[probs], &[], self.tokens * m.experts, 4);
        self.t.keep(probs);
        // topk saves its int64 indices.
        let top_idx = self.t.op(&[probs], &[], self.tokens * m.top_k, 8);
        self.t.keep(top_idx);
        let rows = self.tokens * m.top_k;
        let xw = self.w(x);
        let w = self.c.num.param;
        // `hidden_states[perm // top_k]` and `sample_weights[perm]` save their int64 indices.
        let token_idx = self.t.op(&[top_idx], &[], rows, 8);
        let perm = self.t.op(&[top_idx], &[], rows, 8);
        self.t.keep(token_idx);
        self.t.keep(perm);
        let scores = self.t.op(&[probs], &[], rows, 4);
        self.t.keep(scores);
        // The per-expert offsets (int32) grouped_mm saves.
        let offsets = self.t.op(&[top_idx], &[], m.experts, 4);
        self.t.keep(offsets);
        let gathered = self.t.op(&[x, token_idx], &[], rows * h, xw);
        let input = self.cast(gathered, w);
        let ffn = m.expert.ffn;
        let down_in = if m.expert.gated {
            // One grouped_mm makes gate and up side by side; the activation saves the gate
            // half and the product both halves: the whole output stays saved.
            let gate_up = self.t.op(&[input], &[input], rows * 2 * ffn, w);
            self.t.keep(gate_up);
            let act = self.t.op(&[gate_up], &[], rows * ffn, w);
            self.t.op(&[act, gate_up], &[act], rows * ffn, w)
        } else {
            let up = self.t.op(&[input], &[input], rows * ffn, w);
            self.activation(up, &m.expert.activation)
        };
        let proj = self.t.op(&[down_in], &[down_in], rows * h, w);
        // proj · scores (fp32 scores promote the product), back in token order (an index that
        // saves the inverse permutation), summed over the top_k copies, cast to the input's dtype.
        let weighted = self
            .t
            .op(&[proj, scores], &[proj, scores], rows * h, w.max(4));
        let inv_perm = self.t.op(&[perm], &[], rows, 8);
        let ordered = self
            .t
            .op(&[weighted, inv_perm], &[inv_perm], rows * h, w.max(4));
        let summed = self.t.op(&[ordered], &[], self.tokens * h, w.max(4));
        let mut out = self.cast(summed, xw);
        if let Some(shared) = &m.shared {
            let s = self.mlp(x, shared, h);
            let s = if m.shared_gate {
                let gate = self.linear(x, h, 1, false);
                let gate = self.t.op(&[gate], &[], self.tokens, self.w(gate));
                self.t.keep(gate);
                self.elementwise(&[s, gate], &[s, gate])
            } else {
                s
            };
            out = self.residual(out, s);
        }
        out
    }

    /// Self- or cross-attention on `x` (queries) over `kv_src` (keys/values source).
    fn attention(&mut self, x: Id, kv_src: Id, layer: &Layer, cross: bool) -> Id {
        let spec = self.c.spec;
        let h = spec.hidden_size;
        let att = if cross {
            layer.cross_attention.as_ref().unwrap_or(&layer.attention)
        } else {
            &layer.attention
        };
        let b = self.c.batch;
        let heads = att.kind.heads();
        // Width of the attention output (all heads' values), which o_proj reads: with grouped
        // k/v it is `heads · head_dim`, not the k/v width.
        let out_w = match att.kind {
            AttentionKind::Standard {
                heads, head_dim, ..
            } => heads * head_dim,
            AttentionKind::Latent {
                heads, v_head_dim, ..
            } => heads * v_head_dim,
        };
        let (q_w, k_w, v_w, kv_heads) = match att.kind {
            AttentionKind::Standard {
                heads,
                kv_heads,
                head_dim,
            } => (
                heads * head_dim,
                kv_heads * head_dim,
                kv_heads * head_dim,
                kv_heads,
            ),
            AttentionKind::Latent {
                heads,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
                ..
            } => (
                heads * (qk_nope_head_dim + qk_rope_head_dim),
                heads * (qk_nope_head_dim + qk_rope_head_dim),
                heads * v_head_dim,
                heads,
            ),
        };
        let bias = att.bias;
        let (mut q, mut k, v) = match (spec.naming, att.kind) {
            (
                _,
                AttentionKind::Latent {
                    q_lora_rank,
                    kv_lora_rank,
                    qk_rope_head_dim,
                    qk_nope_head_dim,
                    v_head_dim,
                    heads,
                },
            ) => {
                let q = match q_lora_rank {
                    Some(r) => {
                        let qa = self.linear(x, h, r, false);
                        let qa = self.norm(qa, NormKind::RmsNorm, r);
                        self.linear(qa, r, q_w, false)
                    }
                    None => self.linear(x, h, q_w, false),
                };
                let kva = self.linear(x, h, kv_lora_rank + qk_rope_head_dim, false);
                let kvn = self.norm(kva, NormKind::RmsNorm, kv_lora_rank);
                let kv = self.linear(
                    kvn,
                    kv_lora_rank,
                    heads * (qk_nope_head_dim + v_head_dim),
                    false,
                );
                // k = cat(k_nope, k_rope broadcast): a new tensor of all heads.
                let k = self.elementwise(&[kv, kva], &[]);
                let k = self.cast(k, self.w(kv));
                let _ = self.t.elements(k);
                (q, k, kv)
            }
            (Naming::Gpt2 | Naming::BigCode | Naming::NeoX | Naming::Falcon | Naming::Phi3, _) => {
                // One fused projection; q, k and v are views of it.
                let qkv = self.linear_named(x, h, q_w + k_w + v_w, bias.q, Role::Qkv);
                (qkv, qkv, qkv)
            }
            _ => {
                let q = self.linear_named(x, h, q_w, bias.q, Role::Q);
                let k = self.linear_named(kv_src, h, k_w, bias.k, Role::K);
                let v = self.linear_named(kv_src, h, v_w, bias.v, Role::V);
                (q, k, v)
            }
        };
        let fused = q == k;
        let qn = self.tokens * q_w;
        let kv_tokens = b * self.c.kv_seq;
        let kn = kv_tokens * k_w;
        let vn = kv_tokens * v_w;
        let rotary = !cross && matches!(spec.embedding.positions, Positions::Rotary { .. });
        let eager = self.c.kernel == AttentionKernel::Eager;
        // A fused projection's q, k and v are views of one tensor. Eager attention copies the
        // views it multiplies (matmul of non-contiguous operands); rotary embeddings read the
        // views and make new q and k; SDPA keeps the views, so the fused tensor stays saved.
        // GPT-NeoX's v is `qkv.view(b, s, heads, 3·hd).transpose(1, 2).chunk(3)[2]`: `matmul`
        // reshapes it to [b·heads, s, hd] for `bmm` (aten `_matmul_impl`), a copy unless b is 1
        // (a size-1 dimension merges with any stride, so `reshape` returns a view). At b = 1
        // bmm saves that view, and with it the whole fused output (measured: Pythia-70M at
        // 1 × 640 saves the 3·s·h qkv storage, at 3 × 224 a b·s·h copy).
        let view_at_b1 = b == 1 && spec.naming == Naming::NeoX;
        let mut v = v;
        if fused {
            let w = self.w(q);
            if eager && !view_at_b1 {
                v = self.t.op(&[v], &[], vn, w);
            }
            if eager && !rotary {
                q = self.t.op(&[q], &[], qn, w);
                k = self.t.op(&[k], &[], kn, w);
            }
        }
        // Per-head q/k norms (Qwen3, Gemma-3).
        if let Some(n) = att.qk_norm {
            q = self.norm(q, n.kind, n.dim);
            k = self.norm(k, n.kind, n.dim);
        }
        // Rotary embeddings: q·cos + rotate_half(q)·sin; cos/sin are shared and need no grad,
        // so nothing of q is saved: the rotated tensor is what attention saves.
        if rotary {
            let rope_w = self.c.num.param;
            for (x, n) in [(&mut q, qn), (&mut k, kn)] {
                let xw = self.w(*x);
                let w = xw.max(rope_w);
                let a = self.t.op(&[*x], &[], n, w);
                let neg = self.t.op(&[*x], &[], n / 2, xw);
                let rh = self.t.op(&[neg, *x], &[], n, xw);
                let b2 = self.t.op(&[rh], &[], n, w);
                *x = self.t.op(&[a, b2], &[], n, w);
            }
        }
        // OPT scales q by 1/√d right after the projection (a new tensor).
        if spec.naming == Naming::Opt {
            q = self.elementwise(&[q], &[]);
        }
        let grouped = kv_heads < heads;
        let latent = matches!(att.kind, AttentionKind::Latent { .. });
        let ctx = match self.c.kernel {
            AttentionKernel::Eager => {
                // MLA's values are a strided view of kv_b_proj's output (beside k_nope); the
                // eager matmul copies them contiguous, and the copy is what it saves
                // (DeepseekV2Attention.expand_kv + eager_attention_forward).
                if latent {
                    let vw = self.w(v);
                    v = self.t.op(&[v], &[], vn, vw);
                }
                // repeat_kv materialises the groups for eager attention.
                if grouped {
                    let (kw, vw) = (self.w(k), self.w(v));
                    k = self.t.op(&[k], &[], kv_tokens * q_w, kw);
                    v = self
                        .t
                        .op(&[v], &[], kv_tokens * v_w * heads / kv_heads.max(1), vw);
                }
                let qi = self.mm_input(q);
                let ki = self.mm_input(k);
                let mmw = if self.c.num.autocast {
                    2
                } else {
                    self.c.num.compute
                };
                let scores_n = b * heads * self.c.seq * self.c.kv_seq;
                let scores = self.t.op(&[qi, ki], &[qi, ki], scores_n, mmw);
                let mut scaled = self.t.op(&[scores], &[], scores_n, mmw);
                // Gemma-2's soft-capping: `/ cap`, `tanh` (its output saved), `* cap`.
                if spec.softcapping.attention.is_some() {
                    let d = self.t.op(&[scaled], &[], scores_n, mmw);
                    let th = self.t.op(&[d], &[], scores_n, mmw);
                    self.t.keep(th);
                    scaled = self.t.op(&[th], &[], scores_n, mmw);
                }
                // The additive mask (causal or padding) promotes to its dtype.
                let mask_w = self.c.num.param;
                let masked = self.t.op(&[scaled], &[], scores_n, mmw.max(mask_w));
                // Softmax in fp32 (explicit dtype in Llama-style code; autocast's fp32 list
                // elsewhere), then cast to the value dtype where the family does.
                let llama_style = !matches!(
                    spec.naming,
                    Naming::Gpt2
                        | Naming::BigCode
                        | Naming::Bert
                        | Naming::Roberta
                        | Naming::Opt
                        | Naming::T5
                );
                let sm_w = if llama_style || self.c.num.autocast {
                    4
                } else {
                    self.w(masked)
                };
                let sm_in = self.cast(masked, sm_w);
                let probs = self.t.op(&[sm_in], &[], scores_n, sm_w);
                self.t.keep(probs);
                let to_value = if llama_style {
                    let qw = self.w(q);
                    self.cast(probs, qw)
                } else if matches!(spec.naming, Naming::Gpt2 | Naming::BigCode) {
                    let vw = self.w(v);
                    self.cast(probs, vw)
                } else {
                    probs
                };
                let dropped = self.dropout(to_value, self.c.attn_dropout);
                let pi = self.mm_input(dropped);
                let vi = self.mm_input(v);
                let ctx = self.t.op(&[pi, vi], &[pi, vi], self.tokens * out_w, mmw);
                // transpose(1, 2).contiguous(): a copy.
                self.t.op(&[ctx], &[], self.tokens * out_w, mmw)
            }
            AttentionKernel::Sdpa | AttentionKernel::Flash => {
                // Fused kernels save q, k, v, the output and a logsumexp (b·heads·s, fp32);
                // no s×s tensor. Grouped k/v are passed as is (GQA-aware kernels).
                let qi = self.mm_input(q);
                let ki = self.mm_input(k);
                let vi = self.mm_input(v);
                self.t.keep(qi);
                self.t.keep(ki);
                self.t.keep(vi);
                let mmw = if self.c.num.autocast {
                    2
                } else {
                    self.c.num.compute
                };
                let out = self
                    .t
                    .op(&[qi, ki, vi], &[qi, ki, vi], self.tokens * out_w, mmw);
                self.t.keep(out);
                let lse = self.t.op(&[qi], &[], b * heads * self.c.seq, 4);
                self.t.keep(lse);
                out
            }
        };
        self.linear_named(ctx, out_w, h, bias.o, Role::O)
    }

    fn run(mut self, layer: &Layer) -> BlockMemory {
        let spec = self.c.spec;
        let h = spec.hidden_size;
        let x = self.t.external(self.tokens * h, self.c.num.param);
        let norm_of = |slot: NormSlot| {
            layer
                .norms
                .iter()
                .find(|(s, _)| *s == slot)
                .map(|(_, n)| *n)
        };
        let pre_attn = norm_of(NormSlot::PreAttention);
        let post_attn = norm_of(NormSlot::PostAttention);
        let pre_mlp = norm_of(NormSlot::PreMlp);
        let post_mlp = norm_of(NormSlot::PostMlp);
        let pre_cross = norm_of(NormSlot::PreCrossAttention);
        let post_norm_model = matches!(spec.naming, Naming::Bert | Naming::Roberta);
        let hd = self.c.hidden_dropout;

        let out = if layer.parallel_residual {
            // GPT-NeoX / Falcon: x + attn(ln1(x)) + mlp(ln2(x)) (Falcon-7B: one shared norm).
            let a_in = match pre_attn {
                Some(n) => self.norm(x, n.kind, n.dim),
                None => x,
            };
            let a = self.attention(a_in, a_in, layer, false);
            let a = self.dropout(a, hd);
            let m_in = match pre_mlp {
                Some(n) => self.norm(x, n.kind, n.dim),
                None => a_in,
            };
            let m = match &layer.mlp {
                Mlp::Dense(d) => self.mlp(m_in, d, h),
                Mlp::Moe(m) => self.moe(m_in, m, h),
            };
            let m = self.dropout(m, hd);
            let s = self.residual(m, a);
            self.residual(s, x)
        } else if post_norm_model {
            // BERT: LN(x + drop(attn(x))), then LN(h + drop(mlp(h))).
            let a = self.attention(x, x, layer, false);
            let a = self.dropout(a, hd);
            let s = self.residual(a, x);
            let n1 = post_attn.unwrap_or(crate::model::Norm::layer(h, true));
            let h1 = self.norm(s, n1.kind, n1.dim);
            self.t.touch(h1);
            let m = match &layer.mlp {
                Mlp::Dense(d) => self.mlp(h1, d, h),
                Mlp::Moe(m) => self.moe(h1, m, h),
            };
            let m = self.dropout(m, hd);
            let s2 = self.residual(m, h1);
            let n2 = post_mlp.unwrap_or(n1);
            self.norm(s2, n2.kind, n2.dim)
        } else {
            let a_in = match pre_attn {
                Some(n) => self.norm(x, n.kind, n.dim),
                None => x,
            };
            let mut a = self.attention(a_in, a_in, layer, false);
            if let Some(n) = post_attn {
                a = self.norm(a, n.kind, n.dim);
            }
            let a = self.dropout(a, hd);
            let mut hcur = self.residual(x, a);
            if layer.cross_attention.is_some() {
                let c_in = match pre_cross {
                    Some(n) => self.norm(hcur, n.kind, n.dim),
                    None => hcur,
                };
                // Keys/values come from the encoder output (external, same length here).
                let enc = self
                    .t
                    .external(self.c.batch * self.c.kv_seq * h, self.c.num.param);
                let c = self.attention(c_in, enc, layer, true);
                let c = self.dropout(c, hd);
                hcur = self.residual(hcur, c);
            }
            let m_in = match pre_mlp {
                Some(n) => self.norm(hcur, n.kind, n.dim),
                None => hcur,
            };
            let mut m = match &layer.mlp {
                Mlp::Dense(d) => self.mlp(m_in, d, h),
                Mlp::Moe(m) => self.moe(m_in, m, h),
            };
            if let Some(n) = post_mlp {
                m = self.norm(m, n.kind, n.dim);
            }
            let m = self.dropout(m, hd);
            self.residual(hcur, m)
        };
        let out = self.cast(out, self.c.num.param.max(self.w(out)));
        let mem = self.t.memory(Some(out), super::round_size);
        let input_freed = if self.t.is_saved(x) || self.c.no_grad {
            0
        } else {
            super::round_size(self.tokens * h * self.t.width(x))
        };
        BlockMemory {
            kept: mem.kept,
            peak: mem.peak,
            weight_copies: self.weight_copies,
            input_freed,
        }
    }
}

/// Memory of one block's forward.
pub fn block_memory(c: BlockCtx, layer: &Layer) -> BlockMemory {
    Prog::new(c).run(layer)
}
