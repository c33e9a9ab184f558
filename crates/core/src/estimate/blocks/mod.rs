//! The forward programs of transformer blocks, written on the [`Tape`] op by op as Hugging Face
//! transformers 5.x runs them (`modeling_llama.py`, `modeling_gpt2.py`, `modeling_bert.py`,
//! ...), so that the bytes a block saves for backward come out of the same rules autograd
//! applies. One program serves every family; the IR's norm kind, attention kind, MLP kind,
//! residual layout and dropout pick its branches.

mod attention;
mod dsa;
mod falcon_h1;
mod gated_delta;
mod gemma3n;
mod gemma4;
mod gpt_oss;
mod jamba;
mod linear4bit;
mod linear8bit;
mod llama4;
mod mamba;
mod mamba2_torch;
mod mllama;
mod mlp;
mod nemotron_h;
mod quant_linear;
mod qwen_vision;
pub mod sdpa;
mod short_conv;
mod ssd_torch;
mod ssd_warning;
mod zamba2;

pub use falcon_h1::falcon_h1_path_warning;
pub(crate) use gemma4::{checkpoint_stored_kv, generate_slices_kv_shared};
pub use linear4bit::Dequant;
pub use linear8bit::Int8Lt;
pub use mamba::block_output_width;
pub use mamba2_torch::mamba2_path_warning;
pub use nemotron_h::nemotron_h_path_warning;
pub use quant_linear::QuantLinear;
pub use qwen_vision::{qwen_merger_memory, qwen_vision_block_memory, qwen_vision_stream_width};

use super::tape::{BlockEvents, Id, RmsWeight, Tape};
use crate::job::AttentionKernel;
use crate::model::{Layer, Mlp, ModelSpec, Naming, NormKind, NormSlot};

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
    /// `softmax` and `log_softmax` keep their input for backward beside their output, as
    /// PyTorch before 1.11 did (`job::TorchVersion::softmax_saves_input`).
    pub softmax_saves_input: bool,
    /// The forward runs under `torch.compile` (inductor): pointwise ops' saves are the
    /// partitioner's cut (`tape/compile.rs`).
    pub compile: bool,
    /// What SDPA's kernel choice depends on beyond the call (`sdpa.rs`): the PyTorch release
    /// and the GPU.
    pub sdpa: sdpa::SdpaStack,
    /// The transformers release whose modelling code runs (`job::TransformersVersion`: the
    /// job's, or 5.24.0); the SSD torch path's saved set depends on it (`ssd_torch.rs`).
    pub transformers: crate::job::TransformersVersion,
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
    /// The forward is transformers' own Python under `no_grad` (HF `generate`), where a tensor
    /// lives while a Python name holds it ([`Prog::hold`]); a serving engine's model code
    /// (vLLM's fused residual norms, in-place ops) keeps the last-reader lifetimes.
    pub python_holds: bool,
    /// LoRA on these module names.
    pub lora: Option<Lora<'a>>,
    /// The projections' base weights are bitsandbytes' (training under LoRA): 4-bit, each
    /// dequantized around its matmul ([`Dequant`], `linear4bit.rs`), or LLM.int8's int8
    /// matmul ([`Int8Lt`], `linear8bit.rs`).
    pub dequant: Option<QuantLinear>,
    /// The model component the block belongs to (a VLM's vision tower or language model):
    /// LoRA's `part:module` targets match only there.
    pub part: crate::vision::Part,
}

/// LoRA as a block's program sees it: the adapted module names, the rank, the dropout before
/// `lora_A`, and the adapters' element width (`peft.adapter_dtype`).
#[derive(Debug, Clone, Copy)]
pub struct Lora<'a> {
    pub targets: &'a [String],
    pub rank: u64,
    pub dropout: f64,
    pub width: u64,
}

