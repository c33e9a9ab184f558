//! The inventory of a layer's token mixer: standard and latent (MLA) attention, and the
//! state-space (Mamba) mixer, named as the family's checkpoints name them.

use super::builder::{mul, overflow, Builder};
use super::Component;
use crate::error::CoreError;
use crate::model::*;

impl Builder<'_> {
    pub(super) fn attention(
        &mut self,
        a: &str,
        att: &Attention,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        if att.is_absent() {
            return Ok(());
        }
        match att.kind {
            AttentionKind::Standard {
                heads,
                kv_heads,
                head_dim,
            } => self.standard_attention(a, att, (heads, kv_heads, head_dim), l)?,
            AttentionKind::Latent { .. } => self.latent_attention(a, att, l)?,
            AttentionKind::StateSpace(ssm) => self.state_space(a, &ssm, l)?,
        }
        if let Some(n) = att.qk_norm {
            // OLMoE normalises the whole q and k projections (`q_norm [heads · head_dim]`,
            // `k_norm [kv_heads · head_dim]`); the others one head.
            let (q, k) = if att.qk_norm_whole {
                let k = att.kind;
                (k.heads() * k.qk_head_dim(), k.kv_heads() * k.qk_head_dim())
            } else {
                (n.dim, n.dim)
            };
            // LFM2 calls them `q_layernorm` / `k_layernorm` (`Lfm2Attention.__init__`).
            let (qn, kn) = match self.spec.naming {
                Naming::Lfm2 => ("q_layernorm", "k_layernorm"),
                _ => ("q_norm", "k_norm"),
            };
            self.norm(&format!("{a}.{qn}"), Norm { dim: q, ..n }, l)?;
            self.norm(&format!("{a}.{kn}"), Norm { dim: k, ..n }, l)?;
        }
        if att.sinks {
            let heads = att.kind.heads();
            self.push(format!("{a}.sinks"), vec![heads], l, Component::Attention)?;
        }
        Ok(())
    }

    /// A state-space mixer's tensors, as transformers' `MambaMixer` / `FalconMambaMixer`
    /// (`in_proj [2·d_inner, h]`, depthwise `conv1d [d_inner, 1, d_conv]`, `x_proj [dt_rank +
    /// 2·d_state, d_inner]`, `dt_proj [d_inner, dt_rank]` with bias, `A_log [d_inner,
    /// d_state]`, `D [d_inner]`, `out_proj [h, d_inner]`) and `Mamba2Mixer` (`in_proj [d_inner +
    /// conv_dim + heads, h]`, `conv1d [conv_dim, 1, d_conv]`, `dt_bias`, `A_log`, `D` `[heads]`,
    /// the gated `norm [d_inner]`, `out_proj`) build them; Jamba's mixer adds its Δ, B and C
    /// norms (`modeling_jamba.py` `JambaMambaMixer.dt_layernorm` / `b_layernorm` /
    /// `c_layernorm`).
    pub(super) fn state_space(
        &mut self,
        a: &str,
        s: &Ssm,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        if s.version == SsmVersion::GatedDeltaNet {
            return self.gated_delta(a, s, l);
        }
        if s.version == SsmVersion::ShortConv {
            return self.short_conv(a, s, l);
        }
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let mamba2 = s.version == SsmVersion::Mamba2;
        let in_out = if mamba2 {
            s.d_inner + s.conv_dim() + s.heads
        } else {
            2 * s.d_inner
        };
        self.linear(&format!("{a}.in_proj"), h, in_out, s.proj_bias, l, c)?;
        let conv = s.conv_dim();
        self.push(format!("{a}.conv1d.weight"), vec![conv, 1, s.d_conv], l, c)?;
        if s.conv_bias {
            self.push(format!("{a}.conv1d.bias"), vec![conv], l, c)?;
        }
        if mamba2 {
            self.push(format!("{a}.dt_bias"), vec![s.heads], l, c)?;
            self.push(format!("{a}.A_log"), vec![s.heads], l, c)?;
            self.push(format!("{a}.D"), vec![s.heads], l, c)?;
            self.norm(&format!("{a}.norm"), Norm::rms(s.d_inner), l)?;
        } else {
            let x_out = s.dt_rank + 2 * s.d_state;
            self.linear(&format!("{a}.x_proj"), s.d_inner, x_out, false, l, c)?;
            self.linear(&format!("{a}.dt_proj"), s.dt_rank, s.d_inner, true, l, c)?;
            self.push(format!("{a}.A_log"), vec![s.d_inner, s.d_state], l, c)?;
            self.push(format!("{a}.D"), vec![s.d_inner], l, c)?;
        }
        if s.version == SsmVersion::Jamba {
            self.norm(&format!("{a}.dt_layernorm"), Norm::rms(s.dt_rank), l)?;
            self.norm(&format!("{a}.b_layernorm"), Norm::rms(s.d_state), l)?;
            self.norm(&format!("{a}.c_layernorm"), Norm::rms(s.d_state), l)?;
        }
        self.linear(&format!("{a}.out_proj"), s.d_inner, h, s.proj_bias, l, c)
    }

    /// LFM2's gated short convolution (`modeling_lfm2.py` `Lfm2ShortConv.__init__`): `in_proj
    /// [3·hidden, hidden]`, the depthwise `conv [hidden, 1, conv_L_cache]`, `out_proj [hidden,
    /// hidden]`, each with a bias when `conv_bias`.
    fn short_conv(&mut self, a: &str, s: &Ssm, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let three_h = mul(3, h, "short-conv in_proj width")?;
        self.linear(&format!("{a}.in_proj"), h, three_h, s.proj_bias, l, c)?;
        self.push(format!("{a}.conv.weight"), vec![h, 1, s.d_conv], l, c)?;
        if s.conv_bias {
            self.push(format!("{a}.conv.bias"), vec![h], l, c)?;
        }
        self.linear(&format!("{a}.out_proj"), h, h, s.proj_bias, l, c)
    }

    /// Multi-head / grouped-query attention: q, k, v and output projections, fused or not as
    /// the family's checkpoints name them.
    fn standard_attention(
        &mut self,
        a: &str,
        att: &Attention,
        (heads, kv_heads, head_dim): (u64, u64, u64),
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let b = att.bias;
        let q = mul(heads, head_dim, "attention width")?;
        let kv = mul(kv_heads, head_dim, "key/value width")?;
        let qkv = q
            .checked_add(2 * kv)
            .ok_or_else(|| overflow("fused qkv width"))?;
        match self.spec.naming {
            Naming::Gpt2 | Naming::BigCode => {
                self.linear(&format!("{a}.c_attn"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.c_proj"), q, h, b.o, l, c)?;
            }
            Naming::NeoX | Naming::Falcon => {
                self.linear(&format!("{a}.query_key_value"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.dense"), q, h, b.o, l, c)?;
            }
            Naming::Phi3 => {
                self.linear(&format!("{a}.qkv_proj"), h, qkv, b.q, l, c)?;
                self.linear(&format!("{a}.o_proj"), q, h, b.o, l, c)?;
            }
            Naming::Bert | Naming::Roberta => {
                self.linear(&format!("{a}.self.query"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.self.key"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.self.value"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.output.dense"), q, h, b.o, l, c)?;
            }
            Naming::T5 => {
                for (n, out) in [("q", q), ("k", kv), ("v", kv)] {
                    self.linear(&format!("{a}.{n}"), h, out, false, l, c)?;
                }
                self.linear(&format!("{a}.o"), q, h, false, l, c)?;
                if let Some(buckets) = att.relative_bias_buckets {
                    self.push(
                        format!("{a}.relative_attention_bias.weight"),
                        vec![buckets, heads],
                        l,
                        c,
                    )?;
                }
            }
            Naming::Lfm2 => {
                // `Lfm2Attention`: Llama's projections with the output named `out_proj`.
                self.linear(&format!("{a}.q_proj"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.k_proj"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.v_proj"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.out_proj"), q, h, b.o, l, c)?;
            }
            Naming::Opt => {
                self.linear(&format!("{a}.k_proj"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.v_proj"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.q_proj"), h, q, b.q, l, c)?;
                self.linear(&format!("{a}.out_proj"), q, h, b.o, l, c)?;
            }
            _ => {
                // Qwen3-Next's gated attention: `q_proj` also yields the output gate.
                let qp = if att.output_gate { 2 * q } else { q };
                self.linear(&format!("{a}.q_proj"), h, qp, b.q, l, c)?;
                self.linear(&format!("{a}.k_proj"), h, kv, b.k, l, c)?;
                self.linear(&format!("{a}.v_proj"), h, kv, b.v, l, c)?;
                self.linear(&format!("{a}.o_proj"), q, h, b.o, l, c)?;
            }
        }
        Ok(())
    }

    /// DeepSeek-V2/V3 multi-head latent attention (transformers `modeling_deepseek_v3.py`,
    /// `DeepseekV3Attention`): low-rank query and key/value projections with their norms.
    fn latent_attention(
        &mut self,
        a: &str,
        att: &Attention,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let AttentionKind::Latent {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            indexer,
        } = att.kind
        else {
            return Ok(());
        };
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let b = att.bias;
        let qk_head = qk_nope_head_dim + qk_rope_head_dim;
        let q_out = mul(heads, qk_head, "MLA query width")?;
        match q_lora_rank {
            Some(r) => {
                self.linear(&format!("{a}.q_a_proj"), h, r, b.q, l, c)?;
                self.norm(&format!("{a}.q_a_layernorm"), Norm::rms(r), l)?;
                self.linear(&format!("{a}.q_b_proj"), r, q_out, false, l, c)?;
            }
            None => self.linear(&format!("{a}.q_proj"), h, q_out, false, l, c)?,
        }
        self.linear(
            &format!("{a}.kv_a_proj_with_mqa"),
            h,
            kv_lora_rank + qk_rope_head_dim,
            b.k,
            l,
            c,
        )?;
        self.norm(&format!("{a}.kv_a_layernorm"), Norm::rms(kv_lora_rank), l)?;
        let kv_b = mul(heads, qk_nope_head_dim + v_head_dim, "MLA kv_b width")?;
        self.linear(&format!("{a}.kv_b_proj"), kv_lora_rank, kv_b, false, l, c)?;
        let o_in = mul(heads, v_head_dim, "MLA output width")?;
        self.linear(&format!("{a}.o_proj"), o_in, h, b.o, l, c)?;
        match (indexer, q_lora_rank) {
            (Some(ix), Some(r)) if ix.own() => self.indexer(a, ix, r, l)?,
            (Some(ix), None) if ix.own() => {
                return Err(CoreError::field(
                    "q_lora_rank",
                    "the sparse-attention indexer reads the query latent; it needs a q_lora_rank",
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// DeepSeek Sparse Attention's lightning indexer, as `DeepseekV32Indexer.__init__`
    /// (`modeling_deepseek_v32.py`, transformers 5.24) builds it: `wq_b [heads · head_dim,
    /// q_lora_rank]`, `wk [head_dim, hidden]`, `k_norm` a LayerNorm of `head_dim` with weight and
    /// bias, `weights_proj [heads, hidden]`, none of the projections with a bias.
    fn indexer(
        &mut self,
        a: &str,
        ix: Indexer,
        q_lora_rank: u64,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let c = Component::Attention;
        let q_out = mul(ix.heads, ix.head_dim, "indexer query width")?;
        self.linear(
            &format!("{a}.indexer.wq_b"),
            q_lora_rank,
            q_out,
            false,
            l,
            c,
        )?;
        self.linear(&format!("{a}.indexer.wk"), h, ix.head_dim, false, l, c)?;
        self.norm(
            &format!("{a}.indexer.k_norm"),
            Norm::layer(ix.head_dim, true),
            l,
        )?;
        self.linear(
            &format!("{a}.indexer.weights_proj"),
            h,
            ix.heads,
            false,
            l,
            c,
        )?;
        Ok(())
    }
}
