//! State-space mixers: which one ([`SsmVersion`]), its shapes and recurrent state ([`Ssm`]), and
//! Falcon-H1's mixer beside attention ([`ParallelSsm`]).

use super::serde_skip::{is_false, is_zero};
use serde::{Deserialize, Serialize};

/// Which state-space mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SsmVersion {
    /// Mamba (Gu & Dao 2023, Alg. 2): per-channel selective scan; `A_log [d_inner, d_state]`,
    /// `x_proj` to Δ (rank `dt_rank`), B and C; `dt_proj` back to `d_inner`
    /// (`modeling_mamba.py` MambaMixer).
    Mamba1,
    /// FalconMamba: Mamba with weightless RMS norms on B, C and Δ
    /// (`modeling_falcon_mamba.py` `rms_forward`): Mamba1's shapes.
    FalconMamba,
    /// Mamba2 (Dao & Gu 2024, "Transformers are SSMs", §7 SSD): scalar `A` per head, B and C
    /// per group straight out of `in_proj`, a gated RMSNorm before `out_proj`
    /// (`modeling_mamba2.py` Mamba2Mixer).
    Mamba2,
    /// Jamba's Mamba mixer (Lieber et al. 2024, "Jamba", §3; `modeling_jamba.py`
    /// `JambaMambaMixer`): Mamba1's shapes plus RMSNorms with weights on Δ (`dt_layernorm
    /// [dt_rank]`), B and C (`b_layernorm`, `c_layernorm` `[d_state]`) between `x_proj` and
    /// the scan.
    Jamba,
    /// Qwen3-Next's gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks",
    /// eq. 10; `modeling_qwen3_next.py` `Qwen3NextGatedDeltaNet`): a linear-attention mixer
    /// whose state is a `d_k × d_v` matrix per value head. Fields read: `heads` value heads
    /// (`linear_num_value_heads`), `groups` key heads (`linear_num_key_heads`), `d_state` the
    /// key head width, `d_inner = heads · v_head_dim`, `d_conv` the conv kernel.
    GatedDeltaNet,
    /// LFM2's gated short convolution (`modeling_lfm2.py` `Lfm2ShortConv`): `in_proj` to B, C
    /// and x (`3 · hidden`), `y = C · conv(B · x)` with a depthwise causal `conv [hidden, 1,
    /// conv_L_cache]`, then `out_proj`; `conv_bias` on all three. No scan: `d_inner =
    /// hidden`, `d_conv = conv_L_cache`, `d_state`, `heads`, `groups` 0, so the recurrent
    /// state is the conv window alone.
    ShortConv,
}

/// A state-space mixer's shapes, as transformers' mixers build them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ssm {
    pub version: SsmVersion,
    /// Inner width (`intermediate_size` = `expand · hidden_size`).
    pub d_inner: u64,
    /// State size per channel (Mamba) or per head dimension (Mamba2) (`state_size`).
    pub d_state: u64,
    /// Depthwise causal convolution width (`conv_kernel`).
    pub d_conv: u64,
    /// Mamba1: rank of Δ's projection (`time_step_rank`); Mamba2: 0.
    pub dt_rank: u64,
    /// Mamba2: heads (`num_heads`, each `head_dim = d_inner / heads` wide); Mamba1: 0.
    pub heads: u64,
    /// Mamba2: B/C groups (`n_groups`); Mamba1: 0.
    pub groups: u64,
    /// The convolution carries a bias (`use_conv_bias`).
    pub conv_bias: bool,
    /// `in_proj` / `out_proj` carry biases (`use_bias`).
    pub proj_bias: bool,
    /// The cached SSM state is fp32 whatever the compute dtype (Nemotron-H
    /// `mamba_ssm_cache_dtype`, default `"float32"`, which vLLM honours; transformers' torch
    /// path returns `mamba2_chunk_scan`'s final state in fp32 too, `hidden_states.float()`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub state_fp32: bool,
    /// Mamba2's chunk length on transformers' torch SSD path (`chunk_size` /
    /// `mamba_chunk_size`, `mamba2_chunk_scan`) where the reader keeps it for the layer
    /// (Bamba, Granite 4.0-H, Nemotron-H); 0 where the torch path is not modelled per layer
    /// (Falcon-H1 keeps it in [`ParallelSsm::chunk`]; the fused kernel's estimate elsewhere).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk: u64,
}