impl<'a> Lora<'a> {
    /// The job's `peft`.
    pub fn of(p: &'a crate::job::Peft) -> Self {
        Lora {
            targets: &p.targets,
            rank: p.rank,
            dropout: p.dropout,
            width: p.adapter_dtype.bytes(),
        }
    }
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

/// How the family's RMSNorm applies its weight: by `1 + w` in fp32 (Gemma 1–3; Qwen3-Next's
/// `Qwen3NextRMSNorm`, `modeling_qwen3_next.py`), by `w` in fp32 before casting back (OLMo-2/3,
/// `modeling_olmo2.py` / `modeling_olmo3.py` `Olmo2RMSNorm` / `Olmo3RMSNorm`; Gemma 4's
/// `Gemma4RMSNorm`, `modeling_gemma4.py`; Nemotron-H's
/// `NemotronHRMSNorm`, `modeling_nemotron_h.py`), or by `w` after
/// casting back (Llama and the rest).
pub(crate) fn rms_weight(spec: &ModelSpec) -> RmsWeight {
    match spec.model_type.as_str() {
        // Gemma 4's `Gemma4RMSNorm`: `normed · weight.float()`, then `type_as` (no `1 +`).
        // Gemma 3n's `Gemma3nRMSNorm` is the same module (`modeling_gemma3n.py`).
        "gemma4_text" | "gemma3n_text" => RmsWeight::InFp32,
        t if t.starts_with("gemma") || t == "qwen3_next" => RmsWeight::OnePlusInFp32,
        "olmo2" | "olmo3" | "nemotron_h" => RmsWeight::InFp32,
        _ => RmsWeight::AfterCast,
    }
}

/// [`rms_weight`] under a transformers release: Nemotron-H's `NemotronHRMSNorm` multiplied its
/// weight after the cast back up to 5.17.0 (`modeling_nemotron_h.py` 5.17.0: `self.weight *
/// hidden_states.to(input_dtype)`) and in fp32 from 5.18.0 (`job/transformers_version.rs`).
pub(crate) fn rms_weight_at(spec: &ModelSpec, v: crate::job::TransformersVersion) -> RmsWeight {
    if spec.model_type == "nemotron_h" && !v.nemotron_h_norm_in_fp32() {
        RmsWeight::AfterCast
    } else {
        rms_weight(spec)
    }
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
    /// The attention's query as the kernel read it (after rotary), which the attention
    /// module's frame holds until it returns ([`Prog::hold`]).
    query: Option<Id>,
    /// DeepSeek Sparse Attention's per-layer mask (`dsa.rs`), read by the attention core.
    dsa_mask: Option<Id>,
    /// The indexer's inputs (block input, query latent, shape, RoPE width), recorded by the
    /// latent projections and run just before the attention kernel.
    dsa_pending: Option<(Id, Id, crate::model::Indexer, u64)>,
}

impl<'a> Prog<'a> {
    fn new(c: BlockCtx<'a>) -> Self {
        Prog {
            t: if c.no_grad {
                Tape::no_grad().with_python_holds(c.python_holds)
            } else if c.num.compile {
                Tape::compiled()
            } else {
                Tape::new()
            },
            tokens: c.batch.saturating_mul(c.seq),
            c,
            weight_copies: 0,
            query: None,
            dsa_mask: None,
            dsa_pending: None,
        }
    }

    /// Under `torch.no_grad()` a tensor is freed when the last Python reference to it goes
    /// (CPython's refcount reaching zero drops the `at::Tensor`, whose storage goes back to
    /// the caching allocator), not after its last reader: a module's argument lives until the
    /// module's `forward` returns, a local until the function returns or the name is rebound.
    /// `hold` extends `id`'s life to the op just recorded. With autograd the tensors held this
    /// way are saved by their readers anyway (the training tapes are left as measured); a
    /// serving engine's forward is not transformers' Python (`BlockCtx::python_holds`).
    fn hold(&mut self, id: Id) {
        if self.c.no_grad && self.c.python_holds {
            self.t.touch(id);
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
            self.t.fused_op(&[x], &[], n, 2)
        } else {
            x
        }
    }

