//! Attention in a block program: the q/k/v projections per attention kind (separate, fused,
//! multi-head latent), the views a fused projection leaves, per-head norms, rotary
//! embeddings, and the attention core per kernel (eager's materialised scores, or the fused
//! SDPA/flash kernels' q, k, v, output and logsumexp).

use super::{Prog, Role};
use crate::estimate::tape::Id;
use crate::job::AttentionKernel;
use crate::model::{Attention, AttentionKind, Layer, Naming, NormKind, Positions};

/// Widths (values per token) of one attention's projections.
#[derive(Debug, Clone, Copy)]
pub(super) struct Widths {
    pub(super) q: u64,
    pub(super) k: u64,
    pub(super) v: u64,
    /// All heads' values, which o_proj reads: with grouped k/v it is `heads · head_dim`, not
    /// the k/v width.
    pub(super) out: u64,
    pub(super) heads: u64,
    pub(super) kv_heads: u64,
}

impl Widths {
    pub(super) fn of(kind: AttentionKind) -> Self {
        match kind {
            AttentionKind::Standard {
                heads,
                kv_heads,
                head_dim,
            } => Widths {
                q: heads * head_dim,
                k: kv_heads * head_dim,
                v: kv_heads * head_dim,
                out: heads * head_dim,
                heads,
                kv_heads,
            },
            AttentionKind::Latent {
                heads,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
                ..
            } => Widths {
                q: heads * (qk_nope_head_dim + qk_rope_head_dim),
                k: heads * (qk_nope_head_dim + qk_rope_head_dim),
                v: heads * v_head_dim,
                out: heads * v_head_dim,
                heads,
                kv_heads: heads,
            },
            // A state-space layer runs its mixer (`ssm_mixer`), never attention.
            AttentionKind::StateSpace(_) => Widths {
                q: 0,
                k: 0,
                v: 0,
                out: 0,
                heads: 0,
                kv_heads: 0,
            },
        }
    }
}

/// q, k and v as the core receives them, with their element counts.
pub(super) struct Qkv {
    pub(super) q: Id,
    pub(super) k: Id,
    pub(super) v: Id,
    pub(super) qn: u64,
    pub(super) kn: u64,
    pub(super) vn: u64,
    /// Tokens on the key/value side (`batch · kv_seq`).
    pub(super) kv_tokens: u64,
}