impl Ssm {
    /// Channels the depthwise convolution runs over: `d_inner` (Mamba1), `d_inner + 2 ·
    /// groups · d_state` (Mamba2: x, B and C go through it together).
    pub fn conv_dim(&self) -> u64 {
        match self.version {
            SsmVersion::Mamba2 | SsmVersion::GatedDeltaNet => {
                self.d_inner + 2 * self.groups * self.d_state
            }
            _ => self.d_inner,
        }
    }

    /// Bytes of recurrent state one sequence holds in this layer with `width`-byte compute
    /// values: the conv state in the compute dtype; the SSM state too, except where it is fp32:
    /// the gated DeltaNet's (`torch_chunk_gated_delta_rule` computes in fp32 and returns its
    /// final state so), one marked [`Ssm::state_fp32`] (the config's cache dtype, which vLLM
    /// honours), and every SSM state in transformers' cache (`in_transformers`): the cache
    /// allocates `zeros_like` of the final state the mixer returns (`cache_utils.py`
    /// `LinearAttentionLayer.lazy_initialization`), and that state is fp32 on every path —
    /// Mamba2's `mamba2_chunk_scan` scans `hidden_states.float()` and mamba_ssm's
    /// `_state_passing_fwd` makes `final_states` in `torch.float32`; Mamba's torch scan adds
    /// the fp32 `deltaB_u` into it and `selective_scan_fn`'s `last_state` is a slice of its
    /// fp32 saved states (`modeling_mamba.py` `selective_scan`, transformers 5.24).
    pub fn state_bytes(&self, width: u64, in_transformers: bool) -> u64 {
        let (conv, ssm) = self.state_values();
        let ssm_width = match self.version {
            SsmVersion::GatedDeltaNet => 4,
            _ if self.state_fp32 || in_transformers => 4,
            _ => width,
        };
        conv.saturating_mul(width)
            .saturating_add(ssm.saturating_mul(ssm_width))
    }

    /// Values of recurrent state one sequence holds in this layer: the convolution's last
    /// `d_conv` inputs (`conv_states [conv_dim, d_conv]`) and the SSM state (`ssm_states
    /// [d_inner, d_state]`; Mamba2 `[heads, head_dim, d_state]`, the same count), as the
    /// mixers' cache path allocates them (transformers 5.x `cache_utils.py`
    /// `LinearAttentionLayer`; `modeling_mamba.py` / `modeling_mamba2.py` `cache_params`).
    /// LFM2's short convolution keeps only `conv_states [hidden, conv_L_cache]` of `B · x`
    /// (`Lfm2ShortConv.forward` → `cache.update_conv_state`, whose `lazy_initialization`
    /// allocates `(*conv_states.shape[:-1], conv_kernel_size)`). Constant in context length.
    pub fn state_values(&self) -> (u64, u64) {
        (self.conv_dim() * self.d_conv, self.d_inner * self.d_state)
    }
}

/// Falcon-H1's Mamba2 mixer beside attention (Zuo et al. 2025, "Falcon-H1", §2.1 parallel
/// hybrid design; transformers 5.x `modeling_falcon_h1.py` `FalconH1DecoderLayer.forward`:
/// `mamba(h) · ssm_out_multiplier + self_attn(h · attention_in_multiplier) ·
/// attention_out_multiplier`, `FalconH1Mixer`). The muP multipliers scale activations only;
/// `mup_vector` is a non-persistent buffer, no parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelSsm {
    /// The mixer's shapes: `version` Mamba2, `d_inner` = `mamba_d_ssm` (or `mamba_expand ·
    /// hidden_size`), `proj_bias` = `mamba_proj_bias` (on `in_proj` only).
    pub ssm: Ssm,
    /// `projectors_bias`: `out_proj` carries a bias.
    pub out_bias: bool,
    /// `mamba_rms_norm`: a gated RMSNorm (`norm [d_inner]`, per group) before `out_proj`;
    /// otherwise the scan output is gated by `silu(z)` with no norm.
    pub gated_norm: bool,
    /// `mamba_norm_before_gate` (with `gated_norm`): normalise, then gate; else gate first.
    pub norm_before_gate: bool,
    /// `mamba_chunk_size`: the chunk length of the SSD's torch path (`mamba2_chunk_scan`).
    pub chunk: u64,
}