    /// A projection that LoRA may wrap: PEFT's `lora.Linear` runs the base layer, then
    /// `lora_B(lora_A(dropout(x)))`: the dropout makes a copy of the input (and a mask) that
    /// lora_A saves, lora_A's r-wide output is saved by lora_B, and the sum is a new tensor.
    fn linear_named(&mut self, x: Id, inp: u64, out: u64, bias: bool, role: Role) -> Id {
        let y = match self.c.dequant {
            Some(QuantLinear::FourBit(d)) => self.linear_4bit(x, inp, out, d),
            Some(QuantLinear::Int8(q)) => self.linear_int8(x, inp, out, q),
            None => self.linear(x, inp, out, bias),
        };
        let Some(Lora {
            targets,
            rank,
            dropout,
            width,
        }) = self.c.lora
        else {
            return y;
        };
        let name = role.name(self.c.spec.naming);
        let hit = targets.iter().any(|t| {
            let (part, module) = crate::vision::split_target(t);
            module == name && part.is_none_or(|p| p == self.c.part)
        });
        if !hit {
            return y;
        }
        if matches!(self.c.dequant, Some(QuantLinear::FourBit(_))) {
            self.peft_clone(y);
        }
        let rows = self.t.elements(x) / inp.max(1);
        // PEFT keeps adapters in fp32 beside a 16-bit base (`autocast_adapter_dtype=True`) and
        // casts their input to the adapter dtype first (`_cast_input_dtype`, PEFT 0.21.2
        // `lora/layer.py` `Linear.forward`, under autocast too: `Tensor.to` is on no autocast
        // list), so the dropout and lora_A's input are fp32; without autocast lora_A saves that
        // fp32 input, under autocast it casts it back to a new 16-bit tensor (`mm_input`), one
        // per adapted module, which it saves. Adapters in the base's dtype (torchtune's
        // `LoRALinear`, `peft.adapter_dtype` bf16) read the input as it is. Measured:
        // `validation/cpu-measured-lora-autocast.json` (a bf16 base under bf16 autocast).
        let x = self.cast(x, width);
        let xd = if dropout > 0.0 {
            self.dropout(x, dropout)
        } else {
            x
        };
        let xa = self.mm_input(xd);
        self.t.keep(xa);
        let w = if self.c.num.autocast { 2 } else { width };
        self.adapter_copy(rank * inp, width);
        let a = self.t.op(&[xa], &[xa], rows * rank, w);
        self.t.weight_grad(rank * inp * width);
        self.t.keep(a);
        self.adapter_copy(out * rank, width);
        let b = self.t.op(&[a], &[], rows * out, w);
        self.t.weight_grad(out * rank * width);
        let scaled = self.t.op(&[b], &[], rows * out, w);
        // `result + lora_B(...) * scaling` promotes; PEFT casts the sum back to the base dtype.
        let yw = self.w(y);
        let sum = self.elementwise(&[y, scaled], &[]);
        self.cast(sum, yw)
    }

    /// Autocast's cached 16-bit copy of a LoRA adapter's weight of `elements` values, made by
    /// the adapter's linear (record it just before the op). PEFT's fp32 adapters are trainable
    /// leaves, so `cached_cast` (`aten/src/ATen/autocast_mode.cpp`, torch 2.15:
    /// `arg.is_leaf() && arg.requires_grad()`, cast only where the dtype differs) keeps the copy
    /// in autocast's cache until the outermost region exits, after the loss: for the whole
    /// forward, and `mm` saves it for the input's gradient. Adapters already 16-bit
    /// (`adapter_dtype` bf16) are read as they are: no copy. Measured:
    /// `validation/cpu-measured-kbit-prepare.json`, the tiny Llama's 155,648 B per block.
    fn adapter_copy(&mut self, elements: u64, adapter_width: u64) {
        if self.c.num.autocast && adapter_width == 4 {
            self.weight_copies += 2 * elements;
            self.t.weight_copy(2 * elements);
        }
    }

    /// `nn.Linear` / `Conv1D` over the last dim: saves its input; autocast caches a 16-bit copy
    /// of an fp32 weight (and bias) for the whole forward.
    fn linear(&mut self, x: Id, inp: u64, out: u64, bias: bool) -> Id {
        let xin = self.mm_input(x);
        let frozen_copy = self.c.num.autocast && self.c.num.param == 4 && self.c.lora.is_some();
        if frozen_copy {
            return self.frozen_fp32_linear(xin, inp, out);
        }
        if self.c.num.autocast && self.c.num.param == 4 {
            self.weight_copies += 2 * inp * out + if bias { 2 * out } else { 0 };
            self.t.weight_copy(2 * inp * out);
            if bias {
                self.t.weight_copy(2 * out);
            }
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
            let y = self.t.op(&[xin], &[xin], rows * out, width);
            self.weight_grads(rows, inp, out, bias, width);
            y
        }
    }