impl Prog<'_> {
    /// Self- or cross-attention on `x` (queries) over `kv_src` (keys/values source).
    pub(super) fn attention(&mut self, x: Id, kv_src: Id, layer: &Layer, cross: bool) -> Id {
        let spec = self.c.spec;
        let att = if cross {
            layer.cross_attention.as_ref().unwrap_or(&layer.attention)
        } else {
            &layer.attention
        };
        if let Some(ssm) = att.kind.state_space() {
            // A hybrid's recurrent layer (Jamba): the mixer stands where attention does.
            return self.ssm_mixer(x, &ssm.clone());
        }
        if att.output_gate {
            return self.gated_attention(x, att);
        }
        let w = Widths::of(att.kind);
        let (q, k, v) = self.projections(x, kv_src, att, w);
        let ctx = self.core_after_projections(q, k, v, att, cross, true);
        // The DSA mask lives until the attention has read it.
        if let Some(m) = self.dsa_mask.take() {
            self.t.touch(m);
        }
        let out = self.linear_named(ctx, w.out, spec.hidden_size, att.bias.o, Role::O);
        // `LlamaAttention.forward`'s `query_states` (rotated) lives until it returns.
        if let Some(q) = self.query.take() {
            self.hold(q);
        }
        out
    }

    /// The attention core on projected q, k and v (Qwen3-Next's gated attention, its q and k
    /// already normed): rotary, the kernel, the context `o_proj` reads.
    pub(super) fn attention_core_from(&mut self, q: Id, k: Id, v: Id, att: &Attention) -> Id {
        self.core_after_projections(q, k, v, att, false, false)
    }

    /// Everything between the projections and `o_proj`: the fused projections' view copies,
    /// the q/k norms (when `norms`), rotary, Llama 4's L2 norm and temperature, the kernel. A
    /// layer reading another layer's keys ([`Attention::kv_shared`]) norms and rotates its
    /// queries only.
    pub(super) fn core_after_projections(
        &mut self,
        q: Id,
        k: Id,
        v: Id,
        att: &Attention,
        cross: bool,
        norms: bool,
    ) -> Id {
        let spec = self.c.spec;
        let w = Widths::of(att.kind);
        let kv_tokens = self.c.batch * self.c.kv_seq;
        let mut p = Qkv {
            q,
            k,
            v,
            qn: self.tokens * w.q,
            kn: kv_tokens * w.k,
            vn: kv_tokens * w.v,
            kv_tokens,
        };
        let rotary =
            !cross && !att.nope && matches!(spec.embedding.positions, Positions::Rotary { .. });
        self.fused_view_copies(&mut p, rotary);
        // Per-head q/k norms (Qwen3, Gemma-3), or over the whole projection (OLMoE).
        if let Some(n) = att.qk_norm.filter(|_| norms) {
            let (qd, kd) = if att.qk_norm_whole {
                (w.q, w.k)
            } else {
                (n.dim, n.dim)
            };
            p.q = self.norm(p.q, n.kind, qd);
            if !att.kv_shared {
                p.k = self.norm(p.k, n.kind, kd);
            }
        }
        if rotary {
            let (q, k) = (p.q, p.k);
            p.q = self.rotary(p.q, p.qn);
            if !att.kv_shared {
                p.k = self.rotary(p.k, p.kn);
            }
            // `query_states, key_states = apply_rotary_pos_emb(...)`: the projections stay
            // bound until both rotations return.
            self.hold(q);
            self.hold(k);
        }
        // Llama 4: the weightless L2 norm after RoPE, and on NoPE layers the query scaled by
        // the position's temperature (`modeling_llama4.py` `Llama4TextAttention.forward`).
        if att.qk_l2_norm {
            let hd = att.kind.qk_head_dim();
            p.q = self.l2_norm(p.q, hd);
            p.k = self.l2_norm(p.k, hd);
        }
        if att.nope && spec.naming == Naming::Llama4 {
            p.q = self.elementwise(&[p.q], &[]);
        }
        // OPT scales q by 1/√d right after the projection (a new tensor).
        if spec.naming == Naming::Opt {
            p.q = self.elementwise(&[p.q], &[]);
        }
        self.query = Some(p.q);
        if let Some((x, q_resid, ix, rope)) = self.dsa_pending.take() {
            self.dsa_mask = Some(self.dsa_indexer(x, q_resid, ix, rope));
            // `DeepseekV32Attention.forward`'s names hold q_b's and kv_b's outputs (`q_states`,
            // the views `value_states` / `k_pass`) through the indexer.
            for id in [q, k, v] {
                self.t.touch(id);
            }
        }
        // Under `generate` the attention module's `cache.update` runs here, before the
        // attention interface (`modeling_llama.py` `LlamaAttention.forward` and its kin): the
        // layer's cache is made from the rotated keys and values and the names rebound to it,
        // before `repeat_kv`, the mask's conversion or eager's scores read it
        // (`alloc_events/infer.rs` `prefill_block`, `prefill_walk.rs`).
        self.t.mark_attention(p.k, p.v);
        self.kernel_core(p, w, att)
    }

    /// The attention kernel the job's `attention` and the layer pick, on the prepared q, k and
    /// v: eager's scores and probabilities, or SDPA's / flash's fused call (with its mask's
    /// inputs where one is traced); returns the context.
    fn kernel_core(&mut self, mut p: Qkv, w: Widths, att: &Attention) -> Id {
        let latent = matches!(att.kind, AttentionKind::Latent { .. });
        // No SDPA kernel takes sink logits: transformers runs gpt-oss eager unless asked for
        // flash (`GptOssPreTrainedModel._supports_sdpa = False`), so SDPA reads as eager.
        let kernel = match self.c.kernel {
            AttentionKernel::Sdpa if att.sinks => AttentionKernel::Eager,
            k => k,
        };
        match kernel {
            AttentionKernel::Eager => self.eager_core(p, w, latent, att.sinks),
            AttentionKernel::Sdpa | AttentionKernel::Flash => {
                if kernel == AttentionKernel::Sdpa && self.mllama_masked(att) {
                    self.mllama_mask_inputs(&mut p, w);
                } else if kernel == AttentionKernel::Sdpa && self.sdpa_masked(att) {
                    let mask = self.masked_sdpa_inputs(&mut p, w);
                    let out = self.fused_core(&p, w);
                    if self.c.no_grad {
                        // The converted mask is the kernel's argument (aten `attention.cpp`
                        // `scaled_dot_product_attention` holds it in `attn_mask` through the
                        // backend's call): under `no_grad` it dies once the kernel returns.
                        self.t.touch(mask);
                    }
                    return out;
                } else if kernel == AttentionKernel::Sdpa && !self.traced_mask() {
                    // No mask: which kernel runs depends on the stack (`sdpa.rs`).
                    return self.sdpa_unmasked_core(p, w, att);
                }
                self.fused_core(&p, w)
            }
        }
    }

    /// The q, k and v projections as the family writes them: MLA's low-rank ones, one fused
    /// projection whose q, k and v are views, or three separate ones.
    fn projections(&mut self, x: Id, kv_src: Id, att: &Attention, w: Widths) -> (Id, Id, Id) {
        let h = self.c.spec.hidden_size;
        let bias = att.bias;
        match (self.c.spec.naming, att.kind) {
            (_, AttentionKind::Latent { .. }) => self.latent_projections(x, att.kind, w),
            (Naming::Gpt2 | Naming::BigCode | Naming::NeoX | Naming::Falcon | Naming::Phi3, _) => {
                // One fused projection; q, k and v are views of it.
                let qkv = self.linear_named(x, h, w.q + w.k + w.v, bias.q, Role::Qkv);
                (qkv, qkv, qkv)
            }
            _ => {
                let q = self.linear_named(x, h, w.q, bias.q, Role::Q);
                let k = self.linear_named(kv_src, h, w.k, bias.k, Role::K);
                let v = self.linear_named(kv_src, h, w.v, bias.v, Role::V);
                (q, k, v)
            }
        }
    }

    /// Multi-head latent attention (DeepSeek-V2 §2.1, `DeepseekV2Attention`): q through an
    /// optional low-rank `q_a`/norm/`q_b`, the compressed kv latent plus the rotary key, its
    /// norm, and `kv_b_proj` up to all heads' k_nope and v.
    fn latent_projections(&mut self, x: Id, kind: AttentionKind, w: Widths) -> (Id, Id, Id) {
        let AttentionKind::Latent {
            q_lora_rank,
            kv_lora_rank,
            qk_rope_head_dim,
            qk_nope_head_dim,
            v_head_dim,
            heads,
            indexer,
        } = kind
        else {
            unreachable!("latent_projections is called for latent attention only")
        };
        let h = self.c.spec.hidden_size;
        let mut q_resid = None;
        let q = match q_lora_rank {
            Some(r) => {
                let qa = self.linear(x, h, r, false);
                let qa = self.norm(qa, NormKind::RmsNorm, r);
                q_resid = Some(qa);
                self.linear(qa, r, w.q, false)
            }
            None => self.linear(x, h, w.q, false),
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
        // DeepSeek-V3.2 / GLM-5: the indexer runs after RoPE and `expand_kv`, just before the
        // attention kernel (`core_after_projections`).
        if let (Some(ix), Some(qr)) = (indexer, q_resid) {
            self.dsa_pending = Some((x, qr, ix, qk_rope_head_dim));
        }
        (q, k, kv)
    }

    /// A fused projection's q, k and v are views of one tensor. Eager attention copies the
    /// views it multiplies (matmul of non-contiguous operands); rotary embeddings read the
    /// views and make new q and k; SDPA keeps the views, so the fused tensor stays saved.
    /// GPT-NeoX's v is `qkv.view(b, s, heads, 3·hd).transpose(1, 2).chunk(3)[2]`: `matmul`
    /// reshapes it to [b·heads, s, hd] for `bmm` (aten `_matmul_impl`), a copy unless b is 1
    /// (a size-1 dimension merges with any stride, so `reshape` returns a view). At b = 1
    /// bmm saves that view, and with it the whole fused output (measured: Pythia-70M at
    /// 1 × 640 saves the 3·s·h qkv storage, at 3 × 224 a b·s·h copy).
    fn fused_view_copies(&mut self, p: &mut Qkv, rotary: bool) {
        if p.q != p.k {
            return;
        }
        let eager = self.c.kernel == AttentionKernel::Eager;
        let view_at_b1 = self.c.batch == 1 && self.c.spec.naming == Naming::NeoX;
        let w = self.w(p.q);
        if eager && !view_at_b1 {
            p.v = self.t.op(&[p.v], &[], p.vn, w);
        }
        if eager && !rotary {
            p.q = self.t.op(&[p.q], &[], p.qn, w);
            p.k = self.t.op(&[p.k], &[], p.kn, w);
        }
    }

    /// Rotary embeddings on `n` elements: x·cos + rotate_half(x)·sin; cos/sin are shared and
    /// need no grad, so nothing of x is saved: the rotated tensor is what attention saves.
    fn rotary(&mut self, x: Id, n: u64) -> Id {
        let rope_w = self.c.num.param;
        let xw = self.w(x);
        let w = xw.max(rope_w);
        let a = self.t.op(&[x], &[], n, w);
        let neg = self.t.op(&[x], &[], n / 2, xw);
        let rh = self.t.op(&[neg, x], &[], n, xw);
        let b2 = self.t.op(&[rh], &[], n, w);
        self.t.op(&[a, b2], &[], n, w)
    }

    /// Whether transformers hands SDPA an explicit mask on this layer: a sliding-window or
    /// chunked layer keeps its mask once the keys reach the window
    /// (`masking_utils._ignore_causal_mask_sdpa`: no skip when `kv_length >= local_attention_size`);
    /// full causal layers rely on `is_causal` instead.
    fn sdpa_masked(&self, att: &Attention) -> bool {
        // DeepSeek-V3.2 / GLM-5 always pass their sparse mask (`allow_is_causal_skip=False`).
        if matches!(
            att.kind,
            AttentionKind::Latent {
                indexer: Some(_),
                ..
            }
        ) {
            return true;
        }
        att.sliding_window
            .or(att.attention_chunk)
            .is_some_and(|w| self.c.kv_seq >= w)
    }

    /// SDPA with a mask (`integrations/sdpa_attention.py`): `use_gqa_in_sdpa` is false when a
    /// mask is given, so `repeat_kv` copies k and v out to all query heads (what the kernel
    /// then saves), and `scaled_dot_product_attention` turns the boolean mask into an additive
    /// one in the query's dtype (`convert_boolean_attn_mask`, aten `attention.cpp`), `[b, 1, s,
    /// kv_s]`, which the kernel saves for backward: one per layer. Returns the mask.
    fn masked_sdpa_inputs(&mut self, p: &mut Qkv, w: Widths) -> Id {
        if w.kv_heads > 0 && w.kv_heads < w.heads {
            self.repeat_kv(p, w);
        }
        let mask_w = if self.c.num.autocast { 2 } else { self.w(p.q) };
        let mask = self.t.op(
            &[p.q],
            &[],
            self.c.batch * self.c.seq * self.c.kv_seq,
            mask_w,
        );
        self.t.keep(mask);
        mask
    }

    /// The Qwen2-VL / Qwen2.5-VL vision tower's attention (`VisionAttention.forward`,
    /// `modeling_qwen2_vl.py` / `modeling_qwen2_5_vl.py`): one fused `qkv` projection whose
    /// q, k and v are views (`reshape(s, 3, heads, -1).permute(1, 0, 2, 3).unbind(0)`); the
    /// kernel saves v, a view, so the whole qkv output stays saved. Rotary runs in fp32
    /// (`vision_rotary`). With SDPA or eager the sequence is split at `cu_seqlens` (the
    /// block's batch is the number of images or windows) and each chunk attended on its own;
    /// `torch.cat` joins the chunk outputs into a new tensor, the one `proj` saves. Flash
    /// attention 2 takes `cu_seqlens` in one varlen call and needs no join.
    pub(super) fn qwen_vision_attention(&mut self, x: Id, layer: &Layer) -> Id {
        let att = &layer.attention;
        let w = Widths::of(att.kind);
        let d = self.c.spec.hidden_size;
        let qkv = self.linear_named(x, d, w.q + w.k + w.v, att.bias.q, Role::Qkv);
        let p = Qkv {
            q: self.vision_rotary(qkv, self.tokens * w.q),
            k: self.vision_rotary(qkv, self.tokens * w.k),
            v: qkv,
            qn: self.tokens * w.q,
            kn: self.tokens * w.k,
            vn: self.tokens * w.v,
            kv_tokens: self.tokens,
        };
        let ctx = match self.c.kernel {
            AttentionKernel::Eager => self.eager_core(p, w, false, false),
            AttentionKernel::Sdpa | AttentionKernel::Flash => self.fused_core(&p, w),
        };
        let ctx = if self.c.kernel == AttentionKernel::Flash {
            ctx
        } else {
            let cw = self.w(ctx);
            self.t.op(&[ctx], &[], self.tokens * w.out, cw)
        };
        self.linear_named(ctx, w.out, d, att.bias.o, Role::O)
    }

    /// `apply_rotary_pos_emb_vision` on `n` elements of a view of `src`: `q.float()` (a copy
    /// unless already fp32; not saved, as cos/sin need no grad), `q·cos + rotate_half(q)·sin`
    /// in fp32, then `.to(orig_dtype)` — in 16 bit a copy, and the tensor attention saves.
    fn vision_rotary(&mut self, src: Id, n: u64) -> Id {
        let w = self.w(src);
        let xf = self.view_fp32(src, n);
        let a = self.t.op(&[xf], &[], n, 4);
        let neg = self.t.op(&[xf], &[], n / 2, 4);
        let rh = self.t.op(&[neg, xf], &[], n, 4);
        let b = self.t.op(&[rh], &[], n, 4);
        let rotated = self.t.op(&[a, b], &[], n, 4);
        if w == 4 {
            rotated
        } else {
            self.t.op(&[rotated], &[], n, w)
        }
    }

    /// Width of the attention matmuls' outputs.
    pub(super) fn matmul_width(&self) -> u64 {
        if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        }
    }

    /// Eager attention (`eager_attention_forward`): k/v groups repeated, the b·heads·s×s
    /// scores, scaling, soft-capping, the mask, softmax and dropout all materialised, then
    /// probabilities × v and the transpose back.
    /// Its ops are the attention core selective checkpointing recomputes (`Tape::mark_core`).
    fn eager_core(&mut self, p: Qkv, w: Widths, latent: bool, sinks: bool) -> Id {
        let Qkv {
            q, mut k, mut v, ..
        } = p;
        let first = self.t.next_op();
        // MLA's values are a strided view of kv_b_proj's output (beside k_nope); the eager
        // matmul copies them contiguous, and the copy is what it saves
        // (DeepseekV2Attention.expand_kv + eager_attention_forward).
        if latent {
            let vw = self.w(v);
            v = self.t.op(&[v], &[], p.vn, vw);
        }
        // repeat_kv materialises the groups for eager attention.
        if w.kv_heads < w.heads {
            let (kw, vw) = (self.w(k), self.w(v));
            k = self.t.op(&[k], &[], p.kv_tokens * w.q, kw);
            let vn = p.kv_tokens * w.v * w.heads / w.kv_heads.max(1);
            v = self.t.op(&[v], &[], vn, vw);
        }
        let qi = self.mm_input(q);
        let ki = self.mm_input(k);
        let mmw = self.matmul_width();
        let scores_n = self.c.batch * w.heads * self.c.seq * self.c.kv_seq;
        let scores = self.t.op(&[qi, ki], &[qi, ki], scores_n, mmw);
        let masked = self.scale_cap_mask(scores, scores_n, mmw);
        let dropped = if sinks {
            self.sink_softmax(masked, scores_n, v)
        } else {
            let to_value = self.softmax(masked, scores_n, q, v);
            self.dropout(to_value, self.c.attn_dropout)
        };
        let pi = self.mm_input(dropped);
        let vi = self.mm_input(v);
        let ctx = self.t.op(&[pi, vi], &[pi, vi], self.tokens * w.out, mmw);
        // transpose(1, 2).contiguous(): a copy.
        let out = self.t.op(&[ctx], &[], self.tokens * w.out, mmw);
        self.t.mark_core(first);
        out
    }

    /// The scores scaled, soft-capped (Gemma-2) and masked.
    fn scale_cap_mask(&mut self, scores: Id, n: u64, mmw: u64) -> Id {
        let mut scaled = self.t.fused_op(&[scores], &[], n, mmw);
        // Gemma-2's soft-capping: `/ cap`, `tanh` (its output saved), `* cap`.
        if self.c.spec.softcapping.attention.is_some() {
            let d = self.t.op(&[scaled], &[], n, mmw);
            let th = self.t.op(&[d], &[], n, mmw);
            self.t.keep(th);
            scaled = self.t.op(&[th], &[], n, mmw);
        }
        // The additive mask (causal or padding) promotes to its dtype.
        let mask_w = self.c.num.param;
        self.t.fused_op(&[scaled], &[], n, mmw.max(mask_w))
    }

    /// Softmax in fp32 (explicit dtype in Llama-style code; autocast's fp32 list elsewhere),
    /// its output saved (and its input too before PyTorch 1.11: `Numerics::softmax_saves_input`),
    /// then cast to the value dtype where the family does.
    fn softmax(&mut self, masked: Id, n: u64, q: Id, v: Id) -> Id {
        let naming = self.c.spec.naming;
        let llama_style = !matches!(
            naming,
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
        // Under compile the partitioner saves the scores (a 16-bit bmm output under autocast)
        // and softmax's max and sum, and recomputes the probabilities in backward.
        let probs = self.t.fused_op(&[sm_in], &[], n, sm_w);
        self.t.keep_fused(probs);
        if self.c.num.softmax_saves_input {
            self.t.keep(sm_in);
        }
        if llama_style {
            let qw = self.w(q);
            self.cast(probs, qw)
        } else if matches!(naming, Naming::Gpt2 | Naming::BigCode) {
            let vw = self.w(v);
            self.cast(probs, vw)
        } else {
            probs
        }
    }

    /// Fused kernels (SDPA, flash) save q, k, v, the output and a logsumexp (b·heads·s, fp32);
    /// no s×s tensor. Grouped k/v are passed as is (GQA-aware kernels).
    pub(super) fn fused_core(&mut self, p: &Qkv, w: Widths) -> Id {
        let (k, v) = self.traced_repeat_kv(p, w);
        let qi = self.mm_input(p.q);
        let ki = self.mm_input(k);
        let vi = self.mm_input(v);
        self.t.keep(qi);
        self.t.keep(ki);
        self.t.keep(vi);
        let mmw = self.matmul_width();
        self.t.mark_attention(ki, vi);
        let out = self
            .t
            .op(&[qi, ki, vi], &[qi, ki, vi], self.tokens * w.out, mmw);
        self.t.keep(out);
        let lse = self
            .t
            .op(&[qi], &[], self.c.batch * w.heads * self.c.seq, 4);
        self.t.keep(lse);
        out
    }

    /// Grouped k/v as SDPA receives them under `torch.compile`: traced, transformers 5.x cannot
    /// rule out packed sequences (`masking_utils.find_packed_sequence_indices` skips its
    /// "one sequence per row" check while tracing), so `create_causal_mask` builds the b×1×s×s
    /// mask instead of relying on `is_causal`, and with a mask `use_gqa_in_sdpa` is false:
    /// `repeat_kv` materialises k and v at all heads (`integrations/sdpa_attention.py`), and SDPA
    /// saves those copies. The mask itself is made once per forward
    /// (`crate::estimate::compile::traced_causal_mask`).
    fn traced_repeat_kv(&mut self, p: &Qkv, w: Widths) -> (Id, Id) {
        if !self.traced_mask() || w.kv_heads >= w.heads {
            return (p.k, p.v);
        }
        let (kw, vw) = (self.w(p.k), self.w(p.v));
        let k = self.t.op(
            &[p.k],
            &[],
            p.kv_tokens * w.k * w.heads / w.kv_heads.max(1),
            kw,
        );
        let v = self.t.op(
            &[p.v],
            &[],
            p.kv_tokens * w.v * w.heads / w.kv_heads.max(1),
            vw,
        );
        (k, v)
    }

    /// Under `torch.compile` transformers hands SDPA the b×1×s×s causal mask it built while
    /// tracing (`traced_repeat_kv`).
    fn traced_mask(&self) -> bool {
        self.c.num.compile
            && self.c.kernel == AttentionKernel::Sdpa
            && self.c.causal
            && !self.c.no_grad
    }
}