    /// A frozen fp32 weight under autocast (a PEFT base after `prepare_model_for_kbit_training`):
    /// autocast caches a cast only for a leaf that requires grad (`aten/src/ATen/
    /// autocast_mode.cpp` `cached_cast`: `arg.requires_grad() && arg.is_leaf()`), so each call
    /// makes its own 16-bit copy of the weight, which `mm` saves for the input's gradient
    /// (derivatives.yaml: `self: grad.mm(mat2.t())`) and backward frees: an activation of the
    /// block, recomputed under checkpointing, not a copy held for the whole forward. Measured:
    /// `validation/cpu-measured-kbit-prepare.json` (one checkpointed block keeps its fp32 input and
    /// the adapters' cached copies only). A frozen bias's 16-bit copy (`out` elements, freed
    /// with the call) is left out.
    fn frozen_fp32_linear(&mut self, xin: Id, inp: u64, out: u64) -> Id {
        let copy = self.t.op(&[], &[], inp * out, 2);
        let rows = self.t.elements(xin) / inp.max(1);
        self.t.op(&[xin, copy], &[copy], rows * out, 2)
    }

    /// The weight (and bias) gradients a linear's backward makes (`Tape::weight_grad`):
    /// under autocast each in 16 bit first, cast to the fp32 parameter's dtype. An fp32 bias
    /// gradient is a `sum` over the rows whose reduction takes a temporary twice the output
    /// gradient (`at::native::structured_sum_out`: 12 MiB for GPT-2's 6 MiB `c_proj` gradient,
    /// 36 MiB for `c_attn`'s 18 MiB, 48 MiB for `c_fc`'s 24 MiB in the H200 fp32 trace).
    fn weight_grads(&mut self, rows: u64, inp: u64, out: u64, bias: bool, width: u64) {
        let p = self.c.num.param;
        let cast = self.c.num.autocast && p == 4;
        if cast {
            self.t.weight_grad_cast_source(inp * out * 2);
        }
        self.t.weight_grad(inp * out * p);
        if !bias {
            return;
        }
        if cast {
            self.t.weight_grad_cast_source(out * 2);
        }
        self.t.weight_grad(out * p);
        if width == 4 {
            self.t.backward_temp(2 * rows * out * width);
        }
    }

    /// An elementwise op over `xs` that saves `saved`; output width follows type promotion.
    fn elementwise(&mut self, xs: &[Id], saved: &[Id]) -> Id {
        let n = xs.iter().map(|&x| self.t.elements(x)).max().unwrap_or(0);
        let width = xs.iter().map(|&x| self.w(x)).max().unwrap_or(4);
        self.t.fused_op(xs, saved, n, width)
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

    /// A residual add. Under compile the partitioner recomputes a block's inner residual from
    /// the block input and the branch output (the cheaper side: a 16-bit matmul output under
    /// autocast); the block's output, read again after the next block's unfusible ops, is
    /// banned from recomputation (`ban_recompute_used_far_apart`) and kept as the output.
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
                let out = self.t.norm_op(&[xin], &[xin], rows * dim, out_w);
                let mean = self.t.op(&[xin], &[], rows, 4);
                let rstd = self.t.op(&[xin], &[], rows, 4);
                self.t.keep(mean);
                self.t.keep(rstd);
                out
            }
            NormKind::RmsNorm if self.c.spec.naming == Naming::GptOss => {
                self.gpt_oss_rms_norm(x, dim)
            }
            NormKind::RmsNorm => self.t.rms_norm(
                x,
                dim,
                self.c.num.param,
                rms_weight_at(self.c.spec, self.c.num.transformers),
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
                let p = self
                    .t
                    .fused_op(&[xp], &[xp], self.t.elements(x), self.w(xp));
                let c1 = self.elementwise(&[p], &[]);
                let s1 = self.elementwise(&[x, c1], &[]);
                let c2 = self.elementwise(&[s1], &[]);
                let th = self.elementwise(&[c2], &[]);
                self.t.keep_fused(th);
                let o = self.elementwise(&[th], &[]);
                let h1 = self.elementwise(&[x], &[]);
                self.elementwise(&[h1, o], &[h1, o])
            }
            // QuickGELUActivation (transformers `activations.py`, CLIP and the Qwen2-VL
            // tower): `x · sigmoid(1.702 · x)`. The scaling by a constant saves nothing, the
            // sigmoid saves its output, the product both operands: x and the sigmoid stay.
            "quick_gelu" => {
                let scaled = self.elementwise(&[x], &[]);
                let sg = self.elementwise(&[scaled], &[]);
                self.t.keep(sg);
                self.elementwise(&[x, sg], &[x, sg])
            }
            // ReLUSquaredActivation (transformers `activations.py`, Nemotron-H's `relu2`):
            // `relu` saves its output, `torch.square` (autocast's fp32 `pow`) saves its input,
            // under autocast an fp32 copy of the relu output.
            "relu2" => {
                let r = self.elementwise(&[x], &[]);
                self.t.keep(r);
                let rp = if self.c.num.autocast {
                    self.cast(r, 4)
                } else {
                    r
                };
                self.elementwise(&[rp], &[rp])
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

    /// The norm in `slot` applied to `x`, or `x` when the layer has none there.
    fn norm_in(&mut self, x: Id, layer: &Layer, slot: NormSlot) -> Id {
        match norm_at(layer, slot) {
            Some(n) => self.norm(x, n.kind, n.dim),
            None => x,
        }
    }

    /// The layer's feed-forward: a dense MLP or routed experts.
    fn ffn(&mut self, x: Id, layer: &Layer) -> Id {
        let h = self.c.spec.hidden_size;
        match &layer.mlp {
            Mlp::Dense(d) => self.mlp(x, d, h),
            Mlp::Moe(m) if self.c.spec.naming == Naming::GptOss => self.gpt_oss_moe(x, m, h),
            Mlp::Moe(m) if self.c.spec.naming == Naming::Llama4 => self.llama4_moe(x, m, h),
            Mlp::Moe(m) => self.moe(x, m, h),
            Mlp::None => x,
        }
    }

    /// GPT-NeoX / Falcon: x + attn(ln1(x)) + mlp(ln2(x)) (Falcon-7B: one shared norm).
    fn parallel_residual_block(&mut self, x: Id, layer: &Layer) -> Id {
        let hd = self.c.hidden_dropout;
        let a_in = self.norm_in(x, layer, NormSlot::PreAttention);
        let a = self.attention(a_in, a_in, layer, false);
        let a = self.dropout(a, hd);
        let m_in = match norm_at(layer, NormSlot::PreMlp) {
            Some(n) => self.norm(x, n.kind, n.dim),
            None => a_in,
        };
        let m = self.ffn(m_in, layer);
        let m = self.dropout(m, hd);
        let s = self.residual(m, a);
        self.residual(s, x)
    }

    /// BERT: LN(x + drop(attn(x))), then LN(h + drop(mlp(h))).
    fn post_norm_block(&mut self, x: Id, layer: &Layer) -> Id {
        let h = self.c.spec.hidden_size;
        let hd = self.c.hidden_dropout;
        let a = self.attention(x, x, layer, false);
        let a = self.dropout(a, hd);
        let s = self.residual(a, x);
        let n1 =
            norm_at(layer, NormSlot::PostAttention).unwrap_or(crate::model::Norm::layer(h, true));
        let h1 = self.norm(s, n1.kind, n1.dim);
        self.t.touch(h1);
        let m = self.ffn(h1, layer);
        let m = self.dropout(m, hd);
        let s2 = self.residual(m, h1);
        let n2 = norm_at(layer, NormSlot::PostMlp).unwrap_or(n1);
        self.norm(s2, n2.kind, n2.dim)
    }

    /// Pre-norm blocks (Llama, GPT-2, T5, Gemma's extra post-norms): x + attn(norm(x)), an
    /// encoder-decoder's cross-attention on the encoder output, then h + mlp(norm(h)).
    ///
    /// Under `no_grad` the Python lifetimes of `modeling_llama.py` `LlamaDecoderLayer.forward`:
    /// the normed input is the attention's (and the MLP's) argument, alive until that module
    /// returns (`hidden_states = self.self_attn(...)` rebinds the name after the call); the
    /// block's input is held by the caller's loop (`hidden_states =
    /// decoder_layer(hidden_states, ...)`) until the block returns.
    fn pre_norm_block(&mut self, x: Id, layer: &Layer) -> Id {
        let hd = self.c.hidden_dropout;
        let a_in = self.norm_in(x, layer, NormSlot::PreAttention);
        let a = self.attention(a_in, a_in, layer, false);
        self.hold(a_in);
        let a = self.norm_in(a, layer, NormSlot::PostAttention);
        let a = self.dropout(a, hd);
        let mut hcur = self.residual(x, a);
        if layer.cross_attention.is_some() {
            let c_in = self.norm_in(hcur, layer, NormSlot::PreCrossAttention);
            // Keys/values come from the encoder output (external, same length here).
            let h = self.c.spec.hidden_size;
            let enc = self
                .t
                .external(self.c.batch * self.c.kv_seq * h, self.c.num.param);
            let c = self.attention(c_in, enc, layer, true);
            let c = self.dropout(c, hd);
            hcur = self.residual(hcur, c);
        }
        let m_in = self.norm_in(hcur, layer, NormSlot::PreMlp);
        let m = self.ffn(m_in, layer);
        self.hold(m_in);
        let m = self.norm_in(m, layer, NormSlot::PostMlp);
        let m = self.dropout(m, hd);
        let out = self.residual(hcur, m);
        self.hold(x);
        out
    }

    /// Runs the block by its residual layout and reads what it keeps and its peak.
    fn run(self, layer: &Layer) -> BlockMemory {
        let (prog, x, out) = self.program(layer);
        prog.finish(x, out)
    }

    /// [`Prog::run`] with the block's allocator events (`tape/events.rs`).
    fn run_with_events(self, layer: &Layer) -> (BlockMemory, BlockEvents) {
        let (prog, x, out) = self.program(layer);
        let events = prog.t.events(x, out);
        (prog.finish(x, out), events)
    }

    /// Writes the block's ops on the tape: (the program, its input, its output).
    fn program(mut self, layer: &Layer) -> (Self, Id, Id) {
        let spec = self.c.spec;
        let h = spec.hidden_size;
        let x = self
            .t
            .external(self.tokens * h * spec.residual_streams(), self.c.num.param);
        let mixer_only = matches!(layer.mlp, crate::model::Mlp::None);
        let out = if spec.naming == Naming::NemotronH {
            self.nemotron_h_block(x, layer)
        } else if let Some(ssm) = layer
            .attention
            .kind
            .state_space()
            .filter(|_| spec.naming == Naming::Zamba2)
        {
            self.zamba2_layer(x, layer, &ssm.clone())
        } else if spec.naming == Naming::Gemma4 {
            self.gemma4_block(x, layer)
        } else if let Some(g) = spec.gemma3n {
            self.gemma3n_block(x, layer, g)
        } else if let Some(ssm) = layer.attention.kind.state_space().filter(|_| mixer_only) {
            self.ssm_block(x, layer, &ssm.clone())
        } else if layer.attention.vision_cross {
            self.mllama_cross_block(x, layer)
        } else if let Some(p) = &layer.parallel_ssm {
            self.falcon_h1_block(x, layer, p)
        } else if layer.parallel_residual {
            self.parallel_residual_block(x, layer)
        } else if matches!(spec.naming, Naming::Bert | Naming::Roberta) {
            self.post_norm_block(x, layer)
        } else {
            self.pre_norm_block(x, layer)
        };
        let out = self.cast(out, self.c.num.param.max(self.w(out)));
        (self, x, out)
    }

    /// What the block program leaves: its saved tensors and output, its peak, and its input
    /// when nothing saved it.
    fn finish(self, x: Id, out: Id) -> BlockMemory {
        let mem = self.t.memory(Some(out), super::overhead::round_size);
        let input_freed = if self.t.is_saved(x) || self.c.no_grad {
            0
        } else {
            super::overhead::round_size(self.t.elements(x) * self.t.width(x))
        };
        BlockMemory {
            kept: mem.kept,
            peak: mem.peak,
            weight_copies: self.weight_copies,
            input_freed,
        }
    }
}

/// The layer's norm in `slot`, if it has one.
fn norm_at(layer: &Layer, slot: NormSlot) -> Option<crate::model::Norm> {
    layer
        .norms
        .iter()
        .find(|(s, _)| *s == slot)
        .map(|(_, n)| *n)
}

/// Memory of one block's forward.
pub fn block_memory(c: BlockCtx, layer: &Layer) -> BlockMemory {
    Prog::new(c).run(layer)
}

/// [`block_memory`] with the allocator events of the same program.
pub fn block_program(c: BlockCtx, layer: &Layer) -> (BlockMemory, BlockEvents) {
    Prog::new(c).run_with_events(layer)
}
